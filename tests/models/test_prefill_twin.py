"""The prefill twin (``prefill_dtype``): a prompt prefilled through a copy of the linear weights in
bf16 leaves a cache the decode model continues from.

Oracles: a fresh full forward of the decode model itself (transformers' own forward, no cache), and
the fp16 / int8 rounding of the original weights done here with torch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_llama

from constrained_spec.errors import ConfigError
from constrained_spec.models.torch.hf import HFModel
from constrained_spec.models.torch.packed_linear import PackedFp16Linear, PackedInt8Linear, pack_linears
from constrained_spec.models.torch.prefill_twin import CastLinear, attach_prefill, prefill_twin

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
IDS = list(range(7, 90))


def _model(seed: int = 1):
    model = tiny_llama(1000, seed=seed, hidden=64)
    with torch.no_grad():  # undo tiny_llama's large embeddings: the logits then depend on the context
        model.model.embed_tokens.weight.mul_(0.05)
    return model


def _continue(model, ids, dtype="same", split=0):
    """Logits of the last token after prefilling the others (through a twin in ``dtype``)."""
    wrapped = HFModel(model)
    attach_prefill(wrapped, dtype, split)
    wrapped.prefill(ids[:-1])
    assert wrapped.cache_length() == wrapped.length == len(ids) - 1
    return wrapped, wrapped.extend(ids[-1:])[0]


def _fresh(model, ids):
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0, -1].float()


def test_bf16_prefill_continues_within_bf16_tolerance_and_a_shifted_cache_does_not():
    model = _model()
    ref = _fresh(model, IDS)
    tol = 2.0 ** -8 * ref.abs().max().item()  # bf16's unit roundoff at the logits' scale
    same = _continue(model, IDS)[1]
    assert (same - ref).abs().max().item() < 1e-4  # the plain prefill: fp32 agreement
    wrapped, bf16 = _continue(model, IDS, "bf16")
    diff = (bf16 - ref).abs().max().item()
    assert 0 < diff < tol, (diff, tol)  # the twin ran (not bit-equal) and the cache is aligned
    layer = wrapped._cache.layers[0]
    assert layer.keys.dtype == torch.float32 and layer.keys.shape[-2] == len(IDS)  # prompt + the extended token
    # negative control: a cache one position off (the first prompt token dropped) is far outside
    shifted = _continue(model, IDS[1:], "bf16")[1]
    assert (shifted - ref).abs().max().item() > tol


def test_kv_of_the_twin_is_close_to_the_decode_models_own():
    model = _model()
    a, _ = _continue(model, IDS)
    b, _ = _continue(model, IDS, "bf16")
    for la, lb in zip(a._cache.layers, b._cache.layers):
        assert la.keys.shape == lb.keys.shape and la.values.dtype == lb.values.dtype == torch.float32
        scale = la.keys.abs().max().item()
        assert 0 < (la.keys - lb.keys).abs().max().item() < 2.0 ** -5 * scale


@pytest.mark.parametrize("dtype", ["same", "bf16", "fp32"])
def test_split_prefill_gives_the_same_cache_as_one_forward(dtype):
    model = _model()
    whole, last_whole = _continue(model, IDS, dtype)
    split, last_split = _continue(model, IDS, dtype, split=16)
    for la, lb in zip(whole._cache.layers, split._cache.layers):
        torch.testing.assert_close(la.keys, lb.keys, atol=1e-4 if dtype != "bf16" else 0.05, rtol=0.0)
    torch.testing.assert_close(last_whole, last_split, atol=1e-3 if dtype != "bf16" else 0.1, rtol=0.0)


def test_twin_of_a_packed_model_holds_its_rounded_weights():
    plain = _model()
    fp16, int8 = _model(), _model()
    pack_linears(fp16, keep_head_weight=False, weights="fp16")
    pack_linears(int8, keep_head_weight=False, weights="int8")
    name = "layers.0.mlp.up_proj"
    w = plain.model.get_submodule(name).weight.detach()
    layer16 = fp16.model.get_submodule(name)
    layer8 = int8.model.get_submodule(name)
    assert isinstance(layer16, PackedFp16Linear) and isinstance(layer8, PackedInt8Linear)
    assert torch.equal(layer16.dense_weight(), w.half().float())
    step = w.abs().amax(dim=1, keepdim=True) / 127.0  # one int8 step per row
    assert ((layer8.dense_weight() - w).abs() <= step / 2 + 1e-6).all()
    twin = prefill_twin(fp16, "fp32")
    assert isinstance(twin.get_submodule(name), CastLinear)
    assert torch.equal(twin.get_submodule(name).weight, w.half().float())
    assert twin.embed_tokens is fp16.model.embed_tokens  # shared, not copied
    assert prefill_twin(fp16, "fp32") is twin  # one twin per model and dtype
    # the packed model continues from its fp32 twin's cache as from its own prefill
    ref = _fresh(fp16, IDS)
    torch.testing.assert_close(_continue(fp16, IDS, "fp32")[1], ref, atol=2e-3, rtol=0.0)


def test_bad_options_are_config_errors(tiny_generator):
    with pytest.raises(ConfigError):
        attach_prefill(HFModel(_model()), "int4")
    with pytest.raises(ConfigError):
        attach_prefill(HFModel(_model()), "bf16", split=-1)
    with pytest.raises(ConfigError, match="prefill_chunk"):  # a batch chunks prompts its own way
        tiny_generator(draft=False, prefill_dtype="bf16", prefill_split=64, max_batch_size=2)
    from constrained_spec.config import ModelConfig

    with pytest.raises(ConfigError):
        ModelConfig(prefill_dtype="fp8")


@pytest.fixture(scope="module")
def lever_generator(tiny_generator):
    return tiny_generator(num_draft_tokens=3, max_new_tokens=300, debug_checks=True, prefill_dtype="bf16", draft_prefill_dtype="bf16",
                          prefill_split=5)


def test_greedy_speculative_equals_target_only_with_bf16_prefill(lever_generator):
    gen = lever_generator
    assert gen.prefill_twin_bytes > 0
    calls = []
    hooks = [m._prefill_twin.register_forward_hook(lambda *a: calls.append(1)) for m in (gen.target, gen.draft)]
    try:
        for name, prompt in [("order", "Order 17: two pens at 1.50 each for Ada, shipped to 12 Analytical Row, London."),
                             ("inventory", 'Stock: {"warehouse":"North","items":[{"sku":"ABC-1234","quantity":5}]}')]:
            schema = json.loads((SCHEMAS / f"{name}.json").read_text())
            base = gen.run(prompt, schema, temperature=0.0, num_draft_tokens=0, proposers=())
            spec = gen.run(prompt, schema, temperature=0.0, num_draft_tokens=4, proposers=("draft", "grammar", "lookup"))
            assert spec.token_ids == base.token_ids
            assert spec.stats.drafted_tokens > 0
    finally:
        for h in hooks:
            h.remove()
    assert len(calls) >= 6  # both twins ran, in chunks of 5 prompt tokens


def test_a_bf16_draft_prefill_alone_keeps_the_target_only_output(tiny_generator):
    """For the draft the lever changes only q: the output is the plain target's, token for token."""
    plain = tiny_generator(draft=False, max_new_tokens=300)
    lever = tiny_generator(num_draft_tokens=3, max_new_tokens=300, draft_prefill_dtype="bf16", debug_checks=True)
    assert lever.target._prefill_twin is None and lever.draft._prefill_twin is not None
    schema = json.loads((SCHEMAS / "order.json").read_text())
    prompt = "Order 17: two pens at 1.50 each for Ada, shipped to 12 Analytical Row, London."
    base = plain.run(prompt, schema, temperature=0.0)
    spec = lever.run(prompt, schema, temperature=0.0, proposers=("draft",))
    assert spec.token_ids == base.token_ids and spec.stats.drafted_tokens > 0
