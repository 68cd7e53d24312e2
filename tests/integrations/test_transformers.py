"""transformers' door: ConstrainedLogitsProcessor for model.generate and the speculative drop-in.

Oracles: jsonschema, ``re.fullmatch`` and lark judge the outputs; transformers' own greedy
``model.generate`` (with the processor) is the reference the drop-in must equal token for token.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import torch

from constrained_spec import CFG, Regex

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"], "additionalProperties": False}
PATTERN = r"(yes|no), [0-9]{1,3}"
GRAMMAR = CFG('start: "(" item ("," item)* ")"\nitem: /[a-c]/\n')


@pytest.fixture(scope="module")
def models(gpt2_tokenizer):
    from tiny_models import tiny_llama

    target, draft = tiny_llama(50257, seed=1), tiny_llama(50257, seed=2)
    for m in (target, draft):  # stop where the tokenizer's EOS is (a tiny Llama's config says id 2)
        m.generation_config.eos_token_id = gpt2_tokenizer.eos_token_id
        m.generation_config.pad_token_id = gpt2_tokenizer.eos_token_id
        m.generation_config.bos_token_id = None
    return target, draft


def prompt(tokenizer, text: str = "Answer:") -> torch.Tensor:
    return torch.tensor([tokenizer.encode(text)])


def processor(output_type, tokenizer):
    from constrained_spec.integrations.transformers import ConstrainedLogitsProcessor

    return ConstrainedLogitsProcessor(output_type, tokenizer)


def hf_greedy(model, tokenizer, ids, output_type, max_new_tokens=40, **kw):
    proc = processor(output_type, tokenizer)
    out = model.generate(ids, logits_processor=[proc], do_sample=False, max_new_tokens=max_new_tokens, **kw)
    return proc, out


def new_text(tokenizer, out, ids, row=0):
    return tokenizer.decode(out[row, ids.shape[1]:], skip_special_tokens=True)


@pytest.mark.parametrize("output_type, check", [
    (SCHEMA, lambda text: jsonschema.validate(json.loads(text), SCHEMA)),
    (Regex(PATTERN), lambda text: re.fullmatch(PATTERN, text).group()),
    (GRAMMAR, lambda text: __import__("lark").Lark(GRAMMAR.text).parse(text)),
])
def test_processor_output_validates(models, gpt2_tokenizer, output_type, check):
    target, _ = models
    ids = prompt(gpt2_tokenizer)
    proc, out = hf_greedy(target, gpt2_tokenizer, ids, output_type, max_new_tokens=60)
    assert out[0, -1].item() == gpt2_tokenizer.eos_token_id
    text = new_text(gpt2_tokenizer, out, ids)
    check(text)
    assert proc.parse(text) is not None
    # negative control: without the processor the same greedy output is not in the language
    free = target.generate(ids, do_sample=False, max_new_tokens=20)
    with pytest.raises(Exception):
        check(new_text(gpt2_tokenizer, free, ids))


def test_pydantic_model_output_type(models, gpt2_tokenizer):
    from pydantic import BaseModel, Field

    class Pet(BaseModel):
        kind: str = Field(max_length=5)
        legs: int = Field(ge=0, le=8)

    ids = prompt(gpt2_tokenizer)
    proc, out = hf_greedy(models[0], gpt2_tokenizer, ids, Pet, max_new_tokens=60)
    value = proc.parse(new_text(gpt2_tokenizer, out, ids))
    assert isinstance(value, Pet)


def test_processor_greedy_equals_engine_greedy_k0(models, gpt2_tokenizer):
    from constrained_spec.api import Generator

    target, _ = models
    gen = Generator(target, None, tokenizer=gpt2_tokenizer, progress=False, disk_cache=False)
    ids = prompt(gpt2_tokenizer)
    for output_type in (SCHEMA, Regex(PATTERN), GRAMMAR):
        _, out = hf_greedy(target, gpt2_tokenizer, ids, output_type, max_new_tokens=60)
        engine = gen.run(ids[0].tolist(), output_type, max_new_tokens=60, num_draft_tokens=0)
        assert out[0, ids.shape[1]:].tolist() == engine.token_ids + [gpt2_tokenizer.eos_token_id]


def test_batched_rows_each_with_their_own_grammar(models, gpt2_tokenizer):
    target, _ = models
    ids = torch.tensor([gpt2_tokenizer.encode("Answer: a"), gpt2_tokenizer.encode("Answer: b"), gpt2_tokenizer.encode("Answer: c")])
    types = [SCHEMA, Regex(PATTERN), GRAMMAR]
    proc, out = hf_greedy(target, gpt2_tokenizer, ids, types, max_new_tokens=60)
    texts = [new_text(gpt2_tokenizer, out, ids, r) for r in range(3)]
    jsonschema.validate(json.loads(texts[0]), SCHEMA)
    assert re.fullmatch(PATTERN, texts[1])
    __import__("lark").Lark(GRAMMAR.text).parse(texts[2])
    # each row is what it would be alone
    for r, output_type in enumerate(types):
        _, alone = hf_greedy(target, gpt2_tokenizer, ids[r:r + 1], output_type, max_new_tokens=60)
        assert new_text(gpt2_tokenizer, alone, ids[r:r + 1]) == texts[r]


def test_drop_in_greedy_equals_model_generate_with_the_processor(models, gpt2_tokenizer):
    from constrained_spec.integrations.transformers import generate

    target, draft = models
    ids = torch.tensor([gpt2_tokenizer.encode("Answer: a"), gpt2_tokenizer.encode("Answer: b")])
    types = [SCHEMA, Regex(PATTERN)]
    _, reference = hf_greedy(target, gpt2_tokenizer, ids, types, max_new_tokens=60)
    out = generate(target, gpt2_tokenizer, ids, types, assistant_model=draft, max_new_tokens=60, do_sample=False,
                   num_assistant_tokens=3, draft_plan="always")
    assert out.tolist() == reference.tolist()
    # the dict form with scores: the same sequences; the chosen token is each step's best allowed score
    rich = generate(target, gpt2_tokenizer, ids[:1], SCHEMA, assistant_model=draft, max_new_tokens=60,
                    return_dict_in_generate=True, output_scores=True, draft_plan="always")
    assert rich.sequences.tolist() == reference[:1, : rich.sequences.shape[1]].tolist()
    steps = torch.stack(rich.scores, 1)[0]
    assert steps.argmax(-1).tolist() == rich.sequences[0, ids.shape[1]:].tolist()


def _two_eos_generator(model, tokenizer, prefix: list[int]):
    """A Generator whose EOS ids are the tokenizer's and the id whose logit after ``prefix`` is
    nearest half a unit under it (a share of about 0.38 at T = 1: often sampled, never the likelier);
    with the model's probability of that second one among the two at T = 1, by a plain forward."""
    from constrained_spec.api import Generator

    eos = tokenizer.eos_token_id
    with torch.no_grad():
        last = model(input_ids=torch.tensor([prefix])).logits[0, -1].double()
    gap = (last - (last[eos] - 0.5)).abs()
    gap[[eos, *prefix[-1:]]] = float("inf")
    other = int(gap.argmin())
    share = float(torch.softmax(last[[eos, other]], -1)[1])
    return Generator(model, None, tokenizer=tokenizer, progress=False, disk_cache=False, eos_token_ids=(eos, other)), other, share


def test_drop_in_ends_a_sampled_row_with_the_eos_it_sampled(models, gpt2_tokenizer):
    """With two EOS ids, a sampled row ends with the EOS the engine drew, not the likelier one each
    time: over seeded rows of ``Regex("a")`` (one path: "a", then EOS) the second id comes up as
    often as the target's own probabilities say (binomial test against a plain forward). Greedy
    ends with the likelier, the tokenizer's."""
    from scipy.stats import binomtest

    from constrained_spec.integrations.transformers import generate

    target, _ = models
    ids, a, eos = prompt(gpt2_tokenizer), gpt2_tokenizer.encode("a"), gpt2_tokenizer.eos_token_id
    gen, other, share = _two_eos_generator(target, gpt2_tokenizer, ids[0].tolist() + a)
    assert 0.2 < share < 0.45, share
    rows = 60
    out = generate(target, gpt2_tokenizer, ids.repeat(rows, 1), Regex("a"), generator=gen, do_sample=True, temperature=1.0,
                   top_k=0, top_p=1.0, seed=0, max_new_tokens=4)
    assert out[:, ids.shape[1]:].shape[1] == 2 and out[:, ids.shape[1]].tolist() == a * rows
    ends = out[:, -1].tolist()
    assert set(ends) <= {eos, other}
    pvalue = binomtest(ends.count(other), rows, share).pvalue
    print(f"second EOS {other}: {ends.count(other)} of {rows} rows, expected share {share:.3f}, p = {pvalue:.3g}")
    assert pvalue > 1e-3
    greedy = generate(target, gpt2_tokenizer, ids, Regex("a"), generator=gen, do_sample=False, max_new_tokens=4)
    assert greedy[0, -1].item() == eos


def test_drop_in_returns_a_row_cut_by_the_budget(models, gpt2_tokenizer):
    from constrained_spec.integrations.transformers import generate

    target, draft = models
    ids = prompt(gpt2_tokenizer)
    out = generate(target, gpt2_tokenizer, ids, SCHEMA, assistant_model=draft, max_new_tokens=3)
    _, reference = hf_greedy(target, gpt2_tokenizer, ids, SCHEMA, max_new_tokens=3)
    assert out.tolist() == reference.tolist() and out.shape[1] == ids.shape[1] + 3


def test_drop_in_refuses_beams_by_name(models, gpt2_tokenizer):
    from constrained_spec.errors import ConfigError
    from constrained_spec.integrations.transformers import generate

    with pytest.raises(ConfigError, match="num_beams"):
        generate(models[0], gpt2_tokenizer, prompt(gpt2_tokenizer), SCHEMA, num_beams=2)


def test_one_processor_serves_successive_calls_and_sampled_rows(models, gpt2_tokenizer):
    target, _ = models
    proc = processor(Regex(PATTERN), gpt2_tokenizer)
    for text in ("Answer:", "Reply now, please:"):  # a new prompt starts the rows afresh
        ids = prompt(gpt2_tokenizer, text)
        torch.manual_seed(0)
        out = target.generate(ids, logits_processor=[proc], do_sample=True, num_return_sequences=3, max_new_tokens=12)
        assert out.shape[0] == 3
        for row in range(3):
            assert re.fullmatch(PATTERN, new_text(gpt2_tokenizer, out, ids, row)), new_text(gpt2_tokenizer, out, ids, row)


# -- the drop-in's keywords: model.generate's names, read into GenerateOptions (no model needed) ----

def test_an_unknown_keyword_is_refused_before_any_work():
    from constrained_spec.integrations.transformers import generate

    class Untouchable:  # any use of the model or tokenizer would fail differently
        def __getattr__(self, name):
            raise AssertionError(f"touched {name}")

    with pytest.raises(TypeError, match=r"generate\(\) got unexpected keyword argument\(s\) \['num_beam'\]"):
        generate(Untouchable(), Untouchable(), [[1, 2]], Regex("a"), num_beam=2)


def test_keywords_split_into_options_and_decode_config_fields():
    from constrained_spec.errors import ConfigError
    from constrained_spec.integrations.transformers import GenerateOptions

    options, decode = GenerateOptions.split(dict(max_new_tokens=7, do_sample=True, seed=3, num_assistant_tokens=2, adaptive=True,
                                                 use_cache=True, token_type_ids=None, num_beams=1, num_return_sequences=1))
    assert (options.max_new_tokens, options.do_sample, options.seed) == (7, True, 3)
    assert decode == {"num_draft_tokens": 2, "adaptive": True}  # DecodeConfig fields; ignored and default-1 keywords gone
    with pytest.raises(ConfigError, match="num_return_sequences"):
        GenerateOptions.split(dict(num_return_sequences=2))


def test_unset_settings_come_from_the_generation_config_as_in_transformers():
    from types import SimpleNamespace

    from constrained_spec.integrations.transformers import GenerateOptions

    config = SimpleNamespace(do_sample=True, temperature=0.7, top_k=50, top_p=0.9, max_new_tokens=None, max_length=30,
                             pad_token_id=[5, 6])
    options = GenerateOptions(top_k=0)
    policy = options.policy(config)
    assert (policy.temperature, policy.top_k, policy.top_p, policy.seed) == (0.7, 0, 0.9, None)  # a given keyword wins
    assert options.budget(config, prompt_width=12) == 18  # max_length less the prompt
    assert GenerateOptions(max_new_tokens=4).budget(config, 12) == 4
    assert GenerateOptions().budget(SimpleNamespace(), 25) == 1  # 20 by default, at least one
    assert options.pad(config, eos_ids=[2]) == 5 and options.pad(None, eos_ids=[2]) == 2
    greedy = GenerateOptions(do_sample=False).policy(config)
    assert (greedy.temperature, greedy.top_k, greedy.top_p) == (0.0, 0, 1.0)
