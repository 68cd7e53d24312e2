"""The OpenAI message shapes of a tool-enabled turn: :class:`ToolCall`, :class:`ToolReply`, and the
generated value read back as one."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from constrained_spec.errors import ToolError
from constrained_spec.tools.definitions import Tool, normalize_tools

__all__ = ["ToolCall", "ToolReply", "parse_tool_output"]


@dataclass
class ToolCall:
    """A generated call: tool name, arguments (a dict, validated against the tool) and an id."""

    name: str
    arguments: dict
    id: str = field(default_factory=lambda: "call_" + uuid.uuid4().hex[:24])

    def to_openai(self) -> dict:
        """OpenAI ``tool_calls`` entry; ``arguments`` is JSON text there, as in the OpenAI API."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


@dataclass
class ToolReply:
    """What a tool-enabled generation produced: text content, or tool calls (never both)."""

    content: Any = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    result: Any = None  # the GenerationResult it came from, when made by generate_tool_calls


def parse_tool_output(value: Any, tools: Iterable[Any] | None = None, ids: Callable[[], str] | None = None,
                      schema_options: Any = None) -> ToolReply:
    """A value generated under :func:`tool_call_schema` -> :class:`ToolReply` (content or calls).

    With ``tools``, each call's name must be one of them and its arguments must validate against
    that tool's parameters (a :class:`ToolError` otherwise) - a check, since values generated
    under the schema always pass it.
    """
    known = {t.name: t for t in normalize_tools(tools)} if tools is not None else None
    if not isinstance(value, dict):
        raise ToolError(f"expected a JSON object from a tool-enabled generation, got {type(value).__name__}")
    if "content" in value and len(value) == 1:
        return ToolReply(content=value["content"])
    raw = value["tool_calls"] if "tool_calls" in value else [value]
    calls = []
    for item in raw:
        if not isinstance(item, dict) or "name" not in item or "arguments" not in item:
            raise ToolError(f"not a tool call: {item!r}")
        if known is not None:
            _check_arguments(known, item["name"], item["arguments"], schema_options)
        call = ToolCall(item["name"], item["arguments"])
        if ids is not None:
            call.id = ids()
        calls.append(call)
    return ToolReply(tool_calls=calls)


def _check_arguments(known: Mapping[str, Tool], name: Any, arguments: Any, schema_options: Any = None) -> None:
    import jsonschema

    from constrained_spec.grammar.schema_refs import validation_errors

    tool = known.get(name) if isinstance(name, str) else None
    if tool is None:
        raise ToolError(f"the call names tool {name!r}, which is not among the tools {sorted(known)}")
    # no $ref is retrieved unless schema_options.ref_allow lists it (a SchemaError otherwise)
    error = jsonschema.exceptions.best_match(validation_errors(tool.parameters, arguments, schema_options))
    if error is not None:
        where = "/".join(map(str, error.path))
        raise ToolError(f"the arguments of the call to {name!r} fail its parameters at /{where}: {error.message}")
