"""Negations the compiler writes since 2026-12-05 (issue 49), each judged by ``jsonschema`` on pools
of values of every type, both ways (accepted iff valid):

* one length or count bound flipped: ``not: {minItems: 2}`` is "at most one item" (arrays),
  likewise ``maxItems``, ``minProperties``/``maxProperties`` (objects), ``minLength``/``maxLength``
  (strings, no DFA);
* ``oneOf`` with exactly one branch that admits every value (``true``, or only unknown keywords):
  it holds where none of the others does, so its negation is "one of the others holds"; a ``oneOf``
  of pairwise disjoint branches is their ``anyOf``, so its negation is "every branch fails";
* a ``oneOf`` branch negated by De Morgan (``not (A and B)``: ``not A or not B``), and ``not: {not:
  X}`` on a property a branch is told apart by.

The controls: a flip off by one, a ``oneOf`` taken as ``anyOf``, and overlapping branches taken as
disjoint, are caught by the same checks.
"""

from __future__ import annotations

from typing import Any

import pytest
from grammar_oracles import schema_disagreements
from test_oneof_apart import accepts, arrays, as_any_of, disagreements, objects, regex_of

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar.json_schema import negation
from constrained_spec.grammar.json_schema.combinators import Combinators

POOL: list[Any] = ([None, True, 0, 2, 1.5, "", "a", "ab", "abc"] + arrays([1, "a", [1, 2, 3]], most=3)
                   + objects(["a", "b", "c"], [1, "x", [1]], most=3))

COUNT_SCHEMAS: list[dict[str, Any]] = [
    {"not": {"minItems": 2}}, {"not": {"maxItems": 1}}, {"type": "array", "not": {"minItems": 1}},
    {"not": {"type": "array", "maxItems": 2}}, {"not": {"minItems": 1, "maxItems": 2}},
    {"not": {"minProperties": 2}}, {"type": "object", "not": {"minProperties": 1}},
    {"not": {"minLength": 2}}, {"not": {"maxLength": 1}}, {"type": "string", "not": {"type": "string", "maxLength": 2}},
    {"not": {"minLength": 1, "maxLength": 2}},
    {"not": {"items": {"type": "array", "minItems": 3}}},
    {"oneOf": [{"type": "array", "minItems": 1}, {"type": "array", "maxItems": 2}]},
]


@pytest.mark.parametrize("schema", COUNT_SCHEMAS, ids=range(len(COUNT_SCHEMAS)))
def test_one_bound_flipped_is_exact(schema: dict[str, Any]) -> None:
    assert not disagreements(schema, POOL), schema


def test_control_a_flip_off_by_one_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def off_by_one(lo: int, hi: Any) -> Any:
        return (0, lo) if hi is None and lo > 0 else ((hi, None) if hi is not None and lo == 0 else None)

    monkeypatch.setattr(negation, "_flipped_count", off_by_one)
    caught = [s for s in COUNT_SCHEMAS[:11] if disagreements(s, POOL)]
    assert len(caught) >= 9, caught


TRUE_BRANCH_SCHEMAS: list[dict[str, Any]] = [
    {"not": {"oneOf": [{"x-unknown": 1}, {"type": "string"}]}},
    {"oneOf": [True, {"type": "string"}, {"type": "integer"}]},
    {"properties": {"a": {"not": {"oneOf": [{}, {"type": "array", "items": {"type": "integer"}}]}}}},
    # Github_easy---o39084's shape: an unknown keyword makes a branch admit everything
    {"oneOf": [{"instanceof": "RegExp"}, {"type": "string"},
               {"type": "array", "minItems": 1, "items": {"oneOf": [{"instanceof": "RegExp"}, {"type": "string"}]}}]},
    # Github_easy---o2231's shape: containers whose second branch is a typo ("#ref", so true)
    {"$defs": {"two": {"oneOf": [{"properties": {"b": {"type": "array", "items": {"type": "integer"}}}},
                                 {"#ref": "#/$defs/x"}]}},
     "oneOf": [{"properties": {"a": {"type": "array", "items": {"$ref": "#/$defs/two"}}}}, {"#ref": "#/$defs/two"}]},
]

#: values nested past the free-form depth (``any_value_depth``) only where a schema declares them
NESTED_POOL: list[Any] = POOL + [{"a": [{"b": [1]}]}, {"a": [{"b": ["x"]}]}, {"a": [{}]}, {"a": [{"b": 1}, 2]},
                                 {"b": [1]}, {"a": ["s", {"b": []}]}, ["a", 1], [1, 2], [[1]], [["a"]]]


def judged(schema: dict[str, Any], values: list[Any], regex: Any) -> list[str]:
    """:func:`schema_disagreements` of ``regex`` (None: the empty language) on ``schema``."""
    return schema_disagreements(schema, regex, values, accepts)


def pool_of(schema: dict[str, Any]) -> list[Any]:
    return NESTED_POOL if "$defs" in schema else POOL


@pytest.mark.parametrize("schema", TRUE_BRANCH_SCHEMAS, ids=range(len(TRUE_BRANCH_SCHEMAS)))
def test_oneof_with_a_true_branch_is_exact(schema: dict[str, Any]) -> None:
    regex = regex_of(schema)
    assert regex is not None
    assert not judged(schema, pool_of(schema), regex), schema


def test_control_oneof_taken_as_anyof_is_caught() -> None:
    caught = [s for s in TRUE_BRANCH_SCHEMAS if judged(s, pool_of(s), regex_of(as_any_of(s)))]
    assert len(caught) == len(TRUE_BRANCH_SCHEMAS), caught


#: a oneOf of disjoint branches is their anyOf: its negation is every branch failing
DISJOINT_SCHEMAS: list[dict[str, Any]] = [
    {"not": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["a"]}]}},
    {"oneOf": [{"properties": {"a": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["b"]}]}}},
               {"properties": {"a": {"type": "array"}}}]},
]


@pytest.mark.parametrize("schema", DISJOINT_SCHEMAS, ids=range(len(DISJOINT_SCHEMAS)))
def test_not_of_a_disjoint_oneof_is_exact(schema: dict[str, Any]) -> None:
    assert not judged(schema, POOL, regex_of(schema)), schema


def test_control_overlapping_branches_taken_as_disjoint_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    overlapping = {"not": {"oneOf": [{"type": "string"}, {"minLength": 1}]}}  # "a" satisfies both: valid here
    # exact since 2026-12-05 (night) as "no branch holds, or two do" (overlap_not); refused before
    assert not judged(overlapping, POOL, regex_of(overlapping))
    monkeypatch.setattr(Combinators, "disjoint", lambda self, a, b, depth: True)
    assert judged(overlapping, POOL, regex_of(overlapping))


BRANCH_SCHEMAS: list[dict[str, Any]] = [
    # Github_trivial---o25761's shape: a branch's property negated through "not: {not: X}"
    {"type": "object", "oneOf": [
        {"properties": {"a": {"type": "object", "required": ["k"],
                              "properties": {"k": {"not": {"enum": ["u"]}, "type": "string", "minLength": 1}}},
                        "b": {"type": "array", "items": {"type": "object", "required": ["n"]}}}},
        {"properties": {"a": {"type": "object", "required": ["k"], "properties": {"k": {"enum": ["u"]}}},
                        "b": {"type": "array", "items": {"type": "object", "required": ["n", "m"]}}}}]},
    # Github_medium---o45306's shape: branches apart by nested arrays and their counts
    {"oneOf": [{"type": "object", "properties": {"a": {"type": "array", "minItems": 1,
                                                       "items": {"type": "array", "minItems": 2}}}},
               {"type": "object", "properties": {"b": {"type": "string", "maxLength": 1}}}]},
]

#: values apart only through the types a nested oneOf allows (number or string against boolean)
#: (closed branches, Github_medium---o9802's controls: without the types read through the nested
#: oneOf no construction applies and the oneOf is refused)
NESTED_TYPES_SCHEMA = {"type": "object", "oneOf": [
    {"additionalProperties": False,
     "properties": {"v": {"oneOf": [{"type": "number"}, {"type": "string", "maxLength": 2}]}, "w": {}}},
    {"additionalProperties": False, "properties": {"v": {"type": "boolean"}, "w": {}}}]}


def test_values_apart_through_nested_oneof_types() -> None:
    values = POOL + objects(["v", "w"], [1, "s", True, None], most=2)
    assert not judged(NESTED_TYPES_SCHEMA, values, regex_of(NESTED_TYPES_SCHEMA))
    assert judged(NESTED_TYPES_SCHEMA, values, regex_of(as_any_of(NESTED_TYPES_SCHEMA)))  # the control


BRANCH_POOL: list[Any] = NESTED_POOL + objects(["a", "b"], [{"k": "u"}, {"k": "v"}, {"k": ""}, {}, [{"n": 1}],
                                                           [{"n": 1, "m": 2}], [], [[1, 2]], [[1]], "", "ab"], most=2)


@pytest.mark.parametrize("schema", BRANCH_SCHEMAS, ids=range(len(BRANCH_SCHEMAS)))
def test_branches_told_apart_by_negated_properties(schema: dict[str, Any]) -> None:
    assert not judged(schema, BRANCH_POOL, regex_of(schema)), schema
    assert judged(schema, BRANCH_POOL, regex_of(as_any_of(schema)))  # the control is caught


def test_a_branch_whose_negation_reaches_recursion_is_refused_under_oneof() -> None:
    """A property whose negation needs the negation of a recursive reference: the ``oneOf`` is
    refused with its own pointer (the De Morgan split checks the properties' negations first)."""
    schema = {"$defs": {"c": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/c"}}},
                              "allOf": [{"oneOf": [{"required": ["kids"]}, {"required": ["leaf"]}]}]}},
              "$ref": "#/$defs/c"}
    with pytest.raises(UnsupportedKeywordError) as e:
        regex_of({"oneOf": [{"properties": {"a": {"$ref": "#/$defs/c"}}, "required": ["a"]},
                            {"properties": {"a": {"type": "object"}, "b": {}}, "required": ["b"]}],
                  "$defs": schema["$defs"]})
    assert e.value.keyword == "oneOf" and e.value.pointer == "/oneOf", e.value
