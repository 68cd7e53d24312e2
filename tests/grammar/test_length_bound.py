"""The most bytes a regex's strings can take (``grammar.length_bound``), against independent oracles:
brute-force enumeration with ``re.fullmatch``, and strings hypothesis draws from the regex."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrained_spec.grammar import output_spec
from constrained_spec.grammar.length_bound import BOUND_CAP, MAX_REGEX_CHARS, max_output_bytes

ALPHABET = ["a", "b", "é", "€"]  # 1, 1, 2 and 3 bytes in UTF-8

FINITE = [r"a", r"ab|é", r"(a|bb)(é|a{0,2})", r"a{1,3}b?", r"(ab|€){0,2}", r"[aé]b?", r"[a-b]{2}é?", r"(a|(b|€€))?a"]


def longest_by_enumeration(pattern: str, max_chars: int = 6) -> int:
    """The longest UTF-8 match of ``pattern`` over ALPHABET strings of up to ``max_chars`` characters."""
    best = -1
    for n in range(max_chars + 1):
        for chars in itertools.product(ALPHABET, repeat=n):
            text = "".join(chars)
            if re.fullmatch(pattern, text):
                best = max(best, len(text.encode()))
    return best


@pytest.mark.parametrize("pattern", FINITE)
def test_the_bound_is_the_longest_string_for_finite_languages(pattern):
    assert max_output_bytes(pattern) == longest_by_enumeration(pattern)


@pytest.mark.parametrize("pattern", [r"a*", r"(ab)+", r"a{2,}", r"x(a|b*)y", r"(a)\1"])
def test_unbounded_or_unknown_languages_have_no_bound(pattern):
    assert max_output_bytes(pattern) is None


def test_classes_count_their_longest_character():
    assert max_output_bytes(r"[^a]") == 4  # a negated class admits any character
    assert max_output_bytes(r".") == 4
    assert max_output_bytes(r"\d") == 4  # Unicode digits in a str pattern
    assert max_output_bytes(r"[a-z]") == 1
    assert max_output_bytes(r"[a-zé]") == 2


def test_bad_huge_and_empty_patterns():
    assert max_output_bytes("(") is None  # unparseable: unknown, never an error
    assert max_output_bytes("a{%d}" % (BOUND_CAP + 1)) is None
    assert max_output_bytes("a" * (MAX_REGEX_CHARS + 1)) is None
    assert max_output_bytes("") == 0


SCHEMAS = [
    {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"]},
    {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}, "required": ["d"]},
    {"type": "object", "properties": {"s": {"type": "string", "maxLength": 4}, "n": {"type": "integer", "minimum": -5, "maximum": 999}},
     "required": ["s"]},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=["enum", "date", "bounded-string-and-int", "bounded-array"])
def test_no_string_of_a_schema_is_longer_than_its_bound(schema):
    """hypothesis draws strings that fully match the schema's regex (checked with re.fullmatch);
    none is longer than the bound."""
    pattern = output_spec(schema).regex
    bound = max_output_bytes(pattern)
    assert bound is not None

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(pattern, fullmatch=True))
    def check(text: str) -> None:
        assert re.fullmatch(pattern, text)
        assert len(text.encode()) <= bound

    check()


def test_the_enum_bound_is_its_longest_value():
    assert max_output_bytes(output_spec(SCHEMAS[0]).regex) == len(b'{"answer":"yes"}')


# -- random finite regexes, their languages built alongside their text (no regex parser involved) --

LITERALS = ["a", "b", "é", "€", "😀"]  # 1, 1, 2, 3 and 4 bytes in UTF-8


def _finite_regexes():
    """(regex text, its language as a frozenset of strings), built together: the language is the
    oracle, enumerated by construction."""
    leaf = st.one_of(
        st.sampled_from(LITERALS).map(lambda c: (c, frozenset([c]))),
        st.sets(st.sampled_from(LITERALS), min_size=1, max_size=3).map(
            lambda cs: ("[" + "".join(sorted(cs)) + "]", frozenset(cs))),
    )

    def grow(inner):
        pair = st.tuples(inner, inner)
        cat = pair.map(lambda p: ("(?:%s)(?:%s)" % (p[0][0], p[1][0]), frozenset(x + y for x in p[0][1] for y in p[1][1])))
        alt = pair.map(lambda p: ("(?:%s|%s)" % (p[0][0], p[1][0]), p[0][1] | p[1][1]))

        def repeat(args):
            (text, lang), lo, extra = args
            hi = lo + extra
            out, power = set(), {""}
            for n in range(hi + 1):
                if n >= lo:
                    out |= power
                power = {x + y for x in power for y in lang}
            return "(?:%s){%d,%d}" % (text, lo, hi), frozenset(out)

        rep = st.tuples(inner, st.integers(0, 2), st.integers(0, 2)).map(repeat)
        opt = inner.map(lambda r: ("(?:%s)?" % r[0], r[1] | {""}))
        return st.one_of(cat, alt, rep, opt)

    return st.recursive(leaf, grow, max_leaves=6).filter(lambda r: len(r[1]) <= 5000)


def _longest(language) -> int:
    return max(len(s.encode()) for s in language)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(_finite_regexes())
def test_the_bound_is_the_longest_string_of_random_finite_regexes(case):
    text, language = case
    for s in sorted(language)[:50]:  # the oracle's text and language agree (Python's re reads this subset alike)
        assert re.fullmatch(text, s), (text, s)
    assert max_output_bytes(text) == _longest(language)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(_finite_regexes(), st.sampled_from(["*", "+", "{2,}", "{0,}"]))
def test_an_unbounded_repeat_has_no_bound_unless_only_the_empty_string_repeats(case, op):
    text, language = case
    expected = None if _longest(language) > 0 else 0
    assert max_output_bytes("(?:%s)%s" % (text, op)) == expected
    assert max_output_bytes("x(?:%s)%s|y" % (text, op)) == (None if expected is None else 1)  # in a sequence and a branch


@pytest.mark.parametrize("mutant", ["characters, not bytes", "repeats counted once"])
def test_negative_control_a_wrong_bound_fails_the_oracle(monkeypatch, mutant):
    """The same oracle comparison rejects a bound that counts characters or ignores repeat counts."""
    import constrained_spec.grammar.length_bound as lb

    if mutant == "characters, not bytes":
        monkeypatch.setattr(lb, "_utf8_len", lambda code: 1)
    else:
        monkeypatch.setattr(lb, "_capped", lambda total: min(total, 1) if total else 0)
    wrong = [p for p in FINITE if lb.max_output_bytes(p) != longest_by_enumeration(p)]
    assert wrong, f"no finite pattern told the {mutant} mutant apart"


def test_inline_flags_are_unknown():
    """``(?i)k`` matches the Kelvin sign (3 bytes) under Unicode case folding (Python's re and Rust's
    regex alike): a bound of 1 (the walk of ``re._parser``, which ignored flags) was too small."""
    assert re.fullmatch(r"(?i)k", "\u212a") and re.fullmatch(r"(?i:s)", "\u017f")
    for pattern in (r"(?i)k", r"(?i:s)", r"(?x) a b"):
        assert max_output_bytes(pattern) is None


def test_dialect_corners_take_the_wider_reading():
    assert max_output_bytes(r"\d{3}-\d{4}") == 29  # Unicode digits (Rust, Python): up to 4 bytes each
    assert max_output_bytes(r"[\w.]") == 4
    assert max_output_bytes(r"\bfoo\b") == 3  # zero-width
    assert max_output_bytes(r"(?:)*") == 0  # the empty string, repeated: still only the empty string
    assert max_output_bytes(r"(?<name>ab)|(?P<other>é)") == 2
    assert max_output_bytes(r"a{,3}") is None  # {0,3} in Python, text in ECMA: unknown
    assert max_output_bytes(r"\p{L}") is None


HOSTILE = [
    ("a{1000000}", 1_000_000),
    ("(?:a{1000}){1000}", 1_000_000),
    ("(?:a{2000}){1000}", None),  # past BOUND_CAP
    ("(?:(?:(?:a{1000}){1000}){1000}){1000}", None),  # the product is never expanded
    ("a{%s}" % ("9" * 30), None),
    ("a{%s}" % ("9" * 5000), None),  # past int()'s digit limit
    ("(" * 5000 + "a" + ")" * 5000, None),  # nested deeper than the parser reads: unknown, no RecursionError
    ("(?:" * 100 + "é" + ")" * 100, 2),
    ("|".join(["ab"] * 6000), 2),  # just under MAX_REGEX_CHARS
    ("(?:a|b)*" * 2000, None),
]


@pytest.mark.parametrize("pattern,expected", HOSTILE, ids=[f"hostile-{i}" for i in range(len(HOSTILE))])
def test_hostile_patterns_answer_fast(pattern, expected):
    import time

    start = time.perf_counter()
    assert max_output_bytes(pattern) == expected
    assert time.perf_counter() - start < 2.0


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(alphabet="ab(|)?*+{}[]^$-\\,.0123456789dwsbBpPuxk<>=!:é", max_size=30))
def test_any_text_answers_a_bound_or_none(pattern):
    bound = max_output_bytes(pattern)
    assert bound is None or (isinstance(bound, int) and 0 <= bound <= BOUND_CAP)


def test_the_walk_reads_no_private_parser():
    import inspect

    import constrained_spec.grammar.length_bound as lb

    source = inspect.getsource(lb)
    assert "re._parser" not in source.replace("``re._parser``", "") and "sre_parse" not in source
