"""Function calling: tool definitions -> one JSON Schema the decoder enforces exactly.

Tools can be given as

* OpenAI dicts, ``{"type": "function", "function": {"name", "description", "parameters"}}``
  (the bare inner ``{"name", "description", "parameters"}`` is accepted too),
* Pydantic model classes (name = class name, description = docstring, parameters = its schema),
* typed Python functions (name, description and parameters from the signature and docstring,
  through a Pydantic model built with ``create_model``; the function is kept for :func:`call_tool`),
* :class:`Tool` objects.

:func:`normalize_tools` turns any mix of these into a list of :class:`Tool`.

What the model generates
------------------------
One call is the JSON object ``{"name": <const>, "arguments": <the tool's parameters>}``;
several tools are an ``anyOf`` of such objects, whose branches differ by the ``const`` name, so
the grammar commits to one tool as soon as its name is written and then enforces exactly that
tool's parameters. :func:`tool_call_schema` builds it for each ``tool_choice``:

* ``"required"``: ``anyOf`` over all tools' call objects;
* ``{"type": "function", "function": {"name": N}}``: the call object of tool ``N`` only;
* ``"auto"``: the model may answer in text *or* call a tool. Free text and JSON cannot share one
  exact grammar cleanly (text could start with ``{``), so the choice is made inside JSON: an
  ``anyOf`` of a reply object ``{"content": <string, or the response_format schema>}`` and the
  call objects. The first key the model writes (``"content"`` vs ``"name"``) is the decision,
  and from there on each branch is enforced exactly. :func:`parse_tool_output` unwraps either
  shape into ``(content, tool_calls)``;
* ``"none"``: the reply object only.

With ``parallel=True`` the call branch is ``{"tool_calls": [call, ...]}`` (1..``max_calls``
items) instead of one bare call object.

Objects in the tools' parameters that list ``properties`` but say nothing about extra keys are
closed (``additionalProperties: false``) in the *generation* schema only (``close_objects``):
every value that results still validates against the original parameters, the model just cannot
invent keys. Parameters that use ``$ref`` are moved whole into the root ``$defs`` and their
references rewritten, so nested Pydantic models keep working inside the combined schema.

Prompting: :func:`tool_prompt` gives the messages of a tool-enabled turn and the tool list to
hand to the chat template: with a template that renders tools itself, the tools go to
``apply_chat_template(messages, tools=...)`` (``Generator.run(..., tools=...)``) and only the
reply format is added as a system message; otherwise :func:`tool_prompt_messages` puts the tool
list and the reply format into a system message (works with any chat template).
:func:`render_prompt` is the same as prompt text.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from constrained_spec.errors import ConstrainedSpecError
from constrained_spec.grammar.nesting import MAX_SCHEMA_NESTING, check_nesting, nesting_depth

__all__ = [
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolReply",
    "normalize_tools",
    "tool_from_function",
    "tool_from_model",
    "tool_from_dict",
    "tool_call_schema",
    "normalize_tool_choice",
    "parse_tool_output",
    "tool_prompt_messages",
    "tool_prompt",
    "render_prompt",
    "template_supports_tools",
    "call_tool",
    "generate_tool_calls",
    "ToolCallStream",
    "partial_json_string",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ToolError(ConstrainedSpecError, ValueError):
    """A tool definition, tool_choice or tool call that cannot be used."""


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


# -- normalising tool definitions ------------------------------------------------------------


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


def _is_model_class(obj: Any) -> bool:
    from pydantic import BaseModel

    return isinstance(obj, type) and issubclass(obj, BaseModel)


def tool_from_model(model: Any, name: str | None = None, description: str | None = None) -> Tool:
    """A Pydantic model class -> :class:`Tool` whose arguments validate into that class."""
    schema = _strip_titles(model.model_json_schema())
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
        described = {"description": param_docs[p.name]} if p.name in param_docs else {}
        fields[p.name] = (annotation, Field(default, **described))
    try:
        model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        schema = _strip_titles(model.model_json_schema())
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
        elif _is_model_class(t):
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


# -- schema helpers --------------------------------------------------------------------------

_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
                  "propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems")


def _walk(schema: Any, fn: Callable[[dict, bool], None], in_all_of: bool = False) -> None:
    """Call ``fn(node, in_all_of)`` on every subschema node (keys of ``properties`` are not nodes)."""
    if not isinstance(schema, dict):
        return
    fn(schema, in_all_of)
    for key in _SUBSCHEMA_MAPS:
        sub = schema.get(key)
        if isinstance(sub, dict):
            for v in sub.values():
                _walk(v, fn)
    for key in _SUBSCHEMA_LISTS:
        sub = schema.get(key)
        if isinstance(sub, list):
            for v in sub:
                _walk(v, fn, in_all_of=key == "allOf")
    for key in _SUBSCHEMA_ONE:
        sub = schema.get(key)
        if isinstance(sub, dict):
            _walk(sub, fn)
        elif key == "items" and isinstance(sub, list):
            for v in sub:
                _walk(v, fn)


def _strip_titles(schema: dict) -> dict:
    """Drop Pydantic's generated ``title`` keywords (noise in prompts); property names are kept."""
    schema = copy.deepcopy(schema)

    def drop(node: dict, _: bool) -> None:
        if isinstance(node.get("title"), str):
            del node["title"]

    _walk(schema, drop)
    return schema


def _close_objects(schema: dict) -> dict:
    """Add ``additionalProperties: false`` where an object lists properties and is otherwise open.

    Skipped under ``allOf`` and next to composition keywords, where closing one part would
    forbid the properties another part allows. The result accepts a subset of the original.
    """
    schema = copy.deepcopy(schema)
    open_keys = ("additionalProperties", "patternProperties", "unevaluatedProperties", "allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas")

    def close(node: dict, in_all_of: bool) -> None:
        if in_all_of or not isinstance(node.get("properties"), dict):
            return
        if any(k in node for k in open_keys):
            return
        node["additionalProperties"] = False

    _walk(schema, close)
    return schema


def _has_root_refs(schema: Any) -> bool:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            return True
        return any(_has_root_refs(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_root_refs(v) for v in schema)
    return False


def _rebase_refs(schema: Any, base: str) -> Any:
    """Rewrite local ``$ref`` ``#...`` to ``#<base>...`` (the schema now lives at ``base``)."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#"):
                rest = v[1:]
                out[k] = "#" + base + (rest if rest.startswith("/") or not rest else "/" + rest)
            else:
                out[k] = _rebase_refs(v, base)
        return out
    if isinstance(schema, list):
        return [_rebase_refs(v, base) for v in schema]
    return schema


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
        names = [t.name for t in tools]
        if name not in names:
            raise ToolError(f"tool_choice names tool {name!r}, which is not among the tools {names}")
        return "=" + name
    raise ToolError(f"cannot use {tool_choice!r} as tool_choice")


def _embeddable(schema: Any, defs: dict, key: str) -> Any:
    """``schema`` ready to sit inside another: when it has local ``$ref`` s it moves whole into
    ``defs[key]`` (references rewritten) and a ``$ref`` to it is returned."""
    if not _has_root_refs(schema):
        return schema
    key = re.sub(r"[^A-Za-z0-9_]", "_", key)
    while key in defs:
        key += "_"
    defs[key] = _rebase_refs(schema, f"/$defs/{key}")
    return {"$ref": f"#/$defs/{key}"}


def _call_object(tool: Tool, defs: dict, close_objects: bool) -> dict:
    params = _close_objects(tool.parameters) if close_objects else copy.deepcopy(tool.parameters)
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
    defs = {} if own else defs
    content = {"type": "string"} if content_schema is None else _embeddable(content_schema, defs, "content__schema")
    if own and defs:
        return {"type": "object", "properties": {"content": content}, "required": ["content"], "additionalProperties": False, "$defs": defs}
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
        schema = {"anyOf": [reply_schema(content_schema, defs), *branches]}
    else:
        schema = dict(call)
    if defs:
        schema["$defs"] = defs
    return schema


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


# -- prompts ---------------------------------------------------------------------------------


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a ``tools`` list (a heuristic on its text)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = " ".join(str(v) for v in template.values())
    return isinstance(template, str) and "tools" in template


def _format_instruction(tools: Sequence[Tool], choice: str, parallel: bool, content_schema: Any = None) -> str:
    from constrained_spec.api import schema_hint

    answer = "<your answer>"
    content_hint = "" if content_schema is None else " " + schema_hint(content_schema, 'The value of "content" is a single JSON value')
    call = '{"name": "<tool name>", "arguments": {<arguments following the tool\'s parameters>}}'
    calls = '{"tool_calls": [' + call + ", ...]}" if parallel else call
    if choice == "none":
        return 'Do not call a tool now. Reply with the JSON object {"content": ' + answer + "}." + content_hint
    if choice.startswith("="):
        return f"Call the tool {choice[1:]!r} now. Reply with the JSON object " + (calls if parallel else call) + "."
    if choice == "required":
        return "Call one of the tools now. Reply with the JSON object " + calls + "."
    return (
        "To call a tool, reply with the JSON object " + calls + ". "
        'To answer without a tool, reply with the JSON object {"content": ' + answer + "}." + content_hint
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") in ("text", "input_text"):
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
            else:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ToolError(f"message content parts of type {kind!r} are not supported; only text")
        return "".join(parts)
    return json.dumps(content, ensure_ascii=False)


def _arguments_dict(args: Any) -> Any:
    if isinstance(args, str):
        try:
            return json.loads(args)
        except json.JSONDecodeError:
            return args
    return args


def plain_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Messages with tool turns spelled as text, for chat templates without tool support.

    An assistant turn with ``tool_calls`` becomes its calls in the reply format; a ``tool``
    result becomes a user turn naming the call it answers. Content parts are joined as text.
    """
    names: dict[str, str] = {}
    out: list[dict] = []
    for m in messages:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function", c)
                names[str(c.get("id", ""))] = fn.get("name", "")
                calls.append({"name": fn.get("name"), "arguments": _arguments_dict(fn.get("arguments"))})
            text = json.dumps(calls[0] if len(calls) == 1 else {"tool_calls": calls}, ensure_ascii=False)
            out.append({"role": "assistant", "content": text})
        elif role in ("tool", "function"):
            name = m.get("name") or names.get(str(m.get("tool_call_id", "")), "")
            label = f"Result of tool {name!r}" if name else "Tool result"
            out.append({"role": "user", "content": f"{label}: {_content_text(m.get('content'))}"})
        elif role == "developer":
            out.append({"role": "system", "content": _content_text(m.get("content"))})
        else:
            out.append({"role": role, "content": _content_text(m.get("content"))})
    return out


def tool_prompt_messages(
    messages: Sequence[Mapping[str, Any]] | str,
    tools: Iterable[Any],
    tool_choice: Any = "auto",
    *,
    parallel: bool = False,
    content_schema: Any = None,
) -> list[dict]:
    """Messages with a system message listing the tools and the reply format (any template).

    An existing first system message is kept and the tool text appended to it.
    """
    tool_list = normalize_tools(tools)
    choice = normalize_tool_choice(tool_choice, tool_list)
    if content_schema is not None:
        check_nesting(content_schema, "the content schema")  # _embeddable recurses on it
    msgs = plain_messages([{"role": "user", "content": messages}] if isinstance(messages, str) else messages)
    lines = ["You can call these tools (JSON Schema of each tool's arguments):"]
    for t in tool_list:
        desc = f": {t.description}" if t.description else ""
        lines.append(f"- {t.name}{desc}\n  arguments: {json.dumps(t.parameters, ensure_ascii=False)}")
    lines.append(_format_instruction(tool_list, choice, parallel, content_schema))
    return _with_system_text(msgs, "\n".join(lines))


def _with_system_text(msgs: list[dict], text: str) -> list[dict]:
    """``msgs`` with ``text`` appended to a leading system message, or in a new one."""
    if msgs and msgs[0].get("role") == "system":
        msgs[0] = {**msgs[0], "content": (str(msgs[0].get("content") or "") + "\n\n" + text).strip()}
    else:
        msgs.insert(0, {"role": "system", "content": text})
    return msgs


def tool_prompt(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]] | str,
    tools: Iterable[Any] = (),
    tool_choice: Any = "auto",
    *,
    parallel: bool = False,
    content_schema: Any = None,
) -> tuple[list[dict], list[dict] | None]:
    """The messages of a tool-enabled turn and the tool list for the chat template.

    When the tokenizer's template renders tools (:func:`template_supports_tools`, and a trial
    render succeeds), returns the messages in the template's own form (tool calls with dict
    arguments, ``tool`` turns kept) with the reply-format line added as a system message, and the
    OpenAI tool dicts to pass as ``apply_chat_template(..., tools=...)`` (``Generator.run(...,
    tools=...)``). Otherwise the tools are spelled in a system message
    (:func:`tool_prompt_messages`) and the tool list is None. ``tokenizer`` may be None.
    """
    tool_list = normalize_tools(tools)
    if not tool_list:
        return plain_messages([{"role": "user", "content": messages}] if isinstance(messages, str) else messages), None
    if template_supports_tools(tokenizer):
        choice = normalize_tool_choice(tool_choice, tool_list)
        msgs = [{"role": "user", "content": messages}] if isinstance(messages, str) else [dict(m) for m in messages]
        for m in msgs:
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    {**c, "function": {**c.get("function", {}), "arguments": _arguments_dict(c.get("function", {}).get("arguments"))}}
                    for c in m["tool_calls"]
                ]
            if isinstance(m.get("content"), list):
                m["content"] = _content_text(m["content"])
            if m.get("role") == "developer":
                m["role"] = "system"
        msgs = _with_system_text(msgs, _format_instruction(tool_list, choice, parallel, content_schema))
        openai_tools = [t.to_openai() for t in tool_list]
        try:
            _apply_template(tokenizer, msgs, openai_tools)
            return msgs, openai_tools
        except Exception:  # noqa: BLE001 - a template that chokes on tool turns: fall back to text
            pass
    return tool_prompt_messages(messages, tool_list, tool_choice, parallel=parallel, content_schema=content_schema), None


def render_prompt(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]] | str,
    tools: Iterable[Any] = (),
    tool_choice: Any = "auto",
    *,
    parallel: bool = False,
    content_schema: Any = None,
) -> str:
    """Prompt text for a tool-enabled turn, ending where the assistant's reply starts.

    The messages of :func:`tool_prompt` through the chat template (with its tool list when the
    template renders tools). Without a chat template the contents are joined by newlines.
    """
    msgs, template_tools = tool_prompt(tokenizer, messages, tools, tool_choice, parallel=parallel, content_schema=content_schema)
    return _apply_template(tokenizer, msgs, template_tools)


def _apply_template(tokenizer: Any, messages: list[dict], tools: list[dict] | None) -> str:
    if getattr(tokenizer, "chat_template", None):
        kwargs = {"tools": tools} if tools else {}
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    return "\n".join(str(m.get("content", "")) for m in messages) + "\n"


# -- running and dispatching -----------------------------------------------------------------


def generate_tool_calls(
    generator: Any,
    messages: Sequence[Mapping[str, Any]] | str,
    tools: Iterable[Any],
    tool_choice: Any = "auto",
    *,
    parallel: bool = False,
    max_calls: int = 4,
    content_schema: Any = None,
    **options: Any,
) -> ToolReply:
    """Run ``generator`` for one tool-enabled turn; returns content or validated tool calls.

    ``options`` go to :meth:`Generator.run` (temperature, seed, max_new_tokens, ...). The prompt
    comes from :func:`tool_prompt` (the template's own tool rendering where it has one, else a
    system message listing the tools); the reply format is in it, so the JSON Schema is not
    appended again.
    """
    tool_list = normalize_tools(tools)
    schema = tool_call_schema(tool_list, tool_choice, parallel=parallel, max_calls=max_calls, content_schema=content_schema)
    prompt, template_tools = tool_prompt(getattr(generator, "tokenizer", None), messages, tool_list, tool_choice,
                                         parallel=parallel, content_schema=content_schema)
    if template_tools:
        options["tools"] = template_tools
    options.setdefault("schema_in_prompt", False)
    result = generator.run(prompt, schema, **options)
    reply = parse_tool_output(result.value, tool_list, schema_options=getattr(generator, "schema_options", None))
    reply.result = result
    return reply


def call_tool(tool_call: Any, functions: Any) -> Any:
    """Call the Python function a tool call names, with its arguments validated and converted.

    ``tool_call``: a :class:`ToolCall`, an OpenAI ``tool_calls`` entry (arguments as JSON text),
    or ``{"name", "arguments"}``. ``functions``: a mapping name -> function, or a list of
    functions / :class:`Tool` objects with functions. Arguments go through the Pydantic model
    built from the function's signature, so ``int``/``datetime``/model-typed parameters arrive as
    those types; a Pydantic-model tool without a function is validated and returned as an instance.
    """
    if isinstance(tool_call, ToolCall):
        name, args = tool_call.name, tool_call.arguments
    elif isinstance(tool_call, Mapping):
        fn = tool_call.get("function", tool_call)
        name, args = fn.get("name"), _arguments_dict(fn.get("arguments", {}))
    else:
        raise ToolError(f"cannot dispatch {tool_call!r}: not a tool call")
    if not isinstance(args, dict):
        raise ToolError(f"the arguments of the call to {name!r} are not a JSON object: {args!r}")
    if isinstance(functions, Mapping):
        table = {k: (v if isinstance(v, Tool) else None, v) for k, v in functions.items()}
    else:
        table = {}
        for f in functions:
            t = f if isinstance(f, Tool) else (tool_from_model(f) if _is_model_class(f) else tool_from_function(f))
            table[t.name] = (t, f)
    if name not in table:
        raise ToolError(f"the call names tool {name!r}, which has no function; known: {sorted(table)}")
    tool, target = table[name]
    if tool is None:
        tool = tool_from_model(target, name=name) if _is_model_class(target) else tool_from_function(target, name=name)
    if tool.function is None:
        if tool.model is not None:
            return _validate(tool, args)
        raise ToolError(f"tool {name!r} has no Python function to call")
    if tool.model is None:
        return tool.function(**args)
    validated = _validate(tool, args)
    kwargs = {k: getattr(validated, k) for k in type(validated).model_fields}
    return tool.function(**kwargs)


def _validate(tool: Tool, args: dict) -> Any:
    from pydantic import ValidationError

    try:
        return tool.model.model_validate(args)
    except ValidationError as exc:
        raise ToolError(f"the arguments of the call to {tool.name!r} do not validate: {exc}") from exc


# -- reading a tool-enabled generation as it is written ----------------------------------------


class ToolCallStream:
    """Reads the text of a generation under :func:`tool_call_schema` piece by piece.

    :meth:`push` takes the next piece of text and returns events: ``("name", i, name)`` once call
    ``i``'s name is complete, then ``("arguments", i, text)`` with each new piece of that call's
    arguments, as the model writes them (the raw JSON text, so the pieces concatenate to
    :attr:`calls`' arguments text). Calls are the bare call object (index 0) or the items of
    ``{"tool_calls": [...]}``; the raw text of a ``{"content": ...}`` reply is kept in
    :attr:`content`. A JSON scanner that tracks where in the wrapper object each character is;
    it needs no particular key order or whitespace.
    """

    def __init__(self) -> None:
        self._stack: list[list[Any]] = []  # frames: ["obj", key, expecting_key] / ["arr", index]
        self._in_string = False
        self._escape = False
        self._is_key = False
        self._key: list[str] = []
        self._capture: tuple[str, int] | None = None  # ("arguments" | "name" | "content", call index)
        self._capture_depth = 0
        self._scalar = False  # the captured value is a number / true / false / null, still open
        self._names: dict[int, str] = {}
        self._name_raw: dict[int, list[str]] = {}
        self._args: dict[int, list[str]] = {}
        self._sent: dict[int, int] = {}  # argument pieces already reported, per call
        self._content: list[str] = []

    @property
    def calls(self) -> list[tuple[str, str]]:
        """``(name, arguments text so far)`` of every call whose name is complete, by index."""
        return [(self._names[i], "".join(self._args.get(i, []))) for i in sorted(self._names)]

    @property
    def content(self) -> str | None:
        """The raw JSON text of the reply's ``content`` value so far (None: no content key)."""
        return "".join(self._content) if self._content else None

    def _path(self) -> tuple:
        return tuple(frame[1] for frame in self._stack)

    def _target(self) -> tuple[str, int] | None:
        path = self._path()
        if path in (("arguments",), ("name",), ("content",)):
            return path[0], 0
        if len(path) == 3 and path[0] == "tool_calls" and isinstance(path[1], int) and path[2] in ("arguments", "name"):
            return path[2], path[1]
        return None

    def _emit(self, piece: str) -> None:
        kind, index = self._capture  # type: ignore[misc]
        if kind == "content":
            self._content.append(piece)
        else:
            (self._args if kind == "arguments" else self._name_raw).setdefault(index, []).append(piece)

    def _end_capture(self) -> None:
        kind, index = self._capture  # type: ignore[misc]
        self._capture = None
        self._scalar = False
        if kind == "name":
            raw = "".join(self._name_raw.get(index, []))
            try:
                self._names[index] = str(json.loads(raw))
            except ValueError:
                self._names[index] = raw.strip('"')

    def push(self, text: str) -> list[tuple[str, int, str]]:
        """Feed the next piece of generated text; returns the events it completes (see the class)."""
        named_before = set(self._names)
        for ch in text:
            self._char(ch)
        events: list[tuple[str, int, str]] = [("name", i, self._names[i]) for i in sorted(set(self._names) - named_before)]
        for i in sorted(self._names):
            pieces = self._args.get(i, [])
            if len(pieces) > self._sent.get(i, 0):
                events.append(("arguments", i, "".join(pieces[self._sent.get(i, 0):])))
                self._sent[i] = len(pieces)
        return events

    def _char(self, ch: str) -> None:
        if self._in_string:
            if self._capture is not None:
                self._emit(ch)
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
                if self._is_key:
                    self._stack[-1][1], self._stack[-1][2] = json.loads('"' + "".join(self._key) + '"'), False
                    self._is_key = False
                elif self._capture is not None and len(self._stack) == self._capture_depth:
                    self._end_capture()  # a string that was the whole captured value
            elif self._is_key:
                self._key.append(ch)
            return
        if self._scalar and (ch in ",]}" or ch.isspace()):
            self._end_capture()  # a number / literal ends at the first delimiter
        top = self._stack[-1] if self._stack else None
        expecting_key = top is not None and top[0] == "obj" and top[2]
        if self._capture is None and not ch.isspace() and not expecting_key and ch not in ":,]}":
            target = self._target()  # the first character of a value: is it one to capture?
            if target is not None:
                self._capture, self._capture_depth = target, len(self._stack)
                self._scalar = ch not in '{["'
                self._emit(ch)
                self._structure(ch, expecting_key)
                return
        if self._capture is not None and (len(self._stack) > self._capture_depth or self._scalar):
            self._emit(ch)
        if not ch.isspace():
            self._structure(ch, expecting_key)

    def _structure(self, ch: str, expecting_key: bool) -> None:
        top = self._stack[-1] if self._stack else None
        if expecting_key and ch == '"':
            self._in_string, self._is_key, self._key = True, True, []
        elif ch == ",":
            if top is not None and top[0] == "obj":
                top[1], top[2] = None, True
            elif top is not None:
                top[1] += 1
        elif ch in "]}":
            if self._stack:
                self._stack.pop()
            if self._capture is not None and len(self._stack) == self._capture_depth and not self._scalar:
                self._end_capture()  # the captured object / array closed
        elif ch == "{":
            self._stack.append(["obj", None, True])
        elif ch == "[":
            self._stack.append(["arr", 0])
        elif ch == '"':
            self._in_string, self._is_key = True, False


def partial_json_string(raw: str) -> str:
    """The text of a JSON string literal that may be cut anywhere (a ``"`` and escapes missing)."""
    raw = raw.strip()
    if not raw.startswith('"'):
        return raw
    try:
        value = json.loads(raw)
        if isinstance(value, str):
            return value
    except ValueError:
        pass
    body = raw[1:]
    for cut in range(len(body), max(len(body) - 7, -1), -1):  # drop an unfinished escape at the end
        try:
            return json.loads('"' + body[:cut] + '"')
        except ValueError:
            continue
    return ""
