"""No schema pattern is matched by a backtracking engine (issue 32, items 1 and 5).

The linear engine (``grammar.linear_regex``) is checked against Python's ``re`` (an independent
oracle) on patterns where ECMA-262 and Python agree; jsonschema's own validator classes are the
oracle for the overridden keywords. The adversarial repros run in a subprocess with a timeout:
on a backtracking engine they take hours, so a hang is a failure, not a stuck suite.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jsonschema
import pytest

from constrained_spec.errors import CompileLimitError, EmptyLanguageError, UnsupportedKeywordError
from constrained_spec.grammar.json_schema import schema_to_regex
from constrained_spec.grammar.linear_regex import (
    MAX_NFA_STATES,
    PatternRefused,
    PatternTooLarge,
    compile_pattern,
    pattern_fullmatch,
    pattern_search,
    patterns_disjoint,
)
from constrained_spec.grammar.schema_refs import validation_errors, validator_class

ROOT = Path(__file__).resolve().parents[2]

#: patterns read alike by ECMA-262 and Python ``re`` over the alphabet below
PATTERNS = [
    "a", "^a", "a$", "^a$", "^(a+)+$", "ab|cd", "^(ab|cd)*$", "a{2,3}", "^a{2,3}$", "^a{2,}b?$", "(a|b)*c",
    "^$", "", "x?", "^[a-c]{1,2}$", "^(a|)+$", "(^a|b$)", "a.c", "^[^ab]+$", "^(a*)*b", "(a?){3}a{3}",
    "^\\d+(\\.\\d{1,2})?$", "^(ab){0,2}$", "[ab]c|^c", "(a|^)b", "a($|c)", "^(?:a|b)+?c$", "^[a-z]{3}\\d$",
]


def test_search_and_fullmatch_agree_with_python_re():
    rng = random.Random(1)
    checked = 0
    for p in PATTERNS:
        oracle = re.compile(p)
        for _ in range(300):
            s = "".join(rng.choice("abcx1.") for _ in range(rng.randint(0, 8)))
            assert pattern_search(p, s) == (oracle.search(s) is not None), (p, s)
            assert pattern_fullmatch(p, s) == (oracle.fullmatch(s) is not None), (p, s)
            checked += 1
    assert checked == 300 * len(PATTERNS)


def test_ecma_semantics_where_python_differs():
    # '$' is the very end only (Python's also matches before a final newline); '.' excludes '\r'
    assert re.search("^a$", "a\n") and not pattern_search("^a$", "a\n")
    assert re.search("^a.b$", "a\rb") and not pattern_search("^a.b$", "a\rb")
    # \d is ASCII (Python's matches every Unicode digit)
    assert re.search("^\\d$", "\u0663") and not pattern_search("^\\d$", "\u0663")


def test_work_is_linear_on_the_catastrophic_patterns():
    start = time.perf_counter()
    assert not pattern_search("^(a+)+$", "a" * 40 + "b")
    assert pattern_search("^(a+)+$", "a" * 20_000)
    assert not pattern_search("^(a|aa)*c$", "a" * 5_000)
    assert not pattern_search("(x+x+)+y", "x" * 5_000)
    assert time.perf_counter() - start < 5.0


def test_non_regular_and_oversized_patterns_are_refused_by_name():
    for p, why in (("(a)\\1", "backreference"), ("a(?=b)", "lookaround"), ("\\bword", "\\b")):
        with pytest.raises(PatternRefused, match="linear time"):
            compile_pattern(p)
    with pytest.raises(PatternTooLarge) as info:
        compile_pattern("a{%d}" % (MAX_NFA_STATES + 1))
    assert isinstance(info.value, CompileLimitError)
    compile_pattern("a{%d}" % (MAX_NFA_STATES // 2))  # below the cap: fine


def test_patterns_disjoint_against_enumeration():
    pats = ["^a{3}b$", "^(a+)+$", "a", "^a", "b$", "^b", "c", "^[ab]*$", "^a*$", "x|^a$", "^$", "", "^(ab)+$", "ba"]
    strings = [""] + ["".join(t) for n in range(1, 7) for t in itertools.product("abcx", repeat=n)]
    for p, q in itertools.product(pats, repeat=2):
        truth = not any(re.search(p, s) and re.search(q, s) for s in strings)
        assert patterns_disjoint(p, q) == truth, (p, q)


# -- jsonschema with the linear keywords ------------------------------------------------------------

CASES = [
    ({"pattern": "^a+b$"}, ["aab", "aa", 3, "b", "xab"]),
    ({"type": "object", "patternProperties": {"^x": {"type": "integer"}, "y$": {"type": "string"}}},
     [{"xa": 1}, {"xa": "s"}, {"ay": "s"}, {"xy": 1}, {"xy": "s"}, {"b": None}]),
    ({"type": "object", "properties": {"p": {}}, "patternProperties": {"^q": {}}, "additionalProperties": False},
     [{"p": 1}, {"q1": 1}, {"r": 1}, {"p": 1, "qq": 2, "z": 3}]),
    ({"type": "object", "properties": {"p": {}}, "patternProperties": {"^q": {}}, "additionalProperties": {"type": "integer"}},
     [{"r": 1}, {"r": "s"}, {"q": "s"}]),
    ({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}, [{"abc": 1}, {"aB": 1}, {}]),
    ({"type": "object", "allOf": [{"patternProperties": {"^a": {}}}], "unevaluatedProperties": False},
     [{"ab": 1}, {"ba": 1}, {}]),
    ({"$schema": "https://json-schema.org/draft/2019-09/schema", "type": "object",
      "anyOf": [{"patternProperties": {"^a": {}}}], "unevaluatedProperties": False}, [{"ab": 1}, {"ba": 1}]),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "patternProperties": {"^a": {"type": "string"}},
      "additionalProperties": False}, [{"ab": "s"}, {"ab": 1}, {"b": "s"}]),
    ({"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"s": {"pattern": "^[0-9]{2}$"}}},
     [{"s": "12"}, {"s": "123"}]),
]


@pytest.mark.parametrize("schema,values", CASES)
def test_validation_verdicts_equal_jsonschema(schema, values):
    oracle = jsonschema.validators.validator_for(schema)(schema)
    for value in values:
        got = not validation_errors(schema, value)
        assert got == oracle.is_valid(value), (schema, value)


def test_the_validator_class_keeps_the_draft_and_its_name():
    cls = validator_class({"$schema": "http://json-schema.org/draft-07/schema#"})
    assert cls.__name__ == "Draft7Validator" and cls.META_SCHEMA == jsonschema.Draft7Validator.META_SCHEMA
    assert cls is not jsonschema.Draft7Validator  # jsonschema's own class is left as it is
    assert jsonschema.validators.validator_for({"$schema": "http://json-schema.org/draft-07/schema#"}) is jsonschema.Draft7Validator


def test_a_pattern_that_cannot_be_linear_is_refused_when_compiling_not_backtracked():
    for schema in ({"type": "string", "pattern": "^(a+)\\1$"},
                   {"type": "string", "if": {"pattern": "(?=a)"}, "then": {"maxLength": 3}},
                   {"type": "object", "patternProperties": {"(a)\\1": {}}}):
        with pytest.raises(UnsupportedKeywordError, match="linear time|not regular|lookaround"):
            schema_to_regex(schema)
    with pytest.raises(UnsupportedKeywordError, match="linear time"):  # validating alone refuses it too
        validation_errors({"pattern": "(a)\\1"}, "aa")
    # a refused pattern inside data (a default, an unused definition) is no pattern: not refused
    schema_to_regex({"type": "string", "default": {"pattern": "(a)\\1"}, "$defs": {"x": {"pattern": "(?=a)"}}})


_REPRO = """
import json, time
from constrained_spec.grammar.json_schema import schema_to_regex
from constrained_spec.grammar.schema_refs import validation_errors
key = "a" * 40 + "b"
evil = "^(a+)+$"
t = time.perf_counter()
schema = {"type": "object", "properties": {key: {"type": "integer"}}, "required": [key],
          "additionalProperties": False, "patternProperties": {evil: {}}}
schema_to_regex(schema)
out = {"compile_ok": True}
out["valid_object"] = not validation_errors(schema, {key: 1})
out["pattern"] = not validation_errors({"pattern": evil}, key)
out["property_names"] = not validation_errors({"propertyNames": {"pattern": evil}}, {key: 1})
out["unevaluated"] = not validation_errors({"patternProperties": {evil: {}}, "unevaluatedProperties": False}, {key: 1})
out["seconds"] = time.perf_counter() - t
print(json.dumps(out))
"""


def test_the_issue_repro_with_40_as_answers_at_once():
    """Issue 32 item 1: 40 a's and a ``b`` against ``^(a+)+$`` (hours with a backtracking engine)."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_REPRO)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["valid_object"] is True  # the key is declared: the pattern does not apply to it
    assert out["pattern"] is False and out["property_names"] is False and out["unevaluated"] is False
    assert out["seconds"] < 2.0


# -- if / not pattern (item 5) --------------------------------------------------------------------------


def test_if_with_a_pattern_disjoint_from_the_strings_keeps_the_else_side():
    schema = {"type": "string", "pattern": "^a{10}b$", "if": {"pattern": "^(a+)+$"}, "then": {}}
    regex = schema_to_regex(schema).regex
    assert re.fullmatch(regex, json.dumps("a" * 10 + "b"))
    assert jsonschema.Draft202012Validator(schema).is_valid("a" * 10 + "b")
    assert not re.fullmatch(regex, json.dumps("a" * 9 + "b"))  # negative control
    # where the patterns overlap, the else side needs the negation of 'if': a DFA complement (issue 49)
    both = {"type": "string", "pattern": "^a+$", "if": {"pattern": "^a{3}$"}, "then": {"const": "aaa"}, "else": {"maxLength": 2}}
    regex = schema_to_regex(both).regex
    for s in ("a", "aa", "aaa", "aaaa", "aaaaa"):
        assert (re.fullmatch(regex, json.dumps(s)) is not None) == jsonschema.Draft202012Validator(both).is_valid(s), s
    assert re.fullmatch(regex, json.dumps("a")) and not re.fullmatch(regex, json.dumps("aaaa"))


def test_an_else_side_that_cannot_be_compiled_is_named_not_called_empty():
    # the else side of a pattern 'if' is now the exact complement (issue 49): this schema admits no
    # value at all (every string of the pattern starts with 'a' and is longer than 3), and says so
    schema = {"type": "string", "pattern": "^a{10}b$", "if": {"pattern": "^a"}, "then": {"maxLength": 3}}
    with pytest.raises(EmptyLanguageError):
        schema_to_regex(schema)
    assert not jsonschema.Draft202012Validator(schema).is_valid("a" * 10 + "b")
    # an else side that still cannot be written (the 'if' says uniqueItems) is named, not called empty
    arrays = {"type": "array", "maxItems": 3, "if": {"uniqueItems": True}, "then": {"maxItems": 0}}
    with pytest.raises(UnsupportedKeywordError, match="'else' side") as info:
        schema_to_regex(arrays)
    assert not isinstance(info.value, EmptyLanguageError)
