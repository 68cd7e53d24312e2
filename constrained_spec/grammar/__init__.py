"""Compile once: output types (JSON Schema, Pydantic model, regex) -> regex -> token automaton."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from constrained_spec.errors import SchemaError


@dataclass(frozen=True)
class Regex:
    """An output type: text that fully matches ``pattern`` (outlines-core / Rust regex syntax)."""

    pattern: str


@dataclass(frozen=True)
class OutputSpec:
    """What an output type compiles to before the vocabulary is involved."""

    kind: str  # "json", "pydantic" or "regex"
    regex: str
    schema: dict | bool | None = None  # the JSON Schema, for kinds json and pydantic
    model: Any = None  # the Pydantic model class, for kind pydantic
    unenforced: tuple[str, ...] = ()  # keywords only checked after generation (opt-in)
    #: (JSON pointer, name) of ``format`` values JSON Schema does not define: annotations, ignored
    ignored_formats: tuple[tuple[str, str], ...] = ()
    #: the SchemaOptions it was compiled with: the draft and ref_allow the value is validated by
    schema_options: Any = None


def _is_pydantic_model(obj: Any) -> bool:
    try:
        from pydantic import BaseModel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def load_schema(schema: Any) -> dict | bool:
    """A schema given as dict, bool, JSON text or a path to a .json file -> dict/bool."""
    if isinstance(schema, (dict, bool)):
        return schema
    if isinstance(schema, (str, bytes)):
        text = schema.decode() if isinstance(schema, bytes) else schema
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"the schema is not valid JSON: {exc}") from exc
    raise SchemaError(f"cannot use an object of type {type(schema).__name__} as a JSON Schema")


def output_spec(output_type: Any, schema_options: Any = None) -> OutputSpec:
    """Turn an output type into its regex: a Pydantic model class, a JSON Schema, or ``Regex``."""
    from constrained_spec.grammar.json_schema import schema_to_regex

    if isinstance(output_type, Regex):
        return OutputSpec(kind="regex", regex=output_type.pattern)
    if _is_pydantic_model(output_type):
        schema = output_type.model_json_schema()
        compiled = schema_to_regex(schema, schema_options)
        return OutputSpec("pydantic", compiled.regex, schema, output_type, tuple(compiled.unenforced),
                          tuple(compiled.ignored_formats), schema_options)
    schema = load_schema(output_type)
    compiled = schema_to_regex(schema, schema_options)
    return OutputSpec("json", compiled.regex, schema, None, tuple(compiled.unenforced), tuple(compiled.ignored_formats),
                      schema_options)
