"""One request's decode state driven in the open: ``start``, ``step`` (a :class:`StepRecord` of what it
committed and the logits and grammar masks its verify used) and ``fork``, the API the loop's ``run`` and
SMC's particles both drive. Oracles: the synthetic target's logits are a pure function of the prefix
(``PrefixModel.logits``), and the grammar's masks are recomputed on a fresh matcher."""

from __future__ import annotations

import pytest
import torch
from synthetic import ForkModel, PrefixModel, letters_vocab, make_decoder

from constrained_spec.engine.loop import WEIGHED_STEPS, StepRecord, StepRules
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler, AutomatonMatcher
from constrained_spec.models.protocol import fork_model
from constrained_spec.sampling import unpack_bitmask
from constrained_spec.sampling.distribution import SamplingPolicy

EOS = 9
PROMPT = [0, 1]


def compile(regex: str):
    return AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(regex)


def mask_of(automaton, path: list[int]) -> torch.Tensor:
    """bool [V]: the tokens a fresh matcher allows after ``path`` (the oracle for the recorded masks)."""
    matcher = AutomatonMatcher(automaton)
    for token in path:
        matcher.advance(token)
    return unpack_bitmask(matcher.bitmask().unsqueeze(0), 10)[0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [0, 3])
def test_a_step_records_what_it_committed_and_the_logits_and_masks_it_used(seed, k):
    automaton = compile(r"[abc]{2,9}")
    target = PrefixModel(10, 1)
    dec = make_decoder(target, PrefixModel(10, 2) if k else None, automaton, SamplingPolicy(temperature=1.0, seed=seed),
                       num_draft_tokens=k, max_new_tokens=12)
    dec.start(PROMPT)
    while not dec.matcher.is_terminated():
        before = list(dec.committed)
        record = dec.step(12 - dec.stats.generated_tokens, WEIGHED_STEPS)
        assert isinstance(record, StepRecord) and record.tokens and dec.committed == before + record.tokens
        assert record.logits is not None and record.masks is not None and len(record.logits) >= len(record.tokens)
        for i, token in enumerate(record.tokens):  # position i of the block: the prefix before its i-th token
            prefix = before + record.tokens[:i]
            torch.testing.assert_close(record.logits[i], target.logits(prefix), rtol=0, atol=1e-6)
            allowed = unpack_bitmask(record.masks[i : i + 1], 10)[0]
            assert torch.equal(allowed, mask_of(automaton, prefix[len(PROMPT):]))
            assert allowed[token]


def test_forced_tokens_skip_the_verify_unless_the_rules_say_every_token_is_weighed():
    automaton = compile(r"abc")  # after 'abc' only EOS is allowed: a forced token
    records: dict[str, list[StepRecord]] = {}
    for name, rules in (("local", StepRules()), ("weighed", WEIGHED_STEPS)):
        dec = make_decoder(PrefixModel(10, 1), None, automaton, SamplingPolicy(temperature=1.0, seed=0), num_draft_tokens=0,
                           max_new_tokens=5)
        dec.start(PROMPT)
        records[name] = []
        while not dec.matcher.is_terminated():
            records[name].append(dec.step(5, rules))
    forced = [r for r in records["local"] if r.logits is None]  # the control: the shortcut is taken by default
    assert forced and all(r.masks is None and len(r.tokens) == 1 for r in forced)
    assert all(r.logits is not None for r in records["weighed"])


def _outside_unmasked_top2(rules: StepRules, automaton, target) -> tuple[int, int]:
    """(steps, tokens committed outside the top 2 of the unmasked distribution) over seeded runs with top-k 2;
    the record's masks are checked to be the grammar's own on the way."""
    steps = outside = 0
    for seed in range(12):
        dec = make_decoder(target, None, automaton, SamplingPolicy(temperature=1.0, top_k=2, seed=seed), num_draft_tokens=0,
                           max_new_tokens=6)
        dec.start(PROMPT)
        while not dec.matcher.is_terminated():
            before = list(dec.committed)
            record = dec.step(6 - dec.stats.generated_tokens, rules)
            grammar = mask_of(automaton, before[len(PROMPT):])
            if record.masks is not None:
                assert torch.equal(unpack_bitmask(record.masks[:1], 10)[0], grammar)
            top2 = set(torch.topk(target.logits(before), 2).indices.tolist())
            if top2 & set(grammar.nonzero().flatten().tolist()):
                steps += 1
                outside += record.tokens[0] not in top2
    return steps, outside


def test_the_cut_goes_into_the_mask_and_the_record_keeps_the_grammars():
    """With top-k under the weighed rules the verify samples only tokens in both the grammar and the cut of the
    whole vocabulary's distribution; the record's masks are still the grammar's (what the weight's allowed mass
    reads). Control: the local rules cut the masked distribution, which takes tokens outside that cut."""
    automaton = compile(r"[a-f]{1,6}")
    target = PrefixModel(10, 1, scale=0.3)  # flat: the masked top 2 often differ from the unmasked top 2
    steps, outside = _outside_unmasked_top2(WEIGHED_STEPS, automaton, target)
    assert steps > 10 and outside == 0
    steps, outside = _outside_unmasked_top2(StepRules(), automaton, target)
    assert steps > 10 and outside > 0


def test_a_fork_continues_as_its_parent_would():
    """Parent and fork, stepped from the same generator state, commit the same tokens (the fork's caches,
    grammar path and committed tokens are the parent's); the fork's matcher was replayed along the path."""
    automaton = compile(r"[abc]{4,10}")
    gen = torch.Generator().manual_seed(7)
    target, draft = ForkModel(10, 1), ForkModel(10, 2)

    def make(t, d, matcher):
        return make_decoder(t, d, matcher, SamplingPolicy(temperature=1.0), num_draft_tokens=2, max_new_tokens=10, generator=gen)

    parent = make(target, draft, AutomatonMatcher(automaton))
    parent.start(PROMPT, plan=False)
    parent.step(10, WEIGHED_STEPS)
    child = parent.fork(fork_model(parent.target), fork_model(parent.draft), AutomatonMatcher(automaton), make)
    assert child.committed == parent.committed and child.matcher.length == parent.matcher.length
    state = gen.get_state()
    a = parent.step(10, WEIGHED_STEPS).tokens
    gen.set_state(state)
    b = child.step(10, WEIGHED_STEPS).tokens
    assert a == b and child.committed == parent.committed
    child.check_invariants()
