"""Decode-loop edge cases on synthetic models: EOS in a block, the token budget, forced tokens, empty languages."""

from __future__ import annotations

import pytest
from synthetic import PrefixModel, letters_vocab, make_decoder

from constrained_spec.errors import EmptyLanguageError, TokenBudgetExceeded
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.sampling.distribution import SamplingPolicy

EOS = 9


class EosLover(PrefixModel):
    """Strongly prefers EOS whenever it can (so EOS lands inside drafted blocks)."""

    def logits(self, prefix):
        out = super().logits(prefix)
        out[EOS] += 8.0
        return out


def compile(regex: str):
    return AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(regex)


@pytest.mark.parametrize("seed", range(20))
def test_eos_inside_a_block_ends_generation_there(seed):
    automaton = compile(r"[abc]{1,8}")
    dec = make_decoder(PrefixModel(10, 1), EosLover(10, 2), automaton, SamplingPolicy(temperature=1.0, seed=seed),
                             num_draft_tokens=5, max_new_tokens=20, debug_checks=True)
    result = dec.run([0, 1])
    generated = dec.generated
    assert generated[-1] == EOS and EOS not in generated[:-1]
    assert result.token_ids == generated[:-1] and automaton.accepts(generated)
    assert dec.matcher.is_terminated()


@pytest.mark.parametrize("k", [0, 1, 4])
def test_max_new_tokens_is_never_exceeded(k):
    automaton = compile(r"[abc]{0,40}")
    for seed in range(10):
        dec = make_decoder(PrefixModel(10, 1, scale=0.1), PrefixModel(10, 2), automaton,
                                 SamplingPolicy(temperature=1.0, seed=seed), num_draft_tokens=k, max_new_tokens=5, debug_checks=True)
        result = dec.run([0])
        assert len(result.token_ids) <= 5


def test_budget_too_small_for_the_grammar_raises():
    automaton = compile(r"(abc){6}")
    dec = make_decoder(PrefixModel(10, 1), PrefixModel(10, 2), automaton, SamplingPolicy(), num_draft_tokens=3, max_new_tokens=4)
    with pytest.raises(TokenBudgetExceeded) as info:
        dec.run([0])
    assert info.value.partial_text.startswith("abc")


def test_grammar_forced_tokens_run_no_model():
    automaton = compile(r"cc")  # only 'cc' (id 8) or 'c','c': two tokenizations -> not forced
    assert automaton.single_allowed(automaton.initial_state) is None
    automaton = compile(r"abc")  # after 'abc' only EOS is allowed
    final = automaton.next_state(automaton.initial_state, 7)
    assert automaton.single_allowed(final) == EOS
    target = PrefixModel(10, 1)
    # seeded: whether the closing EOS is forced or comes as a bonus token depends on the draws
    dec = make_decoder(target, PrefixModel(10, 2), automaton, SamplingPolicy(temperature=1.0, seed=0), num_draft_tokens=3, max_new_tokens=10)
    result = dec.run([0])
    assert dec.generated[-1] == EOS and result.stats.forced_tokens >= 1


def test_empty_language_is_an_error():
    with pytest.raises(EmptyLanguageError):
        compile(r"xyz")  # the vocabulary cannot spell it


def test_same_seed_same_output_different_seed_may_differ():
    automaton = compile(r"[abc]{3,12}")
    def run(seed):
        return make_decoder(PrefixModel(10, 1), PrefixModel(10, 2), automaton, SamplingPolicy(temperature=1.0, seed=seed),
                                  num_draft_tokens=3, max_new_tokens=20).run([0]).token_ids
    assert run(5) == run(5)
    assert len({tuple(run(s)) for s in range(8)}) > 1
