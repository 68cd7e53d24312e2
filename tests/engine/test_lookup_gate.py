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
from constrained_spec.engine.rates import RunningRate, expected_tokens
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
def test_without_a_draft_model_or_host_costs_lookup_is_never_gated(gate):
    vocab = letters_vocab()
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(REGEX)
    decoder = make_decoder(PrefixModel(vocab.size, seed=5), None, automaton, SamplingPolicy(temperature=0.0),
                           num_draft_tokens=4, max_new_tokens=60, lookup_gate=gate)
    decoder.free = [WrongLookup()]
    decoder.k = 4  # set at construction from the proposers it was given (none)
    decoder.run(list(PROMPT))
    assert decoder.lookup_gate is None and decoder.stats.lookup_gated == 0 and decoder.stats.lookup_proposed > 0


def CPU_COSTS(n: float) -> float:
    """A verify of n tokens in one-token forwards, as on a CPU's batch-invariant kernels (a block of two: 1.6)."""
    return 1.0 + 0.6 * (max(n, 1.0) - 1.0)


def test_alone_length_by_hand():
    gate = LookupGate(verify_cost=CPU_COSTS)  # lookup's prior 0.4
    # one token: (1 + 0.4) / 1.6 = 0.875 < 1 / 1.0: the target alone gives more
    assert gate.alone_length(4, 4, fed=1) == 0
    gate.lookup["lookup"] = RunningRate(prior=0.9, weight=1.0)
    # rate 0.9: m=1 1.9/1.6=1.19, m=2 2.71/2.2=1.23, m=3 3.439/2.8=1.228: two tokens are best
    assert gate.alone_length(4, 4, fed=1) == 2
    assert gate.alone_length(1, 4, fed=1) == 1 and gate.alone_length(4, 0, fed=1) == 0
    assert LookupGate().alone_length(4, 3, fed=1) == 3  # no cost curve: the whole plan (up to the room)


class RightLookup:
    """A "lookup" proposer that proposes the next ``n`` tokens of a known text (the target's greedy output)."""

    source = "lookup"
    kind = "ngram"

    def __init__(self, text: list[int], start: int, n: int = 4) -> None:
        self.text, self.start, self.n = text, start, n

    def propose(self, ctx: DraftContext) -> list[Proposal]:
        at = len(ctx.ids) - self.start
        return [Proposal(t) for t in self.text[at : at + self.n]]


def _alone_run(proposer, costs):
    vocab = letters_vocab()
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(REGEX)
    decoder = make_decoder(PrefixModel(vocab.size, seed=5), None, automaton, SamplingPolicy(temperature=0.0),
                           num_draft_tokens=4, max_new_tokens=60, debug_checks=True, verify_cost=costs)
    decoder.free = [proposer]
    decoder.k = 4  # set at construction from the proposers it was given (none)
    decoder.run(list(PROMPT))
    return decoder


def test_without_a_draft_model_lookup_goes_ahead_only_where_it_beats_the_target_alone():
    """With this host's verify costs, a lookup that is always wrong stops being verified (each wrong block cost 1.6
    forwards for one token), one that is right keeps leading blocks; greedy output is the target's either way.
    Control: without the costs the wrong lookup is verified at every step."""
    vocab = letters_vocab()
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(REGEX)
    plain = make_decoder(PrefixModel(vocab.size, seed=5), None, automaton, SamplingPolicy(temperature=0.0),
                         num_draft_tokens=0, max_new_tokens=60)
    plain.run(list(PROMPT))
    wrong = _alone_run(WrongLookup(), CPU_COSTS)
    ungated = _alone_run(WrongLookup(), None)
    right = _alone_run(RightLookup(plain.generated, len(PROMPT)), CPU_COSTS)
    assert wrong.generated == ungated.generated == right.generated == plain.generated
    assert sum(1 for t in plain.generated if t != 0) >= 3
    assert ungated.lookup_gate is None and ungated.stats.lookup_proposed >= ungated.stats.target_forwards - 1
    assert wrong.stats.lookup_gated > 0 and wrong.stats.lookup_proposed <= ungated.stats.lookup_proposed // 4
    assert right.stats.lookup_accepted >= len(plain.generated) // 2 and right.stats.target_forwards < plain.stats.target_forwards // 2


def test_a_draft_left_out_by_the_plan_keeps_the_gate_only_with_host_costs():
    vocab = letters_vocab()
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(REGEX)
    for costs in (CPU_COSTS, None):
        decoder = make_decoder(PrefixModel(vocab.size, seed=5), PrefixModel(vocab.size, seed=5), automaton,
                               SamplingPolicy(temperature=0.0), num_draft_tokens=4, verify_cost=costs)
        decoder._leave_out_draft()
        assert (decoder.lookup_gate is not None) == (costs is not None)
