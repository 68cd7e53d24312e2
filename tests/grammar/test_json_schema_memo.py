"""The compiler remembers each conjunction's regex under its subschemas and the recursion counts in
force (``Compiler.compile_items``). The oracle is the compiler with the memo off (every occurrence
compiled again, the code as it was before the memo), and for the language ``re.fullmatch`` against
``jsonschema`` on generated values: the regex must not change, only the work.
"""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest
from conftest import SHARED_DATA

from constrained_spec.errors import ConstrainedSpecError
from constrained_spec.grammar.json_schema import SchemaOptions
from constrained_spec.grammar.json_schema.compiler import Compiler, schema_to_regex

# A small expression language in the style of many real schemas: a value, or an operator object
# whose operands are expressions again (twelve-way fan-out at every level when unrolled).
OPS = ["neg", "abs", "not", "log", "exp"]
BINOPS = ["+", "-", "*", "/"]
EXPR = {
    "definitions": {
        "expr": {
            "anyOf": [{"type": "boolean"}, {"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "maxLength": 2}]
            + [
                {"type": "object", "required": [op], "additionalProperties": False, "properties": {op: {"$ref": "#/definitions/expr"}}}
                for op in OPS
            ]
            + [
                {
                    "type": "object",
                    "required": [op],
                    "additionalProperties": False,
                    "properties": {op: {"type": "array", "minItems": 2, "maxItems": 2, "items": {"$ref": "#/definitions/expr"}}},
                }
                for op in BINOPS
            ]
        }
    },
    "$ref": "#/definitions/expr",
}
# The same subschema entered directly and through a $ref: only the $ref counts towards recursion,
# so the two must not share a memo entry.
DIRECT_AND_REF = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"v": {"type": "integer", "maximum": 3, "minimum": 0}, "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}}},
            "required": ["v"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {
        "a": {"$ref": "#/$defs/node"},
        "b": {"allOf": [{"$ref": "#/$defs/node"}]},
        "c": {"type": "array", "maxItems": 1, "items": {"$ref": "#/$defs/node"}},
    },
    "additionalProperties": False,
}
# Two resources with the same pointers under different base URIs.
TWO_BASES = {
    "$defs": {
        "a": {"$id": "https://example.com/a", "$defs": {"x": {"type": "integer"}}, "$ref": "#/$defs/x"},
        "b": {"$id": "https://example.com/b", "$defs": {"x": {"type": "string", "maxLength": 1}}, "$ref": "#/$defs/x"},
    },
    "type": "array",
    "prefixItems": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}],
    "items": False,
}


class _NoMemo(Compiler):
    memoize = False


class _Counting(Compiler):
    calls = 0

    def compile_flat(self, flat):  # type: ignore[no-untyped-def]
        _Counting.calls += 1
        return super().compile_flat(flat)


def _regex(schema, cls=Compiler, **options) -> str:
    return cls(schema, SchemaOptions(recursive_refs="unroll", **options)).run().regex


@pytest.mark.parametrize("schema", [EXPR, DIRECT_AND_REF, TWO_BASES], ids=["expr", "direct-and-ref", "two-bases"])
@pytest.mark.parametrize("depth", [0, 1, 2])
def test_memo_leaves_the_regex_unchanged(schema, depth):
    assert _regex(schema, max_recursion_depth=depth) == _regex(schema, _NoMemo, max_recursion_depth=depth)


def test_two_bases_keep_their_own_targets():
    r = _regex(TWO_BASES)
    assert re.fullmatch(r, '[1,"a"]') and not re.fullmatch(r, '["a",1]') and not re.fullmatch(r, "[1,2]")


def test_memo_compiles_a_fanned_out_recursion_once_per_level():
    _Counting.calls = 0
    _regex(EXPR, _Counting, max_recursion_depth=2)
    with_memo = _Counting.calls

    class _CountingNoMemo(_Counting):
        memoize = False

    _Counting.calls = 0
    _regex(EXPR, _CountingNoMemo, max_recursion_depth=2)
    without = _Counting.calls
    assert with_memo * 10 < without, (with_memo, without)


def _random_expr(rng: random.Random, depth: int):
    roll = rng.random()
    if depth == 0 or roll < 0.3:
        return rng.choice([True, rng.randint(0, 9), "ab"[: rng.randint(0, 2)]])
    if roll < 0.65:
        return {rng.choice(OPS): _random_expr(rng, depth - 1)}
    return {rng.choice(BINOPS): [_random_expr(rng, depth - 1), _random_expr(rng, depth - 1)]}


def test_expression_language_against_jsonschema():
    """Values up to the unrolled depth match iff they validate; deeper ones are the documented
    restriction (refused by the regex, accepted by the grammar the default path builds)."""
    compiled = schema_to_regex(EXPR)
    assert compiled.lark is not None
    regex = compiled.regex
    depth = compiled.recursion_depth
    rng = random.Random(7)
    validator = jsonschema.Draft202012Validator(EXPR)
    seen = 0
    for _ in range(300):
        value = _random_expr(rng, depth)
        text = json.dumps(value, separators=(",", ":"))
        assert validator.is_valid(value)
        assert re.fullmatch(regex, text), text
        seen += 1
    for bad in ['{"neg":1,"abs":2}', '{"+":[1]}', '{"+":[1,2,3]}', '{"x":1}', "10", '"abc"']:
        assert not validator.is_valid(json.loads(bad))
        assert not re.fullmatch(regex, bad), bad
    assert seen == 300


def _dev_schemas_with_refs(limit: int):
    folder = SHARED_DATA / "jsonschemabench-dev" / "data"
    if not folder.is_dir():
        pytest.skip(f"test data folder {folder} is absent (the shared data sets are not in this checkout)")
    out = []
    for path in sorted(folder.glob("*.json")):
        text = path.read_text()
        if '"$ref"' in text:
            out.append((path.name, json.loads(text)["schema"]))
    random.Random(3).shuffle(out)
    return out[:limit]


def test_memo_leaves_dev_split_regexes_unchanged():
    """Dev-split schemas with $ref (a seeded sample): the regex with the memo equals the regex
    without it, or both refuse the schema with the same error."""
    compared = 0
    for name, schema in _dev_schemas_with_refs(150):
        results = []
        for cls in (Compiler, _NoMemo):
            try:
                results.append(_regex(schema, cls, time_budget_s=20))
            except ConstrainedSpecError as e:
                results.append(f"{type(e).__name__}: {e}")
        assert results[0] == results[1], name
        compared += 1
    assert compared == 150


def test_a_full_memo_stops_remembering_and_changes_nothing(monkeypatch):
    """The memo is bounded (``MEMO_CHARS_FACTOR`` times ``max_regex_chars`` characters): past it
    the compiler compiles non-empty conjunctions again (only empty results, which cost nothing to
    hold, are still remembered), and the regex is the same."""
    import constrained_spec.grammar.json_schema.compiler as compiler_module

    class _CountingNoMemo(_Counting):
        memoize = False

    counts = {}
    for label, cls in (("memo", _Counting), ("none", _CountingNoMemo)):
        _Counting.calls = 0
        expected = _regex(EXPR, cls, max_recursion_depth=2)
        counts[label] = _Counting.calls
    monkeypatch.setattr(compiler_module, "MEMO_CHARS_FACTOR", 0)
    comp = _Counting(EXPR, SchemaOptions(recursive_refs="unroll", max_recursion_depth=2))
    _Counting.calls = 0
    assert comp.run().regex == expected
    assert comp.memo_chars == 0 and comp.conjunction_regex
    assert all(not r for r, _ in comp.conjunction_regex.values())
    assert counts["memo"] < _Counting.calls < counts["none"], (counts, _Counting.calls)


def test_the_resolvers_base_uri_is_readable():
    """``referencing`` has no public accessor for a resolver's base URI; the memo reads its
    ``_base_uri`` field. If an upgrade renames it, this fails (and the memo turns itself off)."""
    from referencing import Registry

    from constrained_spec.grammar.json_schema.compiler import resolver_base_uri

    resolver = Registry().resolver(base_uri="https://example.com/a")
    assert resolver_base_uri(resolver) == "https://example.com/a"


def test_without_a_base_uri_nothing_is_remembered(monkeypatch):
    """Where the base URI cannot be read the memo stays off (keying by the resolver's id would be
    unsafe once Python reuses it) and the regex is the one compiled without the memo."""
    from constrained_spec.grammar.json_schema import compiler as compiler_mod

    monkeypatch.setattr(compiler_mod, "resolver_base_uri", lambda resolver: None)
    _Counting.calls = 0
    assert _regex(EXPR, _Counting, max_recursion_depth=1) == _regex(EXPR, _NoMemo, max_recursion_depth=1)
    off = _Counting.calls

    class _CountingNoMemo(_Counting):
        memoize = False

    _Counting.calls = 0
    _regex(EXPR, _CountingNoMemo, max_recursion_depth=1)
    assert off == _Counting.calls
