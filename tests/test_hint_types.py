"""The ``types`` schema hint: a short sketch that keeps every key, value and bound a reader needs.

Oracles are the schemas themselves: every property key (JSON-quoted, ``?`` exactly where the key is
not required), every enum and const value (as JSON), every bound; recursion gives a finite sketch;
hostile nesting and a huge schema give a bounded one. Over the JSONSchemaBench dev split the sketch
never raises and is shorter than ``json.dumps``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from constrained_spec.api import SCHEMA_HINT_MAX_CHARS, schema_hint
from constrained_spec.prompts.type_sketch import MAX_DEPTH, render_types

BENCH = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "jsonschemabench-dev" / "data"

INVOICE = {
    "type": "object",
    "properties": {
        "number": {"type": "string", "pattern": "^INV-[0-9]{5}$"},
        "issued": {"type": "string", "format": "date"},
        "currency": {"enum": ["EUR", "USD"]},
        "kind": {"const": "invoice"},
        "lines": {"type": "array", "minItems": 1, "maxItems": 6,
                  "items": {"type": "object", "properties": {"qty": {"type": "integer", "minimum": 1, "maximum": 99},
                                                             "note": {"type": "string", "maxLength": 40}},
                            "required": ["qty"]}},
        "total": {"type": "number", "minimum": 0, "description": "Sum of the lines, tax included."},
        "paid": {"type": ["boolean", "null"]},
    },
    "required": ["number", "issued", "currency", "kind", "lines", "total"],
}


def _keys_with_marks(schema: dict) -> list[str]:
    required = set(schema.get("required", []))
    return [json.dumps(k) + ("" if k in required else "?") + ":" for k in schema["properties"]]


def test_sketch_keeps_keys_optional_marks_values_and_bounds():
    sketch = render_types(INVOICE)
    for mark in _keys_with_marks(INVOICE) + _keys_with_marks(INVOICE["properties"]["lines"]["items"]):
        assert mark in sketch, mark
    assert '"paid"?:' in sketch and '"paid":' not in sketch  # optional keys carry the mark, required ones not
    for fragment in ('"EUR" | "USD"', '"invoice"', "^INV-[0-9]{5}$", "(date)", "integer 1..99", "(1-6 items)",
                     "(at most 40 chars)", "number >= 0", "boolean | null", "Sum of the lines, tax included."):
        assert fragment in sketch, fragment
    assert len(sketch) < len(json.dumps(INVOICE)) / 2


def test_recursive_refs_are_named_once_and_the_sketch_is_finite():
    tree = {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
                                                                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                               "required": ["value"]}},
            "$ref": "#/$defs/node"}
    sketch = render_types(tree)
    assert sketch.startswith("node")
    assert sketch.count("where node = ") == 1 and '"children"?: [node]' in sketch
    root = {"type": "object", "properties": {"next": {"$ref": "#"}, "v": {"type": "string"}}}
    assert render_types(root).startswith('Root = {"next"?: Root')


def test_unresolvable_and_remote_refs_are_any_and_read_nothing():
    sketch = render_types({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"},
                                                           "b": {"$ref": "https://example.com/s.json"}}})
    assert '"b"?: any' in sketch and "where missing = any" in sketch


@pytest.mark.parametrize("style", ["types"])
def test_hostile_nesting_and_size_stay_bounded(style):
    deep: dict = {"type": "string"}
    for _ in range(5000):  # far past Python's recursion limit if the writer recursed without a bound
        deep = {"type": "object", "properties": {"a": deep}}
    sketch = render_types(deep)
    assert "..." in sketch and sketch.count("{") <= MAX_DEPTH + 2
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}
    hint = schema_hint(huge, style=style)
    assert len(hint) < SCHEMA_HINT_MAX_CHARS + 200 and "cut at" in hint


def test_odd_input_never_raises():
    for schema in (True, False, {}, [], 3, {"type": 7}, {"properties": []}, {"enum": []}, {"anyOf": "x"},
                   {"type": "array", "items": [{"type": "string"}, True]}, {"minimum": True, "type": "number"},
                   {"description": "x" * 1000, "type": "string"}, {"$ref": "#/a~1b/0"}):
        assert isinstance(render_types(schema), str)
    assert len(render_types({"description": "x" * 1000, "type": "string"})) < 200


def test_dev_split_sketches_render_and_are_shorter():
    if not BENCH.is_dir():
        pytest.skip(f"test data folder {BENCH} is absent (the shared data sets are not in this checkout)")
    files = sorted(BENCH.glob("*.json"))
    random.Random(7).shuffle(files)
    longer, total = 0, 0
    for path in files[:800]:
        schema = json.loads(path.read_text())["schema"]
        sketch = render_types(schema)
        total += 1
        longer += len(sketch) > len(json.dumps(schema))
        if isinstance(schema, dict) and isinstance(schema.get("properties"), dict) and len(schema) < 50:
            top = [k for k in schema["properties"] if isinstance(k, str)]
            assert all(json.dumps(k) in sketch for k in top[:50]), path.name
    assert total == min(800, len(files)) and longer <= total * 0.02, (longer, total)


def test_generator_writes_the_types_hint(gpt2_tokenizer, tmp_path):
    from tiny_models import tiny_llama

    from constrained_spec.api import Generator
    from constrained_spec.grammar import output_spec

    spec = output_spec(INVOICE)
    model = tiny_llama(50257, seed=1)
    gens = {style: Generator(model, None, tokenizer=gpt2_tokenizer, cache_dir=tmp_path, progress=False,
                             schema_hint_style=style) for style in ("full", "types")}
    ids = {style: g.prompt_ids("Read the invoice.", spec) for style, g in gens.items()}
    assert '"currency": "EUR" | "USD"' in gpt2_tokenizer.decode(ids["types"])
    assert len(ids["types"]) < len(ids["full"]) * 0.6
    small = {"type": "object", "properties": {"kind": {"const": "invoice"}, "currency": {"enum": ["EUR", "USD"]}},
             "required": ["kind", "currency"]}
    result = gens["types"].run("Read the invoice.", small, max_new_tokens=60)  # the constraint is the whole schema
    assert result.value["kind"] == "invoice" and result.value["currency"] in ("EUR", "USD")
