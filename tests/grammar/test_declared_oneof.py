"""``oneOf`` branches told apart on names a branch never declares, in the declared mode (issue 49).

With ``additional_properties="declared"`` (the default) an object gets only the names its final
schema declares (branch, context, later groups, negations), so branch i's objects never have a name
only branch j declares: j's requirement of it, or j's constraint on its value, never meets them.
The presence split counts such names as absent; the claim travels with the branch
(``ir.Unseen``) and is checked where the object is written; where it fails (a later group declares
the name after all), the ``oneOf`` is told apart again without it.

The oracle is ``jsonschema`` twice, over objects built from the names and a few values, in every key
order: every accepted value is valid, and every valid value the declared mode must write (a
hand-written schema: each combination of branches closed to its own declared names) is accepted. Controls: the
check at the leaf left out (a later group's name lets in objects of both branches), and the spec
mode, which has no such names and stays refused.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import jsonschema
import pytest
from test_oneof_apart import SCALARS, accepts, as_any_of, objects

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar.json_schema import SchemaOptions, declared_names, emit_object, schema_to_regex

#: a value schema whose negation is not exact (a recursive $ref): the spec mode cannot tell the
#: branches apart on it
RECURSIVE = {"$ref": "#"}
A = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
B = {"type": "object", "properties": {"b": RECURSIVE}, "required": ["b"]}
B_ANY = {"properties": {"b": {}}}
C = {"properties": {"c": {"type": "string"}}}


def closed(*parts: dict[str, Any]) -> dict[str, Any]:
    """The objects of all ``parts`` that have only the names the parts declare (the objects the
    declared mode writes for that combination of branches)."""
    names = sorted({n for p in parts for n in [*p.get("properties", {}), *p.get("required", [])]})
    return {"allOf": [*parts, {"type": "object", "propertyNames": {"enum": names}}]}


def not_object() -> dict[str, Any]:
    return {"not": {"type": "object"}}


#: (name, schema, the values the declared mode may write)
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("each branch requires a name the other never declares",
     {"oneOf": [A, B]},
     {"anyOf": [not_object(), closed(A), closed(B)]}),
    ("the context declares a third name",
     {"properties": {"c": {"type": "string"}}, "oneOf": [A, B]},
     {"anyOf": [not_object(), closed(A, C), closed(B, C)]}),
    ("the other branch declares a third name",
     {"oneOf": [{**A, "properties": {"a": {"type": "integer"}, "c": {"type": "string"}}}, B]},
     {"anyOf": [not_object(), closed({**A, "properties": {"a": {}, "c": {}}}), closed(B)]}),
]

#: a later group declares the name the first branch counted on being absent: the claim fails where
#: the object is written, the ``oneOf`` is told apart again without it, and refused by name
LATER_GROUP = {"allOf": [{"oneOf": [A, B]}, {"anyOf": [B_ANY, C]}]}

VALUES: list[Any] = SCALARS + objects(["a", "b", "c"], [1, "s", {"a": 1}], most=3)


def declared_regex(schema: dict[str, Any]) -> Optional[str]:
    """The schema's regex in the declared mode."""
    return schema_to_regex(schema, SchemaOptions()).regex


def disagreements(schema: dict[str, Any], written: dict[str, Any]) -> list[str]:
    """Where the declared-mode regex is wrong: it accepts a value the schema rejects, or rejects a
    valid value among those the declared mode must write (``written``). A valid value with more
    names may go either way: the negation of another branch declares its names too."""
    rx = re.compile(declared_regex(schema) or "(?!)")
    valid = jsonschema.Draft7Validator(schema)
    writable = jsonschema.Draft7Validator(written)
    out = []
    for v in VALUES:
        ok, got = valid.is_valid(v), accepts(rx, v)
        if got and not ok:
            out.append(f"accepted {v!r} (invalid)")
        elif ok and not got and writable.is_valid(v):
            out.append(f"rejected {v!r} (valid, declared)")
    return out


@pytest.mark.parametrize("name,schema,written", CASES, ids=[c[0] for c in CASES])
def test_declared_mode_exact(name, schema, written):
    """Each case compiles, and exactly: nothing invalid accepted, nothing it must write rejected."""
    assert not disagreements(schema, written), name


def test_values_reach_both_branches():
    """The pool holds objects in both branches of the first case (so "exactly one" is tested)."""
    schema = CASES[0][1]
    both = [v for v in VALUES if jsonschema.Draft7Validator(as_any_of(schema)).is_valid(v)
            and not jsonschema.Draft7Validator(schema).is_valid(v)]
    assert {"a": 1, "b": {"a": 1}} in both


def test_claim_failure_is_caught_and_refused_by_name(monkeypatch):
    """The claim fails at the leaf (the later group declares ``b``), the ``oneOf`` is told apart again
    without it, and refused by name: never the claim's own error, never a wider language."""
    raised: list[str] = []
    real = declared_names.check_unseen

    def spy(flat, names, declared_mode):
        try:
            real(flat, names, declared_mode)
        except declared_names.UnseenClaimFailed as e:
            raised.append(e.pointer)
            raise

    monkeypatch.setattr(emit_object, "check_unseen", spy)
    with pytest.raises(UnsupportedKeywordError) as e:
        declared_regex(LATER_GROUP)
    assert not isinstance(e.value, declared_names.UnseenClaimFailed)
    assert e.value.keyword == "oneOf" and e.value.pointer == "/allOf/0/oneOf"
    assert raised and set(raised) == {"/allOf/0/oneOf"}


def test_control_claims_unchecked_let_in_both_branches(monkeypatch):
    """The leaf's check left out: the later group's ``b`` meets the first branch, which counted on
    ``b`` being absent, and the same oracle finds an object of both branches accepted."""
    monkeypatch.setattr(emit_object, "check_unseen", lambda *_: None)
    written = {"anyOf": [not_object(), closed(A, B_ANY), closed(A, C), closed(B, B_ANY), closed(B, C)]}
    found = disagreements(LATER_GROUP, written)
    assert "accepted {'a': 1, 'b': {'a': 1}} (invalid)" in found, found


def test_a_name_the_context_declares_is_not_counted_on():
    """The context declares ``b``: branch A's objects may have it, and B's negation is not exact."""
    with pytest.raises(UnsupportedKeywordError) as e:
        declared_regex({"properties": {"b": {"type": "object"}}, "oneOf": [A, B]})
    assert e.value.keyword == "oneOf" and e.value.pointer == "/oneOf"


def test_spec_mode_still_refused_by_name():
    """The spec mode writes other names too: nothing to count on, the recursive branch is not negated."""
    with pytest.raises(UnsupportedKeywordError) as e:
        schema_to_regex(CASES[0][1], SchemaOptions(additional_properties="spec"))
    assert e.value.keyword == "oneOf" and e.value.pointer == "/oneOf"


#: constants are written as given, not through the object emitter: a claim is checked on them too
CONSTANTS = [
    {"enum": [{"a": 1, "b": {"a": 1}}, {"a": 2}], "oneOf": [A, B]},
    {"allOf": [{"oneOf": [A, B]}, {"const": {"a": 1, "b": {"a": 1}}}]},
]


@pytest.mark.parametrize("schema", CONSTANTS, ids=range(len(CONSTANTS)))
def test_constants_beside_the_claim_are_never_wider(schema):
    """``{"a": 1, "b": {"a": 1}}`` satisfies both branches: never accepted (here: refused by name)."""
    try:
        regex = declared_regex(schema)
    except UnsupportedKeywordError as e:
        assert e.keyword == "oneOf" and not isinstance(e, declared_names.UnseenClaimFailed)
        return
    assert not re.fullmatch(regex or "(?!)", '{"a":1,"b":{"a":1}}')


def test_control_constants_unchecked_let_in_both_branches(monkeypatch):
    """Found after the first version (2026-12-05, night): the constants' check left out, the enum
    path writes the object of both branches."""
    from constrained_spec.grammar.json_schema import compiler

    monkeypatch.setattr(compiler, "check_unseen_constants", lambda *_: None)
    regex = declared_regex(CONSTANTS[0])
    assert re.fullmatch(regex or "(?!)", '{"a":1,"b":{"a":1}}')
