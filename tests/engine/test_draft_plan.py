"""Whether a request uses the draft model, decided on its end-to-end cost (``engine.draft_plan``)."""

from __future__ import annotations

import pytest
import torch
from synthetic import make_decoder
from tiny_models import tiny_llama

from constrained_spec.config import DecodeConfig
from constrained_spec.engine.draft_plan import (
    BYTES_PER_TOKEN,
    DRAFT_GAIN_PER_TOKEN,
    DRAFT_GAIN_PER_TOKEN_LARK,
    DRAFT_PREFILL_PER_TOKEN,
    EXPECTED_UNBOUNDED,
    default_gain,
    expected_new_tokens,
    plan_draft,
)
from constrained_spec.errors import ConfigError
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.grammar.length_bound import max_output_bytes
from constrained_spec.grammar.vocab import build_vocabulary
from constrained_spec.models.torch.hf import HFModel
from constrained_spec.sampling.distribution import SamplingPolicy


def test_expected_tokens_come_from_the_budget_and_the_grammar():
    assert expected_new_tokens(512, None) == EXPECTED_UNBOUNDED
    assert expected_new_tokens(10, None) == 10
    assert expected_new_tokens(512, 16) == int(16 / BYTES_PER_TOKEN)
    assert expected_new_tokens(3, 16) == 3
    assert expected_new_tokens(512, 0) == 1


GAIN = 0.25  # a machine where the draft pays: a quarter of a target forward per token


def test_the_rule_weighs_the_gain_against_the_prefill():
    break_even = DRAFT_PREFILL_PER_TOKEN / GAIN  # expected tokens per prompt token
    prompt = 1000
    short, long = int(prompt * break_even) - 1, int(prompt * break_even) + 1
    assert not plan_draft("auto", prompt, short, overlapped=False, gain_per_token=GAIN).use_draft
    assert plan_draft("auto", prompt, long, overlapped=False, gain_per_token=GAIN).use_draft
    assert plan_draft("auto", prompt, short, overlapped=True, gain_per_token=GAIN).use_draft  # a hidden prefill costs no wait
    assert plan_draft("always", prompt, 1, overlapped=False).use_draft
    assert plan_draft("auto", prompt, short, overlapped=False, on_cpu=False).use_draft  # CPU constants only
    assert "<" in plan_draft("auto", prompt, short, overlapped=False, gain_per_token=GAIN).reason
    assert not plan_draft("auto", prompt, long, overlapped=True, gain_per_token=-0.1).use_draft  # a draft that costs


def test_the_measured_default_uses_the_draft_on_a_cpu_only_where_its_prefill_is_hidden():
    assert DecodeConfig().draft_gain_per_token is None  # by the kind of constraint
    assert default_gain("json") == default_gain("pydantic") == default_gain("regex") == DRAFT_GAIN_PER_TOKEN == 0.0
    assert not plan_draft("auto", 200, EXPECTED_UNBOUNDED, overlapped=False).use_draft
    assert plan_draft("auto", 200, EXPECTED_UNBOUNDED, overlapped=True).use_draft
    assert plan_draft("auto", 0, 5, overlapped=False).use_draft  # nothing to prefill: nothing to repay


def test_a_lark_grammars_output_keeps_the_draft_unless_short_after_a_long_prompt():
    """The free proposers find little in a Lark grammar's output (nothing forced, little to copy), so
    its measured gain is positive: the draft is used for an unbounded output after a 1,000-token
    prompt, left out of a 20-token budget after a 2,000-token one."""
    gain = default_gain("lark")
    assert gain == DRAFT_GAIN_PER_TOKEN_LARK > 0
    assert plan_draft("auto", 1000, expected_new_tokens(512, None), overlapped=False, gain_per_token=gain).use_draft
    assert not plan_draft("auto", 2000, expected_new_tokens(20, None), overlapped=False, gain_per_token=gain).use_draft


def test_the_option_is_checked():
    assert DecodeConfig().draft_plan == "auto"
    with pytest.raises(ConfigError, match="draft_plan"):
        DecodeConfig(draft_plan="never")
    with pytest.raises(ConfigError, match="draft_gain_per_token"):
        DecodeConfig(draft_gain_per_token=float("nan"))
    assert DecodeConfig(draft_gain_per_token=0.3).draft_gain_per_token == 0.3


@pytest.fixture(scope="module")
def tiny_pair():
    return tiny_llama(50257, seed=1), tiny_llama(50257, seed=2)


@pytest.fixture(scope="module")
def record_grammar(gpt2_tokenizer):
    vocab = build_vocabulary(gpt2_tokenizer, 50257)
    return AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None)


LONG_PROMPT = "Here is a long document about several records. " * 40


@pytest.mark.parametrize("regex,skipped", [(r"(yes|no)", True), (r'\{"name":"[a-z ]{3,60}","n":[0-9]{1,4}\}', False)],
                         ids=["short-answer", "record"])
def test_a_short_answer_leaves_the_draft_out_and_greedy_output_stays(gpt2_tokenizer, tiny_pair, record_grammar, regex, skipped):
    """On tiny models over GPT-2's tokenizer, a ~400-token prompt, a machine where the draft pays
    (``draft_gain_per_token=0.25``): a yes/no answer (at most 3 bytes) runs without the draft,
    which is never prefilled nor run; a record keeps it. Greedy output equals target-only either way."""
    automaton = record_grammar.compile(regex)
    target, draft = HFModel(tiny_pair[0]), HFModel(tiny_pair[1])
    prompt = gpt2_tokenizer(LONG_PROMPT + "Answer:")["input_ids"]
    assert len(prompt) > 300
    draft.reset()
    dec = make_decoder(target, draft, automaton, SamplingPolicy(temperature=0.0), num_draft_tokens=4, max_new_tokens=80,
                       debug_checks=True, draft_plan="auto", prefill_overlap="off", output_bound=max_output_bytes(regex),
                       draft_gain_per_token=GAIN)
    result = dec.run(prompt)
    assert result.stats.draft_skipped is skipped
    assert (result.stats.draft_forwards == 0 and draft.length == 0) if skipped else result.stats.draft_forwards > 0
    plain = make_decoder(target, None, automaton, SamplingPolicy(temperature=0.0), num_draft_tokens=0, max_new_tokens=80).run(prompt)
    assert result.token_ids == plain.token_ids


def test_the_plan_reads_no_clock_so_a_seed_repeats_its_sample(gpt2_tokenizer, tiny_pair, record_grammar):
    """At T = 1 the same seed gives the same tokens twice with the plan on (no timing enters it)."""
    regex = r"(yes|no|maybe)"
    automaton = record_grammar.compile(regex)
    target, draft = HFModel(tiny_pair[0]), HFModel(tiny_pair[1])
    prompt = gpt2_tokenizer(LONG_PROMPT + "Answer:")["input_ids"]
    runs = []
    for _ in range(2):
        dec = make_decoder(target, draft, automaton, SamplingPolicy(temperature=1.0), num_draft_tokens=4, max_new_tokens=20,
                           draft_plan="auto", prefill_overlap="off", output_bound=max_output_bytes(regex),
                           generator=torch.Generator().manual_seed(5))
        result = dec.run(prompt)
        assert result.stats.draft_skipped
        runs.append(result.token_ids)
    assert runs[0] == runs[1]


def test_the_generator_weighs_each_kind_of_output_by_its_own_gain(tiny_generator):
    """Through ``Generator.run`` on tiny models (CPU, no overlap, the default plan): a Lark grammar's
    unbounded output uses the draft, a short JSON answer after the same prompt leaves it out, and
    ``draft_gain_per_token`` set in the config overrides the kind's figure."""
    from constrained_spec import CFG

    gen = tiny_generator(draft_plan="auto", prefill_overlap="off", max_new_tokens=60)
    prompt = LONG_PROMPT + "Answer:"
    grammar = CFG('start: item~1..40\nitem: "a" | "b" | " "\n')
    lark = gen.run(prompt, grammar)
    assert not lark.stats.draft_skipped and lark.stats.draft_forwards > 0, lark.stats.draft_plan_reason
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
    short = gen.run(prompt, schema)
    assert short.stats.draft_skipped and short.stats.draft_forwards == 0
    assert short.stats.draft_plan_reason.startswith("gain 0.00 < prefill")
    costly = tiny_generator(draft_plan="auto", prefill_overlap="off", max_new_tokens=60, draft_gain_per_token=-0.5)
    assert costly.run(prompt, grammar).stats.draft_skipped
