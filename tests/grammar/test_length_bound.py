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
