"""The lookup gate: lookup plans lead a block only while they beat the draft model's tokens.

Unit checks of the arithmetic (hand-computed values), then the loop: a lookup that is always wrong
stops being proposed once it has been scored, the draft model (here as good as the target) takes
over, and greedy output is target-only greedy with and without the gate. Exactness under sampling
with the gate acting is in ``test_distribution.py``.
"""

from __future__ import annotations

import math

import pytest
from synthetic import PrefixModel, letters_vocab, make_decoder

from constrained_spec.engine.lookup_gate import LookupGate, first_run
from constrained_spec.engine.proposers import DraftContext, Proposal
from constrained_spec.engine.rates import expected_tokens
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.sampling.distribution import SamplingPolicy

REGEX = r"[abc]{40}"
PROMPT = [0, 1, 2, 0, 1, 2]


def test_expected_tokens_and_first_run_by_hand():
    assert expected_tokens([]) == 1.0
    assert math.isclose(expected_tokens([0.5, 0.5]), 1 + 0.5 + 0.25)
    assert math.isclose(expected_tokens([1.0, 0.0, 1.0]), 2.0)
    assert first_run([1, 2, 3], [1, 2, 3, 4]) == (3, 3)  # all kept
    assert first_run([1, 2, 3], [1, 9, 3]) == (1, 2)  # kept up to the first miss, which is judged
    assert first_run([1, 2, 3], [1]) == (1, 1)  # the rest was never judged
    assert first_run([5], [6]) == (0, 1)


def test_gate_follows_the_evidence():
    gate = LookupGate()
    assert not gate.worth_it(5, 5)  # priors: lookup has to prove itself first (scoring it costs nothing)
    gate.shadows = [(0, "lookup", [1, 2, 3, 4, 5])]
    gate.observe(["model"] * 5, 4, [1, 2, 3, 4, 9])  # one plan, right for 4 tokens
    assert gate.worth_it(5, 5)
    for _ in range(10):  # lookup wrong at once, the model kept
        gate.shadows = [(0, "lookup", [7, 7, 7])]
        gate.observe(["model"] * 5, 5, [1, 2, 3, 4, 5, 6])
    assert gate.lookup_rate().value < 0.3 and gate.model.value > 0.9
    assert not gate.worth_it(5, 5)
    for _ in range(30):  # the text turns: lookup right, the model wrong at once
        gate.shadows = [(0, "lookup", [1, 2, 3, 4, 5])]
        gate.observe(["model"] * 5, 0, [1])
    assert gate.worth_it(5, 5)
    assert gate.worth_it(3, 0)  # no room left: nothing to choose


def test_mid_block_plans_are_scored_only_where_their_context_was_kept():
    gate = LookupGate()
    before = (gate.lookup_rate().kept, gate.lookup_rate().judged)
    gate.shadows = [(2, "lookup", [8, 9])]  # made after two drafted tokens, of which the verify kept one
    gate.observe(["model", "model", "lookup"], 1, [4, 5])
    assert (gate.lookup_rate().kept, gate.lookup_rate().judged) == before and gate.shadows == []
    gate.shadows = [(2, "lookup", [8, 9, 7])]  # the same, with both kept: compared with what came after them
    gate.observe(["model", "model", "lookup", "lookup"], 3, [4, 5, 8, 9, 3])
    assert (gate.lookup_rate().kept, gate.lookup_rate().judged) == (2.0, 3.0)
    # the model: 1 of 2 kept in the first block, faded once, then 2 of 2
    d = gate.decay
    assert (gate.model.kept, gate.model.judged) == pytest.approx((1 * d + 2, 2 * d + 2))


def test_a_continuation_found_again_one_position_later_is_scored_once():
    gate = LookupGate()
    gate.record(0, "text", [1, 2, 3])
    gate.record(1, "text", [2, 3])  # the same continuation, shifted: not scored again
    gate.record(2, "text", [3, 4])
    gate.record(3, "text", [7])  # past the first plan's end: a new continuation
    assert [(p, plan) for p, _, plan in gate.shadows] == [(0, [1, 2, 3]), (3, [7])]
    gate.observe(["model"] * 4, 4, [1, 2, 9, 7, 5])
    assert (gate.lookup_rate("text").kept, gate.lookup_rate("text").judged) == (3.0, 4.0)  # 2 of 3, then 1 of 1


def test_each_kind_of_plan_has_its_own_rate():
    gate = LookupGate()
    for _ in range(5):  # n-gram plans wrong, text plans right
        gate.shadows = [(0, "ngram", [7, 7]), (0, "text", [1, 2])]
        gate.observe(["model"] * 3, 2, [1, 2, 3])
    assert gate.lookup_rate("ngram").value < 0.2 < 0.8 < gate.lookup_rate("text").value
    assert gate.worth_it(2, 2, "text") and not gate.worth_it(2, 2, "ngram")


class WrongLookup:
    """A "lookup" proposer that always proposes token 0 ('a'), which the grammar allows."""

    source = "lookup"
    kind = "ngram"

    def propose(self, ctx: DraftContext) -> list[Proposal]:
        return [Proposal(0)] * 4


def _greedy_run(gate: bool):
    vocab = letters_vocab()
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(REGEX)
    target = PrefixModel(vocab.size, seed=5)
    draft = PrefixModel(vocab.size, seed=5)  # the target itself: every model token is kept
    decoder = make_decoder(target, draft, automaton, SamplingPolicy(temperature=0.0), num_draft_tokens=4,
                           max_new_tokens=60, lookup_gate=gate, debug_checks=True)
    decoder.free = [WrongLookup()]
    decoder.run(list(PROMPT))
    return decoder


def test_a_wrong_lookup_is_gated_and_greedy_is_unchanged():
    vocab = letters_vocab()
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(REGEX)
    plain = make_decoder(PrefixModel(vocab.size, seed=5), None, automaton, SamplingPolicy(temperature=0.0),
                         num_draft_tokens=0, max_new_tokens=60)
    plain.run(list(PROMPT))
    gated, always = _greedy_run(True), _greedy_run(False)
    assert gated.generated == always.generated == plain.generated
    wrong = sum(1 for t in plain.generated if t != 0)
    assert wrong >= 3, "the target's greedy text must differ from the lookup's 'a' often enough"
    assert always.stats.lookup_gated == 0 and always.stats.lookup_proposed >= always.stats.target_forwards - 1
    assert gated.stats.lookup_gated > 0
    assert gated.stats.lookup_proposed < always.stats.lookup_proposed
    assert gated.stats.target_forwards < always.stats.target_forwards  # fewer verifies for the same text


@pytest.mark.parametrize("gate", [True, False])
def test_without_a_draft_model_lookup_is_never_gated(gate):
    vocab = letters_vocab()
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(REGEX)
    decoder = make_decoder(PrefixModel(vocab.size, seed=5), None, automaton, SamplingPolicy(temperature=0.0),
                           num_draft_tokens=4, max_new_tokens=60, lookup_gate=gate)
    decoder.free = [WrongLookup()]
    decoder.k = 4  # set at construction from the proposers it was given (none)
    decoder.run(list(PROMPT))
    assert decoder.lookup_gate is None and decoder.stats.lookup_gated == 0 and decoder.stats.lookup_proposed > 0
