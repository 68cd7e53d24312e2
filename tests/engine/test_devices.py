"""Every tensor the loop builds lives on the device of the model whose math uses it.

The CPU test puts the target on the ``meta`` device (shapes, no data) and the draft on the CPU, and
hands the loop a recording verifier: every tensor it receives (logits, q, drafted tokens, masks,
policy parameters, uniforms, point-mass flags) must be on the target's device. A mask, a q row or
a uniform built on the CPU and not moved fails it. The CUDA test (skipped without a GPU) runs the
real verify with the target on the GPU and the draft on the CPU and checks that a seeded sample is
the same as on the CPU alone (uniforms are drawn on the CPU from the request's generator).
"""

from __future__ import annotations

import pytest
import torch
from synthetic import PrefixModel, letters_vocab, make_decoder

from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.sampling import SamplingPolicy, VerifyResult

EOS = 9
LENGTH = 6  # the regex below: exactly six letters a/b, then EOS


class MetaModel(PrefixModel):
    """A target whose logits live on the ``meta`` device (no data)."""

    device = torch.device("meta")

    def extend(self, tokens: list[int]) -> torch.Tensor:
        return super().extend(tokens).to("meta")


class DeviceModel(PrefixModel):
    """A PrefixModel whose logits are moved to ``device``."""

    def __init__(self, vocab_size: int, seed: int, device: str) -> None:
        super().__init__(vocab_size, seed)
        self.device = torch.device(device)

    def extend(self, tokens: list[int]) -> torch.Tensor:
        return super().extend(tokens).to(self.device)


def automaton():
    return AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(r"[ab]{%d}" % LENGTH)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_tensor_handed_to_the_verifier_is_on_the_target_device(temperature):
    seen: list[tuple[str, torch.device]] = []
    calls = []

    def recording_verifier(*args, point_mass=None):
        names = ("target_logits", "draft_probs", "draft_tokens", "bitmask", "temperature", "top_k", "top_p", "uniforms")
        for name, value in zip(names, args):
            seen.append((name, value.device))
        if point_mass is not None:
            seen.append(("point_mass", point_mass.device))
        calls.append(len(args[2][0]))
        # keep nothing; the next token is 'a' (allowed at every position before the last letter)
        return VerifyResult(accepted=torch.tensor([0]), next_token=torch.tensor([0]), accept_prob=torch.zeros(1, 0))

    dec = make_decoder(MetaModel(10, 1), PrefixModel(10, 2), automaton(), SamplingPolicy(temperature=temperature, seed=0),
                       num_draft_tokens=3, max_new_tokens=LENGTH + 1, verifier=recording_verifier, debug_checks=True)
    dec.run([0, 1])
    assert dec.generated == [0] * LENGTH + [EOS]  # the verifier's tokens, then the forced EOS
    assert calls and max(calls) > 0, "the draft must have proposed"
    wrong = sorted({(name, str(device)) for name, device in seen if device != torch.device("meta")})
    assert not wrong, f"tensors built off the target's device: {wrong}"
    assert {name for name, _ in seen} >= {"target_logits", "draft_probs", "draft_tokens", "bitmask", "uniforms"}


def test_point_mass_proposals_reach_the_verifier_as_flags_not_rows():
    """Grammar-string proposals (point masses) are flagged; where every row is one, q is a broadcast
    zero row (stride 0: no memory per position), never a dense one-hot row per token."""
    import re

    from constrained_spec.engine.proposers import GrammarStrings
    from constrained_spec.sampling import verify

    seen = []

    def recording_verifier(*args, point_mass=None):
        seen.append((None if point_mass is None else point_mass.clone(), args[1].stride(), args[1].shape[1]))
        return verify(*args, point_mass=point_mass)

    pattern = r"[ab]cbcbcb[ab]"
    compiled = AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(pattern)
    strings = GrammarStrings(lambda text: [{"a": 0, "b": 1, "c": 2}[ch] for ch in text], compiled.vocab)
    dec = make_decoder(PrefixModel(10, 1), None, compiled, SamplingPolicy(temperature=1.0, seed=3), num_draft_tokens=4,
                       grammar_strings=strings, max_new_tokens=12, verifier=recording_verifier, debug_checks=True)
    result = dec.run([0])
    assert re.fullmatch(pattern, compiled.vocab.decode(result.token_ids))
    flagged = [(pm, stride) for pm, stride, k in seen if k > 0]
    assert flagged, "the grammar strings must have proposed"
    assert all(pm is not None and bool(pm.all()) and stride[1] == 0 for pm, stride in flagged), flagged


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_target_on_gpu_and_draft_on_cpu_give_the_cpu_sample(temperature):
    def sample(target_device: str) -> list[int]:
        dec = make_decoder(DeviceModel(10, 1, target_device), DeviceModel(10, 2, "cpu"), automaton(),
                           SamplingPolicy(temperature=temperature), num_draft_tokens=3, max_new_tokens=LENGTH + 1,
                           generator=torch.Generator().manual_seed(5), debug_checks=True)
        dec.run([0, 1])
        return dec.generated

    assert sample("cuda") == sample("cpu")


@pytest.mark.parametrize("policy,filters", [(SamplingPolicy(temperature=1.0), False), (SamplingPolicy(temperature=0.7, top_k=3), True),
                                            (SamplingPolicy(temperature=1.0, top_p=0.9), True), (SamplingPolicy(temperature=0.0), False)])
def test_the_loop_tells_a_fused_verifier_whether_rows_filter(policy, filters):
    """A verifier that declares ``takes_filters`` is told on the host whether top-k / top-p is on (so
    it never reads the policy tensors off the GPU); one that does not is called without it."""
    from constrained_spec.sampling import verify

    told = []

    def fused(*args, point_mass=None, filters=None):
        told.append(filters)
        return verify(*args, point_mass=point_mass)

    fused.takes_filters = True
    plain_calls = []

    def plain(*args, point_mass=None):
        plain_calls.append(1)
        return verify(*args, point_mass=point_mass)

    for verifier in (fused, plain):
        make_decoder(PrefixModel(10, 1), PrefixModel(10, 2), automaton(), policy, num_draft_tokens=3,
                     max_new_tokens=LENGTH + 1, verifier=verifier, debug_checks=True).run([0, 1])
    assert told and set(told) == {filters} and plain_calls


class AsyncDeviceModel(DeviceModel):
    """Logits copied to the device without waiting (as a real model's would already be there)."""

    def extend(self, tokens: list[int]) -> torch.Tensor:
        return PrefixModel.extend(self, tokens).to(self.device, non_blocking=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_host_syncs_per_step_on_cuda(temperature):
    """With both models on the GPU and the fused verifier, the loop waits for the device once per
    verify step (accepted length + next token, one transfer) and, per draft-model token, only for
    the drawn token (the draw's no-mass check and the token's transfer, back to back)."""
    import warnings

    from constrained_spec.sampling.kernels import get_verifier

    dec = make_decoder(AsyncDeviceModel(10, 1, "cuda"), AsyncDeviceModel(10, 2, "cuda"), automaton(), SamplingPolicy(temperature=temperature),
                       num_draft_tokens=3, max_new_tokens=LENGTH + 1, generator=torch.Generator().manual_seed(5),
                       verifier=get_verifier("auto"), draft_confidence=0.0)
    dec.run([0, 1])  # compile and warm up first
    dec = make_decoder(AsyncDeviceModel(10, 1, "cuda"), AsyncDeviceModel(10, 2, "cuda"), automaton(), SamplingPolicy(temperature=temperature),
                       num_draft_tokens=3, max_new_tokens=LENGTH + 1, generator=torch.Generator().manual_seed(5),
                       verifier=get_verifier("auto"), draft_confidence=0.0)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dec.run([0, 1])
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    verify_steps = dec.stats.target_forwards
    allowed = verify_steps + 2 * dec.stats.draft_forwards + 3  # + the proposer's once-per-request policy reads
    assert dec.stats.draft_forwards > 0
    assert syncs <= allowed, f"{syncs} host syncs for {verify_steps} verify steps and {dec.stats.draft_forwards} draft tokens"
