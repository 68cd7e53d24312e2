"""After runs with many rejections, incremental caches equal a fresh full forward over the committed tokens."""

from __future__ import annotations

import pytest
import torch
from synthetic import make_decoder
from tiny_models import tiny_llama

from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.grammar.vocab import build_vocabulary
from constrained_spec.models.torch.hf import HFModel
from constrained_spec.models.torch.packed_linear import pack_linears, packing_available
from constrained_spec.sampling.distribution import SamplingPolicy

PACKING = [False, pytest.param(True, marks=pytest.mark.skipif(not packing_available(), reason="no fbgemm"))]


def _model(vocab: int, seed: int, packed: bool):
    model = tiny_llama(vocab, seed=seed)
    if packed:
        pack_linears(model)
    return model


def test_crop_takes_a_length_and_matches_a_fresh_forward():
    model = tiny_llama(300, seed=1)
    m = HFModel(model)
    ids = torch.randint(0, 300, (20,)).tolist()
    m.extend(ids[:15])
    m.crop(9)
    assert m.length == 9 and m.cache_length() == 9
    inc = m.extend(ids[9:20])
    full = model(input_ids=torch.tensor([ids])).logits[0, 9:20].float()
    assert torch.allclose(inc, full, atol=1e-4)


@pytest.mark.parametrize("packed", PACKING, ids=["fp32", "fp16w"])
def test_caches_follow_the_accepted_prefix_after_many_rejections(gpt2_tokenizer, packed):
    vocab = build_vocabulary(gpt2_tokenizer, 50257)
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(r'\{"name":"[a-z ]{5,40}","n":[0-9]{1,6}\}')
    target_model, draft_model = _model(50257, 1, packed), _model(50257, 2, packed)
    target, draft = HFModel(target_model), HFModel(draft_model)
    prompt = gpt2_tokenizer("Give me a record:")["input_ids"]
    rejections = 0
    for seed in range(3):
        dec = make_decoder(target, draft, automaton, SamplingPolicy(temperature=1.0, seed=seed),
                                 num_draft_tokens=4, max_new_tokens=80, debug_checks=True)
        result = dec.run(prompt)
        rejections += result.stats.drafted_tokens - result.stats.accepted_tokens
        committed = dec.committed
        assert automaton.accepts(result.token_ids)
        for model, wrapper in ((target_model, target), (draft_model, draft)):
            assert wrapper.cache_length() == wrapper.length <= len(committed)
            if wrapper.length == len(committed):
                wrapper.crop(len(committed) - 1)
            inc = wrapper.extend(committed[wrapper.length :])[-1]
            with torch.no_grad():
                full = model(input_ids=torch.tensor([committed])).logits[0, -1].float()
            assert torch.allclose(inc, full, atol=1e-3), float((inc - full).abs().max())
    assert rejections >= 10, "the test needs many rejections to mean anything"


@pytest.mark.parametrize("packed", PACKING, ids=["fp32", "fp16w"])
def test_restricted_head_gives_the_same_masked_distribution(packed):
    from constrained_spec.sampling.distribution import effective_probs

    model = _model(500, 3, packed)
    full, restricted = HFModel(model), HFModel(model)
    assert restricted.can_restrict_head
    ids = torch.randint(0, 500, (12,)).tolist()
    allowed_ids = torch.tensor(sorted(set(torch.randint(0, 500, (40,)).tolist())))
    allowed = torch.zeros(1, 500, dtype=torch.bool)
    allowed[0, allowed_ids] = True
    a = full.extend(ids)[-1:]
    b = restricted.extend_last(ids, allowed_ids).unsqueeze(0)
    assert restricted.length == full.length == 12 and restricted.cache_length() == 12
    one = torch.ones(1)
    pa = effective_probs(a, allowed, one, torch.zeros(1, dtype=torch.long), one)
    pb = effective_probs(b, allowed, one, torch.zeros(1, dtype=torch.long), one)
    assert torch.allclose(pa, pb, atol=1e-5)
    assert torch.isinf(b[0, ~allowed[0]]).all()


@pytest.mark.parametrize("packed", PACKING, ids=["fp32", "fp16w"])
def test_prefix_head_scores_the_leading_ids_like_the_full_head(packed):
    model = _model(500, 5, packed)
    full, cut = HFModel(model), HFModel(model)
    assert cut.set_head_prefix(120) and cut.head_prefix == 120
    ids = torch.randint(0, 500, (9,)).tolist()
    a = full.extend(ids)[-1]
    b = cut.extend_prefix_head(ids)
    assert cut.length == full.length == 9 and cut.cache_length() == 9
    assert torch.isinf(b[120:]).all() and not torch.isinf(b[:120]).any()
    assert torch.allclose(a[:120], b[:120], atol=1e-3 * float(a.abs().max()))
    assert not cut.set_head_prefix(500) and cut.head_prefix == 0  # covers the vocabulary: nothing kept
