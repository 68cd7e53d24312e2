"""The meta-schema check's fast path (``grammar/meta_check.py``): jsonschema-rs answers "valid",
``jsonschema``'s ``check_schema`` everything else. The oracle is ``check_schema`` itself, on
real schemas of the development splits and on hand-made invalid ones."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
from conftest import SHARED_DATA

from constrained_spec.errors import SchemaError
from constrained_spec.grammar import meta_check
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex
from constrained_spec.grammar.schema_refs import validator_class

pytest.importorskip("jsonschema_rs")


def _python_valid(cls, schema) -> bool:
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        return False
    return True


def test_fast_path_agrees_with_check_schema_on_dev_schemas():
    """Wherever the fast path says valid, ``check_schema`` says so too (200 schemas drawn from
    both development splits, every draft among them); and it says valid for most (it is used)."""
    files = sorted((SHARED_DATA / "jsonschemabench-dev" / "data").glob("*.json"))
    files += sorted((SHARED_DATA / "jsonschemabench-dev2" / "data").glob("*.json"))
    if not files:
        pytest.skip("../shared/data/jsonschemabench-dev* not found")
    fast = 0
    for f in random.Random(4).sample(files, 200):
        schema = json.loads(f.read_text())["schema"]
        cls = validator_class(schema, None)
        if meta_check._fast_valid(cls, schema):
            fast += 1
            assert _python_valid(cls, schema), f.name
    assert fast >= 180


@pytest.mark.parametrize("schema", [
    {"type": "strnig"},
    {"minLength": -1},
    {"properties": {"a": 5}},
    {"required": "a"},
    {"pattern": "(a"},
    {"patternProperties": {"[": {}}},
    {"pattern": "\\p{L}"},  # an ECMA class Python's re refuses: check_schema's regex format says invalid
])
def test_invalid_schemas_keep_check_schemas_verdict(schema):
    cls = validator_class(schema, None)
    assert not _python_valid(cls, schema)
    assert not meta_check._fast_valid(cls, schema)
    with pytest.raises(SchemaError):
        schema_to_regex(schema, SchemaOptions())


def test_valid_schema_skips_check_schema(monkeypatch):
    """The fast path is taken: a check_schema that would fail is never called for a valid schema."""
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]+$"}}}
    cls = validator_class(schema, None)
    calls = []
    monkeypatch.setattr(cls, "check_schema", classmethod(lambda c, s, *a, **k: calls.append(s)))
    meta_check.check_schema(cls, schema)
    assert calls == []


def test_without_jsonschema_rs_check_schema_decides(monkeypatch):
    """jsonschema-rs missing (its validator None): every schema goes to check_schema."""
    schema = {"type": "string"}
    cls = validator_class(schema, None)
    monkeypatch.setattr(meta_check, "_validator", lambda c: None)
    calls = []
    monkeypatch.setattr(cls, "check_schema", classmethod(lambda c, s, *a, **k: calls.append(s)))
    meta_check.check_schema(cls, schema)
    assert calls == [schema]


def test_uri_format_checker_installed_check_schema_decides(monkeypatch):
    """Where a URI format checker is installed, check_schema asserts formats this module does not
    check: it decides (control: without the checker the fast path answers)."""
    schema = {"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}}
    cls = validator_class(schema, None)
    assert meta_check._fast_valid(cls, schema)
    checker = jsonschema.FormatChecker()
    checker.checks("uri-reference")(lambda v: True)
    monkeypatch.setattr(cls, "FORMAT_CHECKER", checker)
    assert not meta_check._fast_valid(cls, schema)
