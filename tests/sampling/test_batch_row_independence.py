"""A row's verify does not depend on the other rows of its batch (issue 45, item 5).

Rows with mixed policies (top-k, top-p, both, neither, greedy with and without a filter, several
temperatures) are verified together, as one batch of the same k and as the coordinator's padded
batch of different k (``engine.batching.pad_verify_rows``), and every row's outputs must be
bitwise (``torch.equal``) what the row gives alone, a batch of one:

* the torch reference, in this process: effective probabilities, acceptance probabilities,
  residuals and ``verify``'s outputs;
* the Triton path, in the CPU interpreter (subprocesses, :func:`sampling.test_kernels.run_triton_workers`):
  before the fix a batch with one filtering row went to the torch reference as a whole, so a row
  that does not filter got the reference's float32 rounding beside it and the kernel's alone.
"""

from __future__ import annotations

import pytest
import torch
from sampling.test_kernels import ARG_NAMES, HAS_TRITON, run_triton_workers

from constrained_spec.engine.batching import pad_verify_rows
from constrained_spec.sampling import SamplingPolicy, VerifyResult, verify
from constrained_spec.sampling.acceptance import acceptance_probs, residual
from constrained_spec.sampling.distribution import effective_probs, pack_bitmask, unpack_bitmask
from constrained_spec.sampling.verifier import VerifyCall

#: (temperature, top_k, top_p): neither filter, top-k, top-p, both, greedy plain and greedy with top-k
POLICIES = [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 5, 1.0), (0.8, 0, 0.9), (0.0, 0, 1.0), (1.3, 3, 0.8), (0.0, 2, 1.0), (1.2, 0, 1.0)]
VOCAB = 1500


def _row(g: torch.Generator, policy: tuple[float, int, float], k: int, point_masses: bool) -> VerifyCall:
    """One row's verifier call: seeded logits, a grammar mask, q of the row's policy, drafted tokens, uniforms."""
    params = SamplingPolicy(*policy).as_tensors(1)
    logits = torch.randn(1, k + 1, VOCAB, generator=g) * 4
    allowed = torch.rand(1, k + 1, VOCAB, generator=g) < 0.6
    allowed[..., 0] = True
    draft_logits = logits[:, :k] + torch.randn(1, k, VOCAB, generator=g)
    q = effective_probs(draft_logits, allowed[:, :k], params.temperature, params.top_k, params.top_p)
    tokens = torch.multinomial(q[0], 1, generator=g).T if k else torch.zeros(1, 0, dtype=torch.long)
    flags = torch.rand(1, k, generator=g) < 0.3 if point_masses else None
    uniforms = torch.rand(1, k + 1, generator=g)
    return VerifyCall(logits, q, tokens, pack_bitmask(allowed), params.temperature, params.top_k, params.top_p, uniforms, flags)


def _rows(seed: int, ks: list[int], point_masses: bool = False) -> list[VerifyCall]:
    """One row per policy, row b drafting ``ks[b]`` tokens."""
    g = torch.Generator().manual_seed(seed)
    return [_row(g, policy, k, point_masses) for policy, k in zip(POLICIES, ks)]


def _stack(calls: list[VerifyCall]) -> VerifyCall:
    """Rows of the same k as one batch."""
    def cat(name: str) -> torch.Tensor:
        return torch.cat([getattr(c, name) for c in calls])

    flags = None if calls[0].point_mass is None else cat("point_mass")
    return VerifyCall(cat("target_logits"), cat("draft_probs"), cat("draft_tokens"), cat("bitmask"), cat("temperature"), cat("top_k"),
                      cat("top_p"), cat("uniforms"), flags)


def _assert_row_equal(batched: VerifyResult, b: int, alone: VerifyResult, what: str) -> None:
    k = alone.accept_prob.shape[1]
    assert int(batched.accepted[b]) == int(alone.accepted[0]), what
    assert int(batched.next_token[b]) == int(alone.next_token[0]), what
    got, want = batched.accept_prob[b, :k], alone.accept_prob[0]
    assert torch.equal(got, want), f"{what}: accept_prob moved by {float((got - want).abs().max()):.3e}"


def _probs(call: VerifyCall) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The reference's p [B, k+1, V], acceptance probabilities [B, k] and residuals [B, k, V] of ``call``."""
    allowed = unpack_bitmask(call.bitmask, call.target_logits.shape[-1])
    p = effective_probs(call.target_logits, allowed, call.temperature, call.top_k, call.top_p)
    k = call.k
    return p, acceptance_probs(p[:, :k], call.draft_probs, call.draft_tokens, call.point_mass), residual(p[:, :k], call.draft_probs)


@pytest.mark.parametrize("seed", range(4))
def test_reference_rows_are_bitwise_the_row_alone(seed: int) -> None:
    calls = _rows(seed, [3] * len(POLICIES), point_masses=True)
    batch = _stack(calls)
    together, results = _probs(batch), batch.run(verify)
    for b, call in enumerate(calls):
        what = f"seed {seed}, row {b}, policy {POLICIES[b]}"
        for name, got, want in zip(("p", "accept_prob", "residual"), together, _probs(call)):
            assert torch.equal(got[b], want[0]), f"{what}: {name} moved by {float((got[b] - want[0]).abs().max()):.3e}"
        _assert_row_equal(results, b, call.run(verify), what)


@pytest.mark.parametrize("seed", range(3))
def test_reference_padded_rows_are_bitwise_the_row_alone(seed: int) -> None:
    calls = _rows(100 + seed, [0, 1, 3, 5, 2, 4, 1, 5], point_masses=True)
    padded, _ = pad_verify_rows(calls)
    results = padded.run(verify)
    for b, call in enumerate(calls):
        _assert_row_equal(results, b, call.run(verify), f"seed {seed}, row {b}, policy {POLICIES[b]}")


def _case(call: VerifyCall) -> dict:
    return {**dict(zip(ARG_NAMES, call.args())), "launch": {}}


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_triton_rows_are_bitwise_the_row_alone_beside_filtering_rows(tmp_path) -> None:
    """Each row of a mixed batch (same k, and padded from different k) through the Triton path is
    bitwise what the row gives alone through it; the rows that filter are the reference's, and
    the rows that do not filter the kernel's, whatever their neighbours ask for."""
    groups = [_rows(7, [3] * len(POLICIES)), _rows(8, [0, 1, 3, 5, 2, 4, 1, 5])]
    batches = [_stack(groups[0]), pad_verify_rows(groups[1])[0]]
    cases = [_case(c) for c in batches] + [_case(c) for calls in groups for c in calls]
    out = run_triton_workers(cases, tmp_path)
    alone = iter(range(len(batches), len(cases)))
    for n, calls in enumerate(groups):
        batched = VerifyResult(out["accepted"][n], out["next_token"][n], out["accept_prob"][n])
        for b, call in enumerate(calls):
            a = next(alone)
            own = VerifyResult(out["accepted"][a], out["next_token"][a], out["accept_prob"][a])
            what = f"batch {n}, row {b}, policy {POLICIES[b]}"
            _assert_row_equal(batched, b, own, what)
            if b in (2, 3, 5, 6):  # a row that filters is verified by the reference, alone or not
                _assert_row_equal(batched, b, call.run(verify), what + " (vs the reference)")
