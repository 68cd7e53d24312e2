"""``minProperties`` above what a closed object can write is "no object", not a refusal (2026-12-05,
night): where one owner closes the object (``additionalProperties: false``), every name the schema
allows is written (declared and pattern names), so fewer names than the count means no object has
it, exactly. The case that needed it: a pattern whose value is a recursive ``$ref`` that the regex's
recursion cut leaves without a value (Github_easy---o37786/88's ``Scale``/``Locale`` selectors), where
the object at the cut has no member left; the grammar holds the recursion whole.

Oracles: ``jsonschema`` on a pool of values, through llguidance's matcher of the grammar (both
ways) and the regex (never wider). Control: the same schema without its ``minProperties`` (the
compiler ignoring it) lets ``{}`` in, and the same judge catches it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from grammar_oracles import byte_walk

from constrained_spec.errors import EmptyLanguageError
from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex
from constrained_spec.grammar.vocab import TokenVocabulary

BYTES = TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)

#: a string, or a non-empty object whose names start with x and whose values are again such
NESTED = {"$defs": {"r": {"anyOf": [{"type": "string"},
                                    {"type": "object", "patternProperties": {"^x": {"$ref": "#/$defs/r"}},
                                     "additionalProperties": False, "minProperties": 1}]}},
          "$ref": "#/$defs/r"}

POOL: list[Any] = ["s", "", {}, {"x": "s"}, {"xa": "s", "xb": "t"}, {"y": "s"}, {"x": {}}, {"x": {"x": "s"}},
                   {"x": {"x": {"x": {"x": {"x": "deep"}}}}}, {"x": {"y": "s"}}, {"x": 1}, 1, None, []]


def dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


def wrong(schema: dict[str, Any]) -> list[str]:
    """The pool values the compiled schema judges otherwise than ``jsonschema``: the grammar both
    ways, the regex never wider."""
    compiled = schema_to_regex(schema, SchemaOptions())
    assert compiled.lark is not None
    grammar = compile_grammar("lark", compiled.lark, BYTES)
    rx = re.compile(compiled.regex)
    valid = jsonschema.Draft202012Validator(NESTED)
    out = []
    for v in POOL:
        ok = valid.is_valid(v)
        if byte_walk(grammar, dumps(v)) != ok:
            out.append(f"grammar {'rejected' if ok else 'accepted'} {v!r}")
        if rx.fullmatch(dumps(v)) and not ok:
            out.append(f"regex accepted {v!r}")
    return out


def test_min_properties_past_the_recursion_cut_is_exact():
    """It compiles (it was refused: 'minProperties larger than the properties generated'), exactly."""
    assert not wrong(NESTED)


def test_pool_has_both_kinds():
    valid = jsonschema.Draft202012Validator(NESTED)
    assert sum(valid.is_valid(v) for v in POOL) >= 4 and sum(not valid.is_valid(v) for v in POOL) >= 6


def test_control_min_properties_ignored_is_caught():
    """The schema compiled without its ``minProperties``: ``{}`` gets in, and the judge says so."""
    loose = json.loads(json.dumps(NESTED).replace(', "minProperties": 1', ""))
    assert loose != NESTED
    assert "grammar accepted {}" in wrong(loose)


@pytest.mark.parametrize("count", [2, 3])
def test_closed_object_with_too_few_names_has_no_object(count):
    """One closed owner, one name, ``minProperties`` above it: no object (exact), not a refusal."""
    schema = {"type": "object", "properties": {"a": {}}, "additionalProperties": False, "minProperties": count}
    with pytest.raises(EmptyLanguageError):
        schema_to_regex(schema, SchemaOptions())
    beside = {"anyOf": [{"type": "string", "maxLength": 1}, schema]}
    rx = re.compile(schema_to_regex(beside, SchemaOptions()).regex)
    assert rx.fullmatch('"s"') and not rx.fullmatch('{"a":1}') and not rx.fullmatch("{}")
