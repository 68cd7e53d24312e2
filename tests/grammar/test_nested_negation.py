"""Negations one level deeper for ``oneOf`` (issue 49): the shapes of o25763, o65942, o683, o89914.

- ``not`` of a ``oneOf`` whose branches overlap (:mod:`~.overlap_not`): no branch holds, or two do;
- ``not`` branch j within branch i where j is an ``allOf`` some of whose members i holds itself
  (:func:`~.overlap_not.relative_members_not`): i and ``not`` the other members;
- the numbers that are not integers within integral bounds (:func:`~.emit_number.non_integers_between`),
  which a conjunction of two such negations of ``{type: integer, minimum: 0}`` needs.

The oracle is ``jsonschema`` on pools of values, both ways (accepted iff valid). Each shape has a
negative control: the construction with one step wrong, caught by the same check.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, Optional

import pytest
from test_oneof_apart import SCALARS, disagreements, objects

from constrained_spec.grammar.json_schema import combinators, emit_number
from constrained_spec.grammar.json_schema import compiler as compiler_module
from constrained_spec.grammar.json_schema import overlap_not as overlap_module
from constrained_spec.grammar.json_schema.context import Ctx
from constrained_spec.grammar.json_schema.ir import Action, Group, Holds

ATOMS: list[Any] = ["x", 1, -1]

#: ``not`` of an overlapping oneOf, alone and inside a oneOf branch (o25763's ``file``/``file_dir``)
OVERLAP: list[tuple[str, dict[str, Any]]] = [
    ("not oneOf of required names",
     {"not": {"oneOf": [{"required": ["a"]}, {"required": ["b"]}, {"properties": {"c": {"type": "integer"}}}]}}),
    ("branch minus a branch with a nested oneOf",
     {"oneOf": [{"type": "object", "required": ["n"], "properties": {"n": {"type": "string"}},
                 "oneOf": [{"required": ["a"], "properties": {"a": {"type": "integer", "minimum": 0}}},
                           {"required": ["b"], "properties": {"a": {"type": "integer", "minimum": 0}}}]},
                {"type": "object", "required": ["n"], "properties": {"n": {"type": "string"}}}]}),
    ("items minus items with a nested oneOf (o65942)",
     {"type": "array",
      "oneOf": [{"items": {"type": "object", "required": ["n"]}},
                {"items": {"allOf": [{"type": "object", "required": ["n"]},
                                     {"oneOf": [{"required": ["t"], "properties": {"t": {"const": "x"}}},
                                                {"required": ["t"], "properties": {"t": {"const": "y"}}}]}]}}]}),
]

#: a branch j that is an allOf sharing a member with branch i (o89914's package / metapackage)
BASE = {"properties": {"a": {"type": "string"}, "b": {"type": "string"}, "n": {"type": "string"}},
        "additionalProperties": True}
RELATIVE: dict[str, Any] = {
    "definitions": {"base": BASE},
    "type": "object",
    "oneOf": [{"allOf": [{"$ref": "#/definitions/base"}, {"properties": {"a": {"type": "string"}}},
                         {"oneOf": [{"required": ["n", "a"]}, {"required": ["n", "b"]}]}]},
              {"allOf": [{"$ref": "#/definitions/base"}, {"properties": {"t": {"const": "x"}}, "required": ["n", "t"]}]}],
}

#: non-integers within integral bounds
BOUNDED = [{"type": "number", "not": {"type": "integer"}, "minimum": lo, "maximum": hi}
           for lo, hi in ((-3, 5), (0, 2), (-2, 0), (1, 1))]
NUMBERS: list[Any] = [x / 4 for x in range(-20, 25)] + [0.001, -0.001, 10.5, -10.5, 3, "x", None]


def object_values() -> list[Any]:
    return SCALARS + objects(["a", "b", "c", "n", "t"], ATOMS, most=3)


def array_values() -> list[Any]:
    inner = objects(["n", "t"], ["x", "y", 1], most=2)
    return SCALARS + [[v] for v in inner] + [[1], ["x"]]


@pytest.mark.parametrize("name,schema", OVERLAP, ids=[c[0] for c in OVERLAP])
def test_overlapping_one_of_negated_exactly(name, schema):
    values = array_values() if schema.get("type") == "array" else object_values()
    assert not disagreements(schema, values), name


def _none_holds_only(comp: Any, ctx: Ctx) -> Optional[Group]:
    """The control: "no branch holds" alone (forgets the values two branches hold)."""
    group = overlap_module.overlap_not_group(comp, ctx)
    return None if group is None else (group[0], group[1][:1], group[2])


@pytest.mark.parametrize("name,schema", OVERLAP[:2], ids=[c[0] for c in OVERLAP[:2]])
def test_control_forgetting_two_branches_is_caught(monkeypatch, name, schema):
    monkeypatch.setattr(compiler_module, "overlap_not_group", _none_holds_only)
    found = disagreements(schema, object_values())
    assert found and all(line.startswith("rejected") for line in found), (name, found)


def _two_hold_only(comp: Any, ctx: Ctx) -> Optional[Group]:
    """The control: "two branches hold" alone (forgets the values no branch holds)."""
    group = overlap_module.overlap_not_group(comp, ctx)
    return None if group is None else (group[0], group[1][1:], group[2])


@pytest.mark.parametrize("name,schema", OVERLAP, ids=[c[0] for c in OVERLAP])
def test_control_forgetting_no_branch_is_caught(monkeypatch, name, schema):
    monkeypatch.setattr(compiler_module, "overlap_not_group", _two_hold_only)
    values = array_values() if schema.get("type") == "array" else object_values()
    found = disagreements(schema, values)
    assert found and all(line.startswith("rejected") for line in found), (name, found)


def test_relative_allof_negation_exact():
    assert not disagreements(RELATIVE, object_values())


_RELATIVE_MEMBERS_NOT = overlap_module.relative_members_not


def _first_member_only(comp: Any, fi: Any, cj: Ctx) -> Optional[list[Action]]:
    """The control: ``not`` of the first member of j that i does not hold, forgetting the others."""
    out = _RELATIVE_MEMBERS_NOT(comp, fi, cj)
    if out is None or not isinstance(out[0], Holds) or "allOf" not in out[0].ctx.schema:
        return out
    return [Holds(comp.made_up(out[0].ctx.schema["allOf"][0], out[0].ctx), False)]


def test_control_relative_forgetting_a_member_is_caught(monkeypatch):
    monkeypatch.setattr(combinators, "relative_members_not", _first_member_only)
    found = disagreements(RELATIVE, object_values())
    assert found and all(line.startswith("rejected") for line in found), found


@pytest.mark.parametrize("schema", BOUNDED, ids=[f"{s['minimum']}..{s['maximum']}" for s in BOUNDED])
def test_non_integers_between_bounds(schema):
    assert not disagreements(schema, NUMBERS)


def test_control_non_integers_upper_bound_off_by_one():
    lo, hi = Decimal(-3), Decimal(5)
    right = emit_number.non_integers_between(lo, hi)
    wrong = emit_number.non_integers_between(lo, hi + 1)
    assert right is not None and wrong is not None and right[0] is not None and wrong[0] is not None
    assert re.fullmatch(wrong[0], "5.5") and not re.fullmatch(right[0], "5.5")


def test_non_integral_bound_not_written_here():
    assert emit_number.non_integers_between(Decimal("0.5"), None) is None


def test_grammar_alternation_of_two_alike_branches_is_not_optional():
    """Two alternatives written alike (rules merged by ``_merged``) are one, not an empty one: o65942's
    grammar accepted ``[]`` through a rule rendered ``(A | B | A)?``."""
    from constrained_spec.grammar.json_schema.emit_lark import _EPS, _render

    assert _render(("alt", [("T", "A"), ("T", "B"), ("T", "A")])) == "(A | B)"
    assert _render(("alt", [("T", "A"), _EPS])) == "(A)?"  # control: a branch that reads nothing
