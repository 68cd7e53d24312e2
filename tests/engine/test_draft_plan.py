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
    DRAFT_PREFILL_PER_TOKEN,
    EXPECTED_UNBOUNDED,
    JOIN_MIN_TOKENS,
    JOIN_MIN_VERIFIES,
    decode_cost,
    draft_pays,
    expected_new_tokens,
    gain_at_coverage,
    join_draft,
    plan_draft,
)
from constrained_spec.errors import ConfigError
from constrained_spec.grammar.automaton import AutomatonCompiler
from constrained_spec.grammar.length_bound import max_output_bytes
from constrained_spec.grammar.vocab import build_vocabulary
from constrained_spec.models.hf import HFModel
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
    assert DRAFT_GAIN_PER_TOKEN == DecodeConfig().draft_gain_per_token == 0.0
    assert not plan_draft("auto", 200, EXPECTED_UNBOUNDED, overlapped=False).use_draft
    assert plan_draft("auto", 200, EXPECTED_UNBOUNDED, overlapped=True).use_draft
    assert plan_draft("auto", 0, 5, overlapped=False).use_draft  # nothing to prefill: nothing to repay


def test_a_late_join_weighs_the_free_proposers_coverage_against_the_prefill():
    """The draft joins a request that started without it where the free proposers cover few tokens
    per forward, the output has far to go and the prompt is short enough to prefill again."""
    # the two measurements the gain line was fitted on (module text): JSON ~2 tokens a forward, CFG ~1.3
    assert gain_at_coverage(2.06) < 0 < gain_at_coverage(1.31)
    assert abs(gain_at_coverage(1.31) - 0.40) < 0.05
    assert gain_at_coverage(1.0) > gain_at_coverage(1.5) > gain_at_coverage(1.9)
    low = dict(generated=32, target_forwards=30)  # about one token a forward: the free proposers find little
    assert join_draft(**low, expected_tokens=256, prefill_tokens=200)
    assert not join_draft(**low, expected_tokens=256, prefill_tokens=20_000)  # a prefill the rest cannot repay
    assert not join_draft(**low, expected_tokens=36, prefill_tokens=200)  # too little left
    assert not join_draft(generated=32, target_forwards=15, expected_tokens=256, prefill_tokens=0)  # JSON-like coverage: no gain
    assert join_draft(generated=32, target_forwards=15, expected_tokens=256, prefill_tokens=200, gain_per_token=GAIN)
    # too little evidence yet
    assert not join_draft(JOIN_MIN_TOKENS - 1, JOIN_MIN_TOKENS - 1, 256, 0)
    assert not join_draft(4 * JOIN_MIN_TOKENS, JOIN_MIN_VERIFIES - 1, 256, 0)


def test_the_joined_draft_stays_only_while_its_tokens_cost_less():
    """The trial weighs tokens per decode cost (verifies, their rows, draft forwards) since the join
    against before it; too few tokens since the join: no verdict yet."""
    assert decode_cost(10, 0, 0) == 10
    assert decode_cost(10, 40, 40) > decode_cost(10, 40, 0) > decode_cost(10, 0, 0)
    before = (32, decode_cost(25, 10, 0))  # about 1.2 tokens per cost unit without the draft
    good = (40, decode_cost(10, 40, 40))  # four tokens a verify with the draft
    bad = (40, decode_cost(30, 40, 40))  # the draft's tokens mostly rejected
    assert draft_pays(before, good) is True
    assert draft_pays(before, bad) is False
    assert draft_pays(before, (JOIN_MIN_TOKENS - 1, 100.0)) is None


def test_the_option_is_checked():
    assert DecodeConfig().draft_plan == "auto"
    with pytest.raises(ConfigError, match="draft_plan"):
        DecodeConfig(draft_plan="never")
    with pytest.raises(ConfigError, match="draft_gain_per_token"):
        DecodeConfig(draft_gain_per_token=float("nan"))


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


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_a_left_out_draft_joins_where_the_free_proposers_find_little(gpt2_tokenizer, tiny_pair, record_grammar, temperature):
    """Free text after a ~400-token prompt, the measured default gain (0): the draft is left out at
    the start, the free proposers cover about a token per forward on tiny random models, so it joins
    after ``JOIN_MIN_TOKENS``, prefills the prompt and the output so far, and proposes. The caches stay
    in step (debug checks); greedy output equals target-only; a seeded sample repeats."""
    regex = r"[a-z ]{120,300}"
    automaton = record_grammar.compile(regex)
    target, draft = HFModel(tiny_pair[0]), HFModel(tiny_pair[1])
    prompt = gpt2_tokenizer(LONG_PROMPT + "Answer:")["input_ids"]
    runs = []
    for _ in range(2 if temperature else 1):
        dec = make_decoder(target, draft, automaton, SamplingPolicy(temperature=temperature), num_draft_tokens=4,
                           max_new_tokens=200, debug_checks=True, draft_plan="auto", prefill_overlap="off",
                           output_bound=max_output_bytes(regex), generator=torch.Generator().manual_seed(3))
        result = dec.run(prompt)
        stats = result.stats
        assert stats.draft_skipped and stats.draft_joined_at is not None and stats.draft_joined_at >= JOIN_MIN_TOKENS
        assert stats.draft_plan_reason.startswith("gain 0.00 < prefill")
        assert stats.draft_forwards > 0
        runs.append(result.token_ids)
    if temperature:
        assert runs[0] == runs[1]
    else:
        plain = make_decoder(target, None, automaton, SamplingPolicy(temperature=0.0), num_draft_tokens=0, max_new_tokens=200).run(prompt)
        assert runs[0] == plain.token_ids


@pytest.mark.parametrize("draft_seed,stays", [(1, True), (2, False)], ids=["draft-is-target", "unrelated-draft"])
def test_a_joined_draft_stays_only_where_it_pays(draft_seed, stays):
    """After its join, a draft equal to the target (every token kept) stays to the end; an unrelated
    draft, whose tokens are mostly rejected, costs more per token than decoding did before it and
    leaves after its trial. Greedy output equals target-only either way (debug checks on)."""
    from synthetic import PrefixModel, letters_vocab

    automaton = AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(r"[abc]{80,120}")
    prompt = [(5 * i + 2) % 9 for i in range(400)]
    target, draft = PrefixModel(10, seed=1), PrefixModel(10, seed=draft_seed)
    dec = make_decoder(target, draft, automaton, SamplingPolicy(temperature=0.0), num_draft_tokens=4, max_new_tokens=150,
                       debug_checks=True, draft_plan="auto", prefill_overlap="off", output_bound=120)
    result = dec.run(prompt)
    stats = result.stats
    assert stats.draft_skipped and stats.draft_joined_at is not None and stats.draft_forwards > 0
    if stays:
        assert stats.draft_left_at is None
    else:
        assert stats.draft_left_at is not None and stats.draft_left_at >= stats.draft_joined_at + JOIN_MIN_TOKENS
        assert draft.length == 0  # its cache freed
    plain = make_decoder(PrefixModel(10, seed=1), None, automaton, SamplingPolicy(temperature=0.0), num_draft_tokens=0,
                         max_new_tokens=150).run(prompt)
    assert result.token_ids == plain.token_ids
