"""Tool definitions: OpenAI dicts, Pydantic model classes and typed functions -> :class:`Tool`."""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from constrained_spec.errors import ToolError
from constrained_spec.grammar.nesting import MAX_SCHEMA_NESTING, nesting_depth
from constrained_spec.tools.schema_edits import strip_titles

__all__ = ["Tool", "ToolError", "is_model_class", "normalize_tools", "tool_from_dict", "tool_from_function", "tool_from_model"]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Tool:
    """One callable tool: its name, description and parameters JSON Schema (an object schema).

    ``function`` is the Python callable behind it (tools made from functions), ``model`` the
    Pydantic class its arguments validate into (tools made from models); both are optional.
    """

    name: str
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    description: str = ""
    function: Callable[..., Any] | None = field(default=None, compare=False, repr=False)
    model: Any = field(default=None, compare=False, repr=False)

    def to_openai(self) -> dict:
        """The OpenAI tool dict (what ``tools=`` of a chat template and the API expect)."""
        fn: dict[str, Any] = {"name": self.name, "parameters": self.parameters}
        if self.description:
            fn["description"] = self.description
        return {"type": "function", "function": fn}



def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ToolError(f"tool name {name!r} is invalid: use 1-64 letters, digits, '_' or '-'")
    return name


def _check_parameters(name: str, params: Any) -> dict:
    if params is None:
        return {"type": "object", "properties": {}}
    if not isinstance(params, dict):
        raise ToolError(f"the parameters of tool {name!r} must be a JSON Schema object, got {type(params).__name__}")
    if params.get("type", "object") != "object":
        raise ToolError(f"the parameters of tool {name!r} must be an object schema (type 'object'), got type {params.get('type')!r}")
    if nesting_depth(params, MAX_SCHEMA_NESTING) > MAX_SCHEMA_NESTING:  # the helpers below recurse on it
        raise ToolError(f"the parameters of tool {name!r} nest objects/arrays more than {MAX_SCHEMA_NESTING} levels deep")
    return params


def tool_from_dict(spec: Mapping[str, Any]) -> Tool:
    """An OpenAI tool dict (or its inner ``function`` dict) -> :class:`Tool`."""
    if not isinstance(spec, Mapping):
        raise ToolError(f"a tool definition must be a dict, got {type(spec).__name__}")
    if "function" in spec:
        if spec.get("type", "function") != "function":
            raise ToolError(f"tool type {spec.get('type')!r} is not supported; only 'function' tools are")
        spec = spec["function"]
        if not isinstance(spec, Mapping):
            raise ToolError("a tool's 'function' must be a dict with 'name' and 'parameters'")
    elif spec.get("type") not in (None, "function"):
        raise ToolError(f"tool type {spec.get('type')!r} is not supported; only 'function' tools are")
    name = _check_name(spec.get("name"))
    return Tool(name, _check_parameters(name, spec.get("parameters")), str(spec.get("description") or ""))


def is_model_class(obj: Any) -> bool:
    """Whether ``obj`` is a Pydantic model class."""
    from pydantic import BaseModel

    return isinstance(obj, type) and issubclass(obj, BaseModel)


def tool_from_model(model: Any, name: str | None = None, description: str | None = None) -> Tool:
    """A Pydantic model class -> :class:`Tool` whose arguments validate into that class."""
    schema = strip_titles(model.model_json_schema())
    doc = description if description is not None else (schema.pop("description", None) or inspect.getdoc(model) or "")
    schema.pop("description", None)
    tool_name = _check_name(name or model.__name__)
    return Tool(tool_name, _check_parameters(tool_name, schema), doc.strip(), model=model)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary text and per-parameter descriptions (Google ``Args:`` or Sphinx ``:param x:``)."""
    params: dict[str, str] = {}
    summary: list[str] = []
    section: str | None = None
    current: str | None = None
    item_indent = -1
    for line in doc.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        sphinx = re.match(r"^:param\s+(?:[^:]*\s)?(\w+):\s*(.*)$", stripped)
        if sphinx:
            section, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
        elif re.match(r"^(Args|Arguments|Parameters|Params):\s*$", stripped):
            section, current, item_indent = "args", None, -1
        elif re.match(r"^(Returns?|Raises|Yields|Examples?|Notes?|Attributes):\s*$", stripped) or stripped.startswith(":r"):
            section, current = "other", None
        elif section == "args":
            item = re.match(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
            if item and (item_indent < 0 or indent <= item_indent):
                item_indent = indent
                current = item.group(1)
                params[current] = item.group(2).strip()
            elif stripped and current:
                params[current] = (params[current] + " " + stripped).strip()
        elif section is None:
            summary.append(line)
        elif section == "sphinx" and stripped and current:
            params[current] = (params[current] + " " + stripped).strip()
    return "\n".join(summary).strip(), params


def tool_from_function(fn: Callable[..., Any], name: str | None = None, description: str | None = None) -> Tool:
    """A typed Python function -> :class:`Tool`; parameters come from its signature via Pydantic.

    Unannotated parameters accept any JSON value; parameters with defaults are optional.
    ``*args``/``**kwargs`` and positional-only parameters cannot be called with JSON arguments
    and are refused.
    """
    from typing import get_type_hints

    from pydantic import ConfigDict, Field, create_model

    if not callable(fn):
        raise ToolError(f"cannot make a tool of {fn!r}: not callable")
    tool_name = _check_name(name or getattr(fn, "__name__", ""))
    summary, param_docs = _parse_docstring(inspect.getdoc(fn) or "")
    try:
        hints = get_type_hints(fn, include_extras=True)
    except Exception:  # noqa: BLE001 - unresolvable forward references: fall back to raw annotations
        hints = {}
    fields: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ToolError(f"tool {tool_name!r}: parameter {p.name!r} is {p.kind.description}; only named parameters can be filled from JSON")
        annotation = hints.get(p.name, p.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if p.default is inspect.Parameter.empty else p.default
        described: dict[str, Any] = {"description": param_docs[p.name]} if p.name in param_docs else {}
        fields[p.name] = (annotation, Field(default, **described))
    try:
        model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        schema = strip_titles(model.model_json_schema())
    except Exception as exc:  # noqa: BLE001 - a type Pydantic cannot express as JSON Schema
        raise ToolError(f"tool {tool_name!r}: cannot build a JSON Schema from its signature: {exc}") from exc
    schema.pop("description", None)
    doc = description if description is not None else summary
    return Tool(tool_name, schema, doc, function=fn, model=model)


def normalize_tools(tools: Iterable[Any] | None) -> list[Tool]:
    """Any mix of OpenAI dicts, Pydantic classes, functions and :class:`Tool` -> list of Tool."""
    out: list[Tool] = []
    for t in tools or []:
        if isinstance(t, Tool):
            out.append(t)
        elif isinstance(t, Mapping):
            out.append(tool_from_dict(t))
        elif is_model_class(t):
            out.append(tool_from_model(t))
        elif callable(t):
            out.append(tool_from_function(t))
        else:
            raise ToolError(f"cannot use {t!r} as a tool: give an OpenAI tool dict, a Pydantic model class or a function")
    seen: set[str] = set()
    for t in out:
        if t.name in seen:
            raise ToolError(f"two tools are named {t.name!r}; tool names must be unique")
        seen.add(t.name)
    return out

