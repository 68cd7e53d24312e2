"""Compile once: output types (JSON Schema, Pydantic model, regex, Lark grammar) -> a grammar the engine matches."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from constrained_spec.errors import GrammarError, SchemaError


@dataclass(frozen=True)
class Regex:
    """An output type: text that fully matches ``pattern`` (outlines-core / Rust regex syntax)."""

    pattern: str


@dataclass(frozen=True)
class CFG:
    """An output type: text in the language of a Lark grammar (``start`` is its start rule).

    The grammar is enforced token by token by the lazy engine (llguidance's Lark dialect); the
    Python ``lark`` package parses every finished output, and the result carries its tree.
    """

    text: str
    start: str = "start"

    @classmethod
    def from_file(cls, path: str | Any, start: str = "start") -> "CFG":
        """A grammar read from a ``.lark`` file."""
        from pathlib import Path

        try:
            return cls(Path(path).read_text(encoding="utf-8"), start)
        except OSError as exc:
            raise GrammarError(f"cannot read the grammar file {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise GrammarError(f"the grammar file {path} is not UTF-8 text") from exc


@dataclass(frozen=True)
class OutputSpec:
    """What an output type compiles to before the vocabulary is involved."""

    kind: str  # "json", "pydantic", "regex" or "lark"
    regex: str  # the regex (kinds json, pydantic, regex); for kind lark, the grammar text
    schema: dict | bool | None = None  # the JSON Schema, for kinds json and pydantic
    model: Any = None  # the Pydantic model class, for kind pydantic
    unenforced: tuple[str, ...] = ()  # keywords only checked after generation (opt-in)
    #: (JSON pointer, name) of ``format`` values JSON Schema does not define: annotations, ignored
    ignored_formats: tuple[tuple[str, str], ...] = ()
    #: the SchemaOptions it was compiled with: the draft and ref_allow the value is validated by
    schema_options: Any = None
    #: kinds json and pydantic, for a schema with recursive ``$ref``, one the regex narrows, or one
    #: whose regex would pass ``max_regex_chars``: a Lark grammar of its whole language, which the
    #: lazy engine enforces instead of ``regex`` (``regex`` unrolls recursion a bounded depth or
    #: narrows, for the automaton engine; ``""`` where no regex fits the cap); the value is still
    #: parsed as JSON and validated against the schema
    grammar: str | None = None
    #: kinds json and pydantic: the JSON pointers where ``regex`` holds only part of the language
    #: (``SchemaRegex.narrowed``; ``grammar`` then holds all of it): the automaton engine, which runs
    #: ``regex``, refuses such a spec rather than narrow it
    narrowed: tuple[str, ...] = ()


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
    if isinstance(output_type, CFG):
        return OutputSpec(kind="lark", regex=_with_start(output_type))
    if _is_pydantic_model(output_type):
        schema = output_type.model_json_schema()
        compiled = schema_to_regex(schema, schema_options)
        return OutputSpec("pydantic", compiled.regex, schema, output_type, tuple(compiled.unenforced),
                          tuple(compiled.ignored_formats), schema_options, compiled.lark, tuple(compiled.narrowed))
    schema = load_schema(output_type)
    compiled = schema_to_regex(schema, schema_options)
    return OutputSpec("json", compiled.regex, schema, None, tuple(compiled.unenforced), tuple(compiled.ignored_formats),
                      schema_options, compiled.lark, tuple(compiled.narrowed))


def _with_start(cfg: CFG) -> str:
    """The grammar text with ``start`` as its start rule (llguidance starts at ``start``)."""
    if cfg.start == "start":
        return cfg.text
    if not cfg.start.replace("_", "a").isalnum():
        raise GrammarError(f"start rule {cfg.start!r} is not a rule name")
    return f"start: {cfg.start}\n{cfg.text}"
