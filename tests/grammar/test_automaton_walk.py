"""The token walk that builds a state's mask (grammar.automaton.table_walk) against a plain
reference: the full-vocabulary column walk it replaced, and a token-by-token byte walk.

table_walk walks only the tokens whose first byte is live in the state; the result must be
the same set of ids in every state.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import real_tokenizer

from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler, CompiledAutomaton, table_walk
from constrained_spec.grammar.json_schema import schema_to_regex
from constrained_spec.grammar.vocab import build_vocabulary


def full_walk(table, dfa, dead, state) -> np.ndarray:
    """The previous implementation: every token, one byte column at a time."""
    alive = np.arange(len(table.ids))
    walk = np.full(len(table.ids), state, dtype=np.int32)
    for column in table.columns:
        alive = alive[: np.searchsorted(alive, len(column))]
        if not alive.size:
            break
        nxt = dfa[walk[alive], column[alive]]
        walk[alive] = nxt
        alive = alive[nxt != dead]
    return np.sort(table.ids[walk != dead])


def byte_walk(automaton: CompiledAutomaton, state: int) -> np.ndarray:
    out = []
    for tid, raw in automaton.vocab.tokens.items():
        s = state
        for b in raw:
            s = int(automaton.dfa[s, b])
            if s == automaton.dead:
                break
        if s != automaton.dead:
            out.append(tid)
    return np.array(sorted(out), dtype=np.int64)


REGEXES = [
    schema_to_regex(
        {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 12},
                "age": {"type": "integer", "minimum": 0, "maximum": 130},
                "tags": {"type": "array", "items": {"enum": ["a", "b c", "ü"]}},
            },
            "required": ["name"],
        }
    ).regex,
    schema_to_regex({"type": "string", "format": "date-time"}).regex,
    "[0-9]+(\\.[0-9]+)?",
    "(yes|no|maybe)",
    "[^\\x00]*",  # nearly every byte live: the unbucketed path
]


@pytest.fixture(scope="module")
def gpt2_vocab():
    return build_vocabulary(real_tokenizer("gpt-2"))


@pytest.mark.parametrize("regex", REGEXES)
def test_bucketed_walk_equals_full_walk(gpt2_vocab, regex):
    automaton = AutomatonCompiler(gpt2_vocab, disk_cache=False, compile_timeout=None).compile(regex)
    table, dfa, dead = automaton._table, automaton.dfa, automaton.dead
    states = range(automaton.num_states) if automaton.num_states <= 60 else np.random.default_rng(0).choice(
        automaton.num_states, 60, replace=False
    )
    nonempty = 0
    for state in states:
        got = np.sort(table_walk(table, dfa, dead, int(state)))
        want = full_walk(table, dfa, dead, int(state))
        assert np.array_equal(got, want), (regex[:60], state)
        nonempty += bool(got.size)
    assert nonempty > 0
    # and against the token-by-token walk, in a few states
    for state in list(states)[:3]:
        assert np.array_equal(np.sort(table_walk(table, dfa, dead, int(state))), byte_walk(automaton, int(state)))


def test_zero_length_tokens_are_allowed_everywhere():
    from constrained_spec.grammar.vocab import TokenVocabulary

    vocab = TokenVocabulary(tokens={0: b"a", 1: b"", 2: b"ab", 3: b"b", 4: b"ba"}, eos_token_ids=(5,), size=6)
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile("ab")
    table = automaton._table
    s0 = automaton.initial_state
    assert sorted(table_walk(table, automaton.dfa, automaton.dead, s0).tolist()) == [0, 1, 2]
    assert np.array_equal(np.sort(table_walk(table, automaton.dfa, automaton.dead, s0)),
                          full_walk(table, automaton.dfa, automaton.dead, s0))


BOUNDED = [
    schema_to_regex({"type": "object", "properties": {"note": {"type": "string", "maxLength": 60}}, "required": ["note"]}).regex,
    '"[a -]{0,40}"',  # runs of spaces and dashes: GPT-2 has tokens of 16-32 of them
]


@pytest.mark.parametrize("regex", BOUNDED)
def test_masks_shared_by_a_state_class_equal_each_states_own_walk(gpt2_vocab, regex):
    """Short tokens' masks are cached per class of states no 16-byte string tells apart, long tokens
    are walked per state: in every state the union must be exactly the state's own full walk."""
    automaton = AutomatonCompiler(gpt2_vocab, disk_cache=False, compile_timeout=None).compile(regex)
    table, dfa, dead = automaton._table, automaton.dfa, automaton.dead
    assert table.n_long > 0  # the vocabulary has tokens past SHORT_TOKEN_BYTES
    long_allowed = 0
    for state in range(automaton.num_states):
        want = full_walk(table, dfa, dead, state)
        if automaton.is_final(state):
            want = np.sort(np.concatenate([want, np.array(gpt2_vocab.eos_token_ids)]))
        got = automaton.allowed_ids(state)
        assert np.array_equal(got, want), (regex[:40], state)
        long_allowed += int(table_walk(table, dfa, dead, state, "long").size)
    assert long_allowed > 0  # some long token was allowed somewhere: the per-state part did work
    classes = {int(automaton._classes[s]) for s in range(automaton.num_states)}
    assert len(classes) < automaton.num_states / 2  # and states really shared a class (a bounded string)
    assert len(automaton._short_cache) == len(classes)


def test_depth_classes_split_states_a_short_string_tells_apart():
    from constrained_spec.grammar.backends.outlines_core import depth_classes

    # 'a{0,5}' as a chain: state i has read i a's; from i, 'a' * (5 - i) is the longest string that survives
    dead = 6
    dfa = np.full((7, 256), dead, dtype=np.int32)
    for i in range(5):
        dfa[i, ord("a")] = i + 1
    shallow, deep = depth_classes(dfa, dead, 2), depth_classes(dfa, dead, 8)
    # to depth 2, states 0..3 all let 'a' and 'aa' through; 4 lets only 'a'; 5 nothing
    assert len({int(shallow[i]) for i in range(4)}) == 1 and len({int(shallow[i]) for i in (3, 4, 5)}) == 3
    assert len({int(deep[i]) for i in range(6)}) == 6  # deep enough: every state differs
