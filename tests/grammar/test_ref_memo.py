"""The document's memo of resolved ``$ref``s (``SchemaDocument._ref_memo``, keyed by the resolver and the
reference, at most ``REF_MEMO_MAX`` entries): outputs with and without it are equal.

Oracles: the same schemas compiled with the memo off (``REF_MEMO_MAX = 0``), compared whole, and
``jsonschema`` + ``re.fullmatch`` on values of the ``$id``-scoped schema. Negative control: a memo
keyed by the reference alone (not its resolver) resolves ``#/$defs/v`` under the second ``$id`` to
the first one's target, and both comparisons see it.
"""

from __future__ import annotations

import json
import re
from typing import Any, Union

import jsonschema
import pytest

from constrained_spec.errors import CompileLimitError
from constrained_spec.grammar.json_schema import SchemaOptions, SchemaRegex, context, schema_to_regex
from constrained_spec.grammar.json_schema.context import Ctx, SchemaDocument

#: the same relative reference under two base URIs: an integer under one, a string under the other
SCOPED: dict[str, Any] = {
    "$id": "http://example.com/root.json",
    "type": "object",
    "properties": {
        "a": {"$id": "http://example.com/a.json", "$defs": {"v": {"type": "integer"}}, "$ref": "#/$defs/v"},
        "b": {"$id": "http://example.com/b.json", "$defs": {"v": {"type": "string"}}, "$ref": "#/$defs/v"},
    },
    "required": ["a", "b"],
    "additionalProperties": False,
}

#: recursive $defs (a grammar is built) and a shared definition used in many places
TREE: dict[str, Any] = {
    "$defs": {
        "node": {"type": "object", "properties": {"name": {"$ref": "#/$defs/name"},
                                                   "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                 "required": ["name"], "additionalProperties": False},
        "name": {"type": "string", "maxLength": 8},
    },
    "$ref": "#/$defs/node",
}


def _wide(n: int) -> dict[str, Any]:
    """Many optional properties that share definitions: past a small cap (retries, then a grammar)."""
    props = {f"p{i}": {"$ref": "#/$defs/" + ("name" if i % 2 else "tree")} for i in range(n)}
    return {"$defs": {**TREE["$defs"], "tree": {"$ref": "#/$defs/node"}}, "type": "object", "properties": props,
            "additionalProperties": False}


CASES: list[tuple[dict[str, Any], SchemaOptions]] = [
    (SCOPED, SchemaOptions()),
    (TREE, SchemaOptions()),
    (_wide(12), SchemaOptions(max_regex_chars=4_000, time_budget_s=None)),
]


def _answer(schema: dict[str, Any], opts: SchemaOptions) -> Union[SchemaRegex, str]:
    try:
        return schema_to_regex(schema, opts)
    except CompileLimitError as e:
        return "refused: " + str(e)


@pytest.mark.parametrize("schema,opts", CASES)
def test_outputs_with_and_without_the_memo_are_equal(schema: dict[str, Any], opts: SchemaOptions,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    remembered = _answer(schema, opts)
    monkeypatch.setattr(context, "REF_MEMO_MAX", 0)
    assert _answer(schema, opts) == remembered


def test_the_scoped_schema_by_the_oracle() -> None:
    r = schema_to_regex(SCOPED)
    for value in [{"a": 1, "b": "x"}, {"a": "x", "b": 1}, {"a": 1, "b": 2}, {"a": "1", "b": "2"}]:
        text = json.dumps(value, separators=(",", ":"))
        assert bool(re.fullmatch(r.regex, text)) == jsonschema.Draft202012Validator(SCOPED).is_valid(value)


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context, "REF_MEMO_MAX", 2)
    sizes: list[int] = []
    resolve = SchemaDocument.resolve_ref

    def recorded(self: SchemaDocument, ctx: Ctx, ref: str, kw: str = "$ref") -> Ctx:
        out = resolve(self, ctx, ref, kw)
        sizes.append(len(self._ref_memo))
        return out

    monkeypatch.setattr(SchemaDocument, "resolve_ref", recorded)
    schema_to_regex(_wide(12), SchemaOptions(max_regex_chars=4_000, time_budget_s=None))
    assert sizes and max(sizes) == 2


def test_a_memo_keyed_by_the_reference_alone_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: the wrong key gives another answer, and the oracle disagrees with it."""
    right = _answer(SCOPED, SchemaOptions())
    resolve = SchemaDocument.resolve_ref
    by_ref: dict[str, Ctx] = {}

    def wrong(self: SchemaDocument, ctx: Ctx, ref: str, kw: str = "$ref") -> Ctx:
        if ref not in by_ref:
            by_ref[ref] = resolve(self, ctx, ref, kw)
        return by_ref[ref]

    monkeypatch.setattr(SchemaDocument, "resolve_ref", wrong)
    got = _answer(SCOPED, SchemaOptions())
    assert got != right
    assert isinstance(got, SchemaRegex)
    assert bool(re.fullmatch(got.regex, '{"a":1,"b":"x"}')) != jsonschema.Draft202012Validator(SCOPED).is_valid(
        {"a": 1, "b": "x"})


def test_the_resolvers_registry_is_readable() -> None:
    """The memo reads ``referencing``'s private ``_registry`` field (no public accessor); if an
    upgrade renames it, this fails (and the memo turns itself off: nothing is remembered)."""
    doc = SchemaDocument(TREE, SchemaOptions())
    root = doc.root_ctx()
    assert getattr(root.resolver, "_registry", None) is not None
    target = doc.resolve_ref(root, "#/$defs/node")
    assert doc.resolve_ref(root, "#/$defs/node") is target and len(doc._ref_memo) == 1
