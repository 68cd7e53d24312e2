"""Packed linear layers: the model fp16 packing gives, that its rows batched equal rows one at a
time, and that an int8-packed draft (rougher) leaves greedy speculative output exact."""

from __future__ import annotations

import pytest
import torch
from synthetic import make_decoder
from tiny_models import tiny_llama

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.torch.hf import HFModel
from constrained_spec.models.torch.packed_linear import (
    PackedFp16Linear,
    PackedInt8Linear,
    pack_linears,
    packing_available,
)

pytestmark = pytest.mark.skipif(not packing_available(), reason="torch build without fbgemm")


def test_packed_linear_is_the_linear_with_fp16_rounded_weights():
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 200)
    x = torch.randn(3, 5, 96)
    packed = PackedFp16Linear(lin)
    rounded = torch.nn.functional.linear(x, lin.weight.half().float(), lin.bias)
    exact = lin(x)
    y = packed(x)
    assert y.shape == (3, 5, 200) and y.dtype == torch.float32
    assert torch.allclose(y, rounded, atol=1e-4)
    # the rounding is real: the fp32 linear differs by more than the tolerance used above
    assert (y - exact).abs().max() > 1e-4


@pytest.mark.parametrize("rows", [2, 5, 9])
def test_a_block_of_rows_equals_the_rows_one_at_a_time(rows):
    """Greedy speculative output equals target-only output only if a verify of k+1 tokens gives
    the logits that k+1 single-token forwards give."""
    torch.manual_seed(1)
    packed = PackedFp16Linear(torch.nn.Linear(512, 1024))
    x = torch.randn(rows, 512)
    block = packed(x)
    single = torch.cat([packed(x[i : i + 1]) for i in range(rows)])
    assert torch.allclose(block, single, atol=1e-5, rtol=1e-5)


def test_pack_linears_replaces_every_linear_and_keeps_the_head_weight():
    model = tiny_llama(300, seed=4)
    ids = torch.randint(0, 300, (1, 10))
    with torch.no_grad():
        before = model(input_ids=ids).logits
    n_linear = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert pack_linears(model) == n_linear > 0
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    head = model.get_output_embeddings()
    assert isinstance(head, PackedFp16Linear) and head.weight is not None and head.weight.dtype == torch.float16
    with torch.no_grad():
        after = model(input_ids=ids).logits
    scale = before.abs().max()
    assert (after - before).abs().max() < 1e-2 * scale
    assert HFModel(model).can_restrict_head


def test_packing_refuses_non_fp32_weights():
    with pytest.raises(ModelLoadError, match="fp32"):
        PackedFp16Linear(torch.nn.Linear(4, 4).to(torch.bfloat16))


INT8 = pytest.mark.skipif(not packing_available("int8"), reason="torch build without fbgemm int8")


@INT8
def test_int8_linear_is_close_to_the_linear_but_not_equal():
    torch.manual_seed(2)
    lin = torch.nn.Linear(256, 300)
    x = torch.randn(4, 256)
    y, exact = PackedInt8Linear(lin)(x), lin(x)
    assert y.shape == exact.shape and y.dtype == torch.float32
    rel = ((y - exact).norm() / exact.norm()).item()
    assert 1e-4 < rel < 0.05  # rounded to int8 (weights per row, activations per call), not garbage


@INT8
def test_int8_draft_keeps_greedy_output_equal_to_the_target_alone(gpt2_tokenizer):
    """The draft's rounding may only cost acceptance: greedy speculative output with an int8 draft
    (here the target itself, int8-packed, so that it proposes often and is sometimes wrong) equals
    greedy target-only output, and its restricted and prefix heads work on the packed head."""
    from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
    from constrained_spec.grammar.vocab import build_vocabulary
    from constrained_spec.sampling.distribution import SamplingPolicy

    vocab = build_vocabulary(gpt2_tokenizer, 50257)
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(r'\{"name":"[a-z ]{3,30}","n":[0-9]{1,5}\}')
    target = HFModel(tiny_llama(50257, seed=7))
    draft_model = tiny_llama(50257, seed=7)
    assert pack_linears(draft_model, weights="int8") > 0
    assert isinstance(draft_model.get_output_embeddings(), PackedInt8Linear)
    draft = HFModel(draft_model)
    assert draft.can_restrict_head and draft.set_head_prefix(20_000)
    prompt = gpt2_tokenizer("A record:")["input_ids"]

    def run(draft_model, k):
        dec = make_decoder(target, draft_model, automaton, SamplingPolicy(temperature=0.0),
                                 num_draft_tokens=k, max_new_tokens=60, debug_checks=True)
        return dec.run(prompt)

    alone, spec = run(None, 0), run(draft, 4)
    assert spec.token_ids == alone.token_ids
    s = spec.stats
    assert s.model_proposed > 0 and 0 < s.accepted_tokens < s.drafted_tokens  # kept some, rejected some
    assert s.restricted_head_forwards + s.prefix_head_forwards > 0


@pytest.mark.parametrize("cls", [PackedFp16Linear, pytest.param(PackedInt8Linear, marks=INT8)])
@pytest.mark.parametrize("bias,keep", [(True, True), (False, False)])
def test_a_layer_rebuilt_from_its_stored_tensors_is_the_same_layer(cls, bias, keep):
    """What the packed model cache stores (fp16, or int8 and per-row scales: no fp32 weight) packs
    back into a layer whose outputs equal the original's bit for bit."""
    torch.manual_seed(3)
    lin = torch.nn.Linear(160, 72, bias=bias)
    original = cls(lin, keep_weight=keep)
    stored = original.stored_tensors()
    assert all(t.dtype != torch.float32 for k, t in stored.items() if k != "bias")
    assert ("bias" in stored) == bias
    rebuilt = cls.from_stored({k: v.clone() for k, v in stored.items()}, 160, 72, keep_weight=keep)
    x = torch.randn(7, 160)
    assert torch.equal(rebuilt(x), original(x))
    if keep:
        assert torch.equal(rebuilt.weight, lin.weight.detach().half())
    else:
        assert rebuilt.weight is None
    bad = dict(stored)
    key = next(k for k in stored if k != "bias")
    bad[key] = stored[key][:-1]  # one row short
    with pytest.raises(ModelLoadError, match=key):
        cls.from_stored(bad, 160, 72)
