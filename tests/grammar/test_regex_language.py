"""The byte automaton allows exactly the regex's strings: not fewer, not more.

The oracles are independent of the automaton: Python's ``re.fullmatch`` for membership, the
``regex`` package's partial matching for live prefixes (``regex.fullmatch(p, w, partial=True)``
matches iff ``w`` can still be extended to a full match), and hypothesis' ``from_regex`` for
positive samples of the larger languages. Every regex here is in the subset where Rust regex
(outlines-core) and Python agree: no anchors, no ``$``.

outlines-core 0.2.14's ``Index`` drops each transition from an accepting state to a non-accepting
one; built naively ``ab(cd)*`` accepts only ``ab``. ``test_naive_build_loses_strings`` keeps that
failure visible: the same oracle rejects the naive construction.
"""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path

import numpy as np
import pytest
import regex as regex_pkg

from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler, CompiledAutomaton
from constrained_spec.grammar.json_schema import schema_to_regex
from constrained_spec.grammar.vocab import TokenVocabulary

GRAMMARS = Path(__file__).resolve().parents[2] / "grammars"

#: (regex, alphabet, max length): every string over the alphabet up to that length is checked
ENUMERATED = [
    ("ab(cd)*", "abcd", 7),
    ("a|abc", "abc", 5),
    ("abc|a", "abc", 5),
    ("no(Xyes)?", "noXyes", 6),
    ("(a|ab)(c|bcd)", "abcd", 6),
    ("[0-9]{1,2}(\\.[0-9])?", "0.9a", 6),
    ("x{2,4}", "xy", 6),
    ("(ab|a)*b?", "ab", 7),
    ("a+b*a?", "abc", 6),
    ("(foo|foobar|f)+", "fobar", 7),
    ("[a-c]{0,3}d?", "abcde", 5),
    ("(a|b)*abb", "ab", 8),
    ("((a|b)(c|d)?)+", "abcd", 5),
    ("[^b]a?", "abü", 4),
    ("(ü|üb)+c?", "übc", 5),
    ("(?:yes|no|maybe)( please)?", "yesnomaybe pl", 5),
    ("-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?", "-0.1e+", 6),
    ("[a-z]*\\.?[a-z]+", "ab.", 6),
    ("(aa|b)*|c", "abc", 6),
    ("(abc){1,3}", "abc", 9),
]

#: larger languages: checked on hypothesis samples (positives) and their mutations (both ways)
SCHEMAS = [
    {"type": "number"},
    {"type": "integer"},
    {"type": "integer", "minimum": -5, "maximum": 123},
    {"type": "number", "minimum": 0.5, "maximum": 10},
    {"type": "number", "exclusiveMinimum": -2.25, "maximum": 7},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "time"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "ipv4"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "email"},
    {"type": "string", "pattern": "^a(bc)*d?$"},
    {"type": "string", "maxLength": 3},
]


def sampled_regexes() -> list[tuple[str, str]]:
    out = [(p.name, p.read_text().strip()) for p in sorted(GRAMMARS.glob("*.regex"))]
    out += [(repr(s), schema_to_regex(s).regex) for s in SCHEMAS]
    out += [(rx, rx) for rx, _, _ in ENUMERATED]
    return out


def byte_vocab() -> TokenVocabulary:
    tokens = {b: bytes([b]) for b in range(256)}
    return TokenVocabulary(tokens=tokens, eos_token_ids=(256,), size=257)


_VOCAB = byte_vocab()


def compiled(pattern: str) -> CompiledAutomaton:
    return AutomatonCompiler(_VOCAB, disk_cache=False, compile_timeout=None).compile(pattern)


def accepts(automaton: CompiledAutomaton, text: str) -> bool:
    state = automaton.walk_bytes(automaton.initial_state, text.encode())
    return state is not None and automaton.is_final(state)


def live(automaton: CompiledAutomaton, text: str) -> bool:
    return automaton.walk_bytes(automaton.initial_state, text.encode()) is not None


def strings(alphabet: str, max_len: int):
    for n in range(max_len + 1):
        for chars in itertools.product(alphabet, repeat=n):
            yield "".join(chars)


@pytest.mark.parametrize("pattern,alphabet,max_len", ENUMERATED, ids=[e[0] for e in ENUMERATED])
def test_enumerated_membership_and_live_prefixes_match_python(pattern: str, alphabet: str, max_len: int) -> None:
    automaton = compiled(pattern)
    py = re.compile(pattern)
    partial = regex_pkg.compile(pattern)
    members = 0
    for text in strings(alphabet, max_len):
        expected = py.fullmatch(text) is not None
        members += expected
        assert accepts(automaton, text) == expected, (pattern, text, expected)
        expected_live = partial.fullmatch(text, partial=True) is not None
        assert live(automaton, text) == expected_live, (pattern, text, "live prefix", expected_live)
    assert members > 1  # the enumeration reached more than one string of the language


def mutations(text: str, alphabet: str, rng: random.Random, count: int) -> list[str]:
    out = []
    for _ in range(count):
        chars = list(text)
        op = rng.randrange(3)
        i = rng.randrange(len(chars) + 1)
        if op == 0:
            chars.insert(i, rng.choice(alphabet))
        elif op == 1 and chars:
            del chars[min(i, len(chars) - 1)]
        elif chars:
            chars[min(i, len(chars) - 1)] = rng.choice(alphabet)
        out.append("".join(chars))
    return out


@pytest.mark.parametrize("name,pattern", sampled_regexes(), ids=[n for n, _ in sampled_regexes()])
def test_sampled_strings_and_mutations_match_python(name: str, pattern: str) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    automaton = compiled(pattern)
    py = re.compile(pattern)
    partial = regex_pkg.compile(pattern)
    rng = random.Random(name)
    alphabet = sorted(set(pattern) | set("0123456789.-+eE:aZ \"@"))
    seen: list[str] = []

    @settings(max_examples=150, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.from_regex(py, fullmatch=True))
    def check(text: str) -> None:
        assert accepts(automaton, text), (name, text)  # no fewer: every string re accepts
        for i in range(len(text) + 1):
            assert live(automaton, text[:i]), (name, text[:i])
        for other in mutations(text, alphabet, rng, 4):  # no more: neighbours re rejects
            assert accepts(automaton, other) == (py.fullmatch(other) is not None), (name, other)
            assert live(automaton, other) == (partial.fullmatch(other, partial=True) is not None), (name, other)
        seen.append(text)

    check()
    assert seen  # hypothesis really drew strings


def test_phone_number_regex_accepts_every_sampled_match() -> None:
    """The reported case: grammars/phone_number.regex lost 1,444 of 20,000 matches."""
    pattern = (GRAMMARS / "phone_number.regex").read_text().strip()
    automaton = compiled(pattern)
    rng = random.Random(7)
    digits = "0123456789"
    found = 0
    for _ in range(20_000):
        text = "".join(rng.choice(digits + " -()+") if rng.random() < 0.2 else rng.choice(digits)
                       for _ in range(rng.randrange(6, 18)))
        expected = re.fullmatch(pattern, text) is not None
        found += expected
        assert accepts(automaton, text) == expected, text
    assert found > 1000


def test_top_level_number_allows_a_decimal() -> None:
    automaton = compiled(schema_to_regex({"type": "number"}).regex)
    for text in ["0.5", "12.25e-3", "-0", "7"]:
        assert accepts(automaton, text), text


def test_naive_build_loses_strings() -> None:
    """Negative control: the naive single build (no end sentinel) fails the same oracle."""
    from outlines_core import Index, Vocabulary

    index = Index("\\x00(?:ab(cd)*)", Vocabulary(256, {bytes([b]): [b] for b in range(256)}))
    transitions = index.get_transitions()
    state = transitions[index.get_initial_state()][0]
    finals = index.get_final_states()
    accepted = []
    for text in ["ab", "abcd", "abcdcd"]:
        s = state
        for byte in text.encode():
            s = transitions.get(s, {}).get(byte)
            if s is None:
                break
        accepted.append(s is not None and s in finals)
    assert accepted != [re.fullmatch("ab(cd)*", t) is not None for t in ["ab", "abcd", "abcdcd"]]
    assert accepted == [True, False, False]


def test_sentinel_characters_in_the_language_are_followed() -> None:
    """Strings that read one end-sentinel character after a complete match are still exact."""
    automaton = compiled("(?s:.)*")
    for text in ["a\ufdd0b", "\ufdd0\ufdd0", "x\ufdd1y", "ab\x01"]:
        assert accepts(automaton, text), repr(text)
    automaton = compiled("a(\ufdd0b)?")
    assert accepts(automaton, "a\ufdd0b") and accepts(automaton, "a")
    assert not accepts(automaton, "a\ufdd0")


def test_every_live_state_reaches_acceptance() -> None:
    """No dead ends: from every state of the table an accepting state is reachable."""
    automaton = compiled("(ab|ac)d?(e|f)*")
    dfa, dead = automaton.dfa, automaton.dead
    reach = automaton.final_mask.copy()
    for _ in range(dfa.shape[0]):
        reach[:dead] |= (reach[dfa[:dead]] & (dfa[:dead] != dead)).any(axis=1)
    assert reach[:dead].all()
    assert np.all(dfa[dead] == dead)
