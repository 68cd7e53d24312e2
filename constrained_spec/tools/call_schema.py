"""The call grammar: one JSON Schema for a tool-enabled turn under each ``tool_choice``."""

from __future__ import annotations

import copy
import re
from typing import Any, Iterable, Mapping, Sequence

from constrained_spec.errors import ToolError
from constrained_spec.grammar.nesting import check_nesting
from constrained_spec.tools.definitions import Tool, normalize_tools
from constrained_spec.tools.schema_edits import close_objects as close_open_objects
from constrained_spec.tools.schema_edits import has_root_refs, rebase_refs

__all__ = ["normalize_tool_choice", "reply_schema", "tool_call_schema"]


def normalize_tool_choice(tool_choice: Any, tools: Sequence[Tool]) -> str:
    """``"auto"``/``"required"``/``"none"``, or the name of the one tool that must be called."""
    if tool_choice is None:
        tool_choice = "auto"
    if isinstance(tool_choice, Tool):
        tool_choice = tool_choice.name
        names = {t.name for t in tools}
        if tool_choice not in names:
            raise ToolError(f"tool_choice names tool {tool_choice!r}, which is not among the tools {sorted(names)}")
        return "=" + tool_choice
    if isinstance(tool_choice, str):
        if tool_choice in ("auto", "required", "none"):
            if tool_choice != "none" and not tools:
                raise ToolError(f"tool_choice {tool_choice!r} needs at least one tool")
            return tool_choice
        raise ToolError(f"tool_choice must be 'auto', 'required', 'none' or {{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function") if tool_choice.get("type", "function") == "function" else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str):
            raise ToolError(f"tool_choice must look like {{'type': 'function', 'function': {{'name': ...}}}}, got {dict(tool_choice)!r}")
        listed = [t.name for t in tools]
        if name not in listed:
            raise ToolError(f"tool_choice names tool {name!r}, which is not among the tools {listed}")
        return "=" + name
    raise ToolError(f"cannot use {tool_choice!r} as tool_choice")


def _embeddable(schema: Any, defs: dict, key: str) -> Any:
    """``schema`` ready to sit inside another: when it has local ``$ref`` s it moves whole into
    ``defs[key]`` (references rewritten) and a ``$ref`` to it is returned."""
    if not has_root_refs(schema):
        return schema
    key = re.sub(r"[^A-Za-z0-9_]", "_", key)
    while key in defs:
        key += "_"
    defs[key] = rebase_refs(schema, f"/$defs/{key}")
    return {"$ref": f"#/$defs/{key}"}


def _call_object(tool: Tool, defs: dict, close_objects: bool) -> dict:
    params = close_open_objects(tool.parameters) if close_objects else copy.deepcopy(tool.parameters)
    params = _embeddable(params, defs, tool.name + "__arguments")
    return {
        "type": "object",
        "properties": {"name": {"const": tool.name}, "arguments": params},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def reply_schema(content_schema: Any = None, defs: dict | None = None) -> dict:
    """The text-reply branch: ``{"content": <content_schema, default a string>}``.

    A content schema with local ``$ref`` s is moved into ``defs`` (pass the root's ``$defs``);
    without ``defs`` the result gets its own root ``$defs``.
    """
    own = defs is None
    table: dict = {} if defs is None else defs
    content = {"type": "string"} if content_schema is None else _embeddable(content_schema, table, "content__schema")
    if own and table:
        return {"type": "object", "properties": {"content": content}, "required": ["content"], "additionalProperties": False, "$defs": table}
    return {"type": "object", "properties": {"content": content}, "required": ["content"], "additionalProperties": False}


def tool_call_schema(
    tools: Iterable[Any],
    tool_choice: Any = "auto",
    *,
    parallel: bool = False,
    max_calls: int = 4,
    content_schema: Any = None,
    close_objects: bool = True,
) -> dict:
    """One JSON Schema for the model's turn under ``tool_choice`` (see the module docstring).

    ``content_schema`` is the schema of the text branch for ``"auto"``/``"none"`` (a string by
    default; the server passes the ``response_format`` schema there).
    """
    tool_list = normalize_tools(tools)
    choice = normalize_tool_choice(tool_choice, tool_list)
    if content_schema is not None:
        check_nesting(content_schema, "the content schema")  # _embeddable recurses on it
    if choice == "none":
        return reply_schema(content_schema)
    chosen = [t for t in tool_list if t.name == choice[1:]] if choice.startswith("=") else tool_list
    defs: dict[str, Any] = {}
    calls = [_call_object(t, defs, close_objects) for t in chosen]
    call = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if parallel:
        if max_calls < 1:
            raise ToolError("max_calls must be at least 1")
        call = {
            "type": "object",
            "properties": {"tool_calls": {"type": "array", "items": call, "minItems": 1, "maxItems": max_calls}},
            "required": ["tool_calls"],
            "additionalProperties": False,
        }
    if choice == "auto":
        branches = call["anyOf"] if set(call) == {"anyOf"} else [call]
        schema: dict[str, Any] = {"anyOf": [reply_schema(content_schema, defs), *branches]}
    else:
        schema = dict(call)
    if defs:
        schema["$defs"] = defs
    return schema
