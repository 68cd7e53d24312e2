"""``if``/``then``/``else`` whose ``else`` needs a negation of ``if`` that is not exact: refused by name
(issue 49: never silently narrower). Before 2026-12-05 the ``else`` side was dropped without a word,
so every valid value that fails ``if`` was rejected. The oracle is ``jsonschema``."""

from __future__ import annotations

from typing import Any

import pytest
from test_oneof_apart import disagreements, objects, regex_of

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex


def schema_with_if(const: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"a": {}, "b": {}, "c": {}},
            "if": {"properties": {"a": {"const": const}}, "required": ["a"]},
            "then": {"required": ["b"]}, "else": {"required": ["c"]}}


VALUES: list[Any] = [None, 1, "x"] + objects(["a", "b", "c"], ["x", 1], most=3)


def test_else_needing_an_inexact_negation_is_refused_by_name():
    """``not: {const: 1}`` on a free value is not exact (a number has many spellings): refused."""
    with pytest.raises(UnsupportedKeywordError) as e:
        regex_of(schema_with_if(1))
    assert e.value.keyword == "if" and e.value.pointer == "/if"


def test_control_else_with_an_exact_negation_compiles_exactly():
    """The same shape with a string constant: its negation is exact, the else side stays, and the
    language is jsonschema's (``{"c": 1}`` fails the if and satisfies the else)."""
    schema = schema_with_if("x")
    assert {"c": 1} in VALUES
    assert not disagreements(schema, VALUES)


def test_allow_unenforced_keeps_a_sound_part_recorded():
    compiled = schema_to_regex(schema_with_if(1), SchemaOptions(allow_unenforced=True))
    assert compiled.unenforced
