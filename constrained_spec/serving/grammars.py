"""Grammar requests: vLLM's grammar parameters and OpenAI's custom tools with a grammar format.

vLLM's parameters (checked against vLLM's own docs and code: ``docs/features/structured_outputs``
and ``StructuredOutputsParams`` in ``vllm/sampling_params.py``):

* ``"structured_outputs": {"grammar": "<lark text>"}`` (vLLM's current form) or ``{"regex": ...}``;
  its options ``disable_fallback``, ``disable_any_whitespace``, ``disable_additional_properties``
  and ``whitespace_pattern`` are accepted and ignored (they concern JSON, or a fallback this
  server never makes); its other constraints (``json``, ``choice``, ``json_object``,
  ``structural_tag``) are refused by name (use ``response_format`` for JSON).
* ``"guided_grammar": "<lark text>"`` / ``"guided_regex": ...``: the older extra parameters
  (removed from vLLM in v0.12.0 in favour of ``structured_outputs``), accepted the same way.

The grammar is Lark (llguidance's dialect, judged by the ``lark`` package; a GBNF grammar is a
``grammar_error``), the regex Rust regex syntax, both full-match. The reply's ``content`` is the
generated text. vLLM's ``response_format`` has no grammar type (``text``, ``json_object``,
``json_schema``, ``structural_tag`` only), so neither has this server's.

OpenAI custom tools (field names from the official ``openai`` Python client 3.57.0:
``types/chat/chat_completion_custom_tool_param.py``,
``types/chat/chat_completion_message_custom_tool_call.py``,
``types/chat/chat_completion_named_tool_choice_custom_param.py``,
``types/shared_params/custom_tool_input_format.py``):

* request: ``{"type": "custom", "custom": {"name", "description"?, "format"?}}``, ``format``
  one of ``{"type": "text"}`` (the default: unconstrained text, generated as any text up to EOS
  or the token budget) or ``{"type": "grammar", "grammar": {"syntax": "lark" | "regex",
  "definition": ...}}`` (the Responses API's flat ``{"type": "grammar", "syntax", "definition"}``
  is read too);
* ``tool_choice: {"type": "custom", "custom": {"name": ...}}`` forces that custom tool;
* reply: ``message.tool_calls == [{"id", "type": "custom", "custom": {"name", "input"}}]``,
  ``finish_reason: "tool_calls"``.

What is served: one custom call, when ``tool_choice`` names a custom tool (function tools may be
listed too; they are not called), or ``tool_choice: "required"`` with one tool, a custom one. A
custom tool is never called under ``"auto"`` (one grammar cannot hold both a free-text reply and
the tool's input, told apart), nor picked among several (``"required"`` with several tools):
those are 400s naming what to pass. ``"none"`` answers in text, as without tools. A named
function tool (``{"type": "function", ...}``) is served as before, the custom tools left out.
``stream: true`` with a custom call is a 400: OpenAI's chunk format (``ChoiceDeltaToolCall``)
defines function deltas only. Assistant turns in the history may carry custom calls; they are
given to the model as text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from constrained_spec.errors import ToolError
from constrained_spec.grammar import CFG, Regex
from constrained_spec.prompts import custom_tool_messages as custom_tool_prompt
from constrained_spec.serving.errors import APIError

__all__ = ["CustomTool", "GrammarConstraint", "choose_custom_tool", "custom_call", "custom_tool_messages", "custom_tools",
           "function_tools", "grammar_constraint", "grammar_texts", "has_custom_calls", "messages_without_custom_calls",
           "tools_for_schema_limit"]

#: the free text of a custom tool with format text: any text, ended by EOS or the token budget
FREE_TEXT = Regex(r"[\s\S]*")
#: structured_outputs keys that do not change what a grammar or regex admits (accepted, ignored)
IGNORED_OPTIONS = ("disable_fallback", "disable_any_whitespace", "disable_additional_properties", "whitespace_pattern")
#: structured_outputs constraints this server takes elsewhere or not at all, and what to use
OTHER_CONSTRAINTS = {
    "json": "use response_format {'type': 'json_schema', ...}",
    "json_object": "use response_format {'type': 'json_object'}",
    "choice": "write the choices as a grammar (start: \"a\" | \"b\")",
    "structural_tag": "not supported by this server",
}
#: a tool name, as OpenAI's (and :mod:`constrained_spec.tools`'s) rule
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class GrammarConstraint:
    """A request's grammar (or regex): the output type and the request field it came from."""

    output_type: CFG | Regex
    param: str


def grammar_constraint(req: Any) -> GrammarConstraint | None:
    """The grammar or regex of ``req`` (``guided_grammar``, ``guided_regex``, ``structured_outputs``),
    or None; a 400 :class:`APIError` for a malformed or contradictory one."""
    found: list[GrammarConstraint] = []
    for name, make in (("guided_grammar", CFG), ("guided_regex", Regex)):
        value = getattr(req, name, None)
        if value is not None:
            found.append(GrammarConstraint(make(_text(value, name)), name))
    so = getattr(req, "structured_outputs", None)
    if so is not None:
        if not isinstance(so, Mapping):
            raise APIError(400, "structured_outputs must be an object such as {'grammar': '<lark grammar>'}", param="structured_outputs",
                           code="invalid_request")
        for key, value in so.items():
            where = f"structured_outputs.{key}"
            if value is None or key in IGNORED_OPTIONS:
                continue
            if key == "grammar":
                found.append(GrammarConstraint(CFG(_text(value, where)), where))
            elif key == "regex":
                found.append(GrammarConstraint(Regex(_text(value, where)), where))
            elif key in OTHER_CONSTRAINTS:
                raise APIError(400, f"{where} is not supported ({OTHER_CONSTRAINTS[key]})", param=where, code="unsupported_parameter")
            else:
                raise APIError(400, f"unrecognized structured_outputs field: {key}", param=where, code="unsupported_parameter")
    if len(found) > 1:
        raise APIError(400, f"give one grammar, not {' and '.join(c.param for c in found)}", param=found[1].param, code="invalid_request")
    return found[0] if found else None


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise APIError(400, f"{where} must be a non-empty string", param=where, code="invalid_request")
    return value


# -- custom tools ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CustomTool:
    """One OpenAI custom tool: its name, description, input constraint and where it was given."""

    name: str
    description: str
    output_type: CFG | Regex
    syntax: str  # "lark", "regex" or "text"
    definition: str  # the grammar text ("" for text)
    param: str  # the request field a grammar error points at


def _is_custom(tool: Any) -> bool:
    return isinstance(tool, Mapping) and tool.get("type") == "custom"


def function_tools(tools: Sequence[Any] | None) -> list[Any]:
    """The tools of a request that are not custom tools (for :mod:`constrained_spec.tools`)."""
    return [t for t in tools or [] if not _is_custom(t)]


def custom_tools(tools: Sequence[Any] | None) -> list[CustomTool]:
    """The custom tools of a request, checked; :class:`ToolError` (400 ``invalid_tools``) for a bad one."""
    out: list[CustomTool] = []
    for i, tool in enumerate(tools or []):
        if not _is_custom(tool):
            continue
        spec = tool.get("custom")
        if not isinstance(spec, Mapping):
            raise ToolError(f"tools[{i}]: a custom tool needs {{'type': 'custom', 'custom': {{'name': ..., 'format': ...}}}}")
        name = spec.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise ToolError(f"tools[{i}]: custom tool name {name!r} is invalid: use 1-64 letters, digits, '_' or '-'")
        if name in {t.name for t in out}:
            raise ToolError(f"tools[{i}]: two custom tools are named {name!r}")
        fmt = spec.get("format") or {"type": "text"}
        where = f"tools[{i}].custom.format"
        if not isinstance(fmt, Mapping):
            raise ToolError(f"{where} must be {{'type': 'text'}} or {{'type': 'grammar', 'grammar': {{'syntax', 'definition'}}}}")
        if fmt.get("type") == "text":
            out.append(CustomTool(name, str(spec.get("description") or ""), FREE_TEXT, "text", "", where))
            continue
        if fmt.get("type") != "grammar":
            raise ToolError(f"{where}.type {fmt.get('type')!r} is not supported; use 'text' or 'grammar'")
        grammar = fmt.get("grammar", fmt)  # chat completions nest it; the Responses API's format is flat
        if not isinstance(grammar, Mapping):
            raise ToolError(f"{where}.grammar must be {{'syntax': 'lark' | 'regex', 'definition': ...}}")
        syntax, definition = grammar.get("syntax"), grammar.get("definition")
        if not isinstance(definition, str) or not definition.strip():
            raise ToolError(f"{where}.grammar.definition must be a non-empty string")
        if syntax == "lark":
            output_type: CFG | Regex = CFG(definition)
        elif syntax == "regex":
            output_type = Regex(definition)
        else:
            raise ToolError(f"{where}.grammar.syntax {syntax!r} is not supported; use 'lark' or 'regex'")
        out.append(CustomTool(name, str(spec.get("description") or ""), output_type, syntax, definition, f"{where}.grammar.definition"))
    return out


def choose_custom_tool(tool_choice: Any, functions: Sequence[Any], customs: Sequence[CustomTool]) -> CustomTool | None:
    """The custom tool the model must call, or None where the request calls none (``"none"``, a
    named function tool; the function-tool path serves it). A 400 for what is not served."""
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "custom":
        named = tool_choice.get("custom")
        name = named.get("name") if isinstance(named, Mapping) else None
        if not isinstance(name, str):
            raise ToolError(f"tool_choice must look like {{'type': 'custom', 'custom': {{'name': ...}}}}, got {dict(tool_choice)!r}")
        for tool in customs:
            if tool.name == name:
                return tool
        raise ToolError(f"tool_choice names custom tool {name!r}, which is not among the custom tools {[t.name for t in customs]}")
    if not customs or isinstance(tool_choice, Mapping) or tool_choice == "none":
        return None  # no custom tool, a named function tool (checked by the function-tool path), or no call at all
    choice = "auto" if tool_choice is None else tool_choice
    if choice == "required" and len(customs) == 1 and not functions:
        return customs[0]
    name = customs[0].name
    if choice == "required":
        what = "function and custom tools together" if functions else "several custom tools"
        raise APIError(400, f"tool_choice 'required' with {what} is not supported: this server calls one custom tool, named by "
                       f"tool_choice {{'type': 'custom', 'custom': {{'name': {name!r}}}}}", param="tool_choice", code="unsupported_parameter")
    raise APIError(400, f"tool_choice {choice!r} with custom tools is not supported (one grammar cannot hold both a text reply and "
                   f"a tool's input); name the tool, tool_choice {{'type': 'custom', 'custom': {{'name': {name!r}}}}}, or pass "
                   "'required' with a single custom tool", param="tool_choice", code="unsupported_parameter")


def custom_call(name: str, text: str) -> dict:
    """The ``tool_calls`` entry of a custom call (``ChatCompletionMessageCustomToolCall``)."""
    from constrained_spec.serving.protocol import new_call_id

    return {"id": new_call_id(), "type": "custom", "custom": {"name": name, "input": text}}


def custom_tool_messages(messages: list[dict], tool: CustomTool) -> list[dict]:
    """``messages`` (plain, see :func:`constrained_spec.prompts.plain_messages`) with a system
    message that describes ``tool`` and asks for its input alone (the text:
    :func:`constrained_spec.prompts.custom_tool_messages`)."""
    return custom_tool_prompt(messages, tool.name, tool.description, tool.syntax, tool.definition)


def has_custom_calls(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(isinstance(c, Mapping) and c.get("type") == "custom" for m in messages for c in (m.get("tool_calls") or []))


def messages_without_custom_calls(messages: Sequence[Mapping[str, Any]]) -> list[dict]:
    """The history with custom calls as text: an assistant turn's custom calls become its content
    (the input alone where the turn is one custom call), a ``tool`` turn answering one a user turn."""
    names: dict[str, str] = {}
    out: list[dict] = []
    for m in messages:
        calls = m.get("tool_calls") or []
        custom = [c for c in calls if isinstance(c, Mapping) and c.get("type") == "custom"]
        if m.get("role") == "assistant" and custom:
            for c in custom:
                names[str(c.get("id", ""))] = str(c["custom"].get("name", ""))
            others = [c for c in calls if c not in custom]
            if len(custom) == 1 and not others and not m.get("content"):
                text = str(custom[0]["custom"].get("input", ""))
            else:
                parts = [str(m.get("content"))] if isinstance(m.get("content"), str) and m.get("content") else []
                parts += [f"(call of tool {c['custom'].get('name')!r} with input:)\n{c['custom'].get('input', '')}" for c in custom]
                text = "\n".join(parts)
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if others:
                entry["tool_calls"] = others
            out.append(entry)
        elif m.get("role") == "tool" and str(m.get("tool_call_id", "")) in names:
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
            out.append({"role": "user", "content": f"Result of tool {names[str(m.get('tool_call_id', ''))]!r}: {content}"})
        else:
            out.append(dict(m))
    return out


# -- size limits -------------------------------------------------------------------------------


def grammar_texts(req: Any) -> dict[str, str]:
    """Every grammar and regex text of ``req``, by the request field it is in (for the size cap)."""
    texts: dict[str, str] = {}
    for name in ("guided_grammar", "guided_regex"):
        value = getattr(req, name, None)
        if isinstance(value, str):
            texts[name] = value
    so = getattr(req, "structured_outputs", None)
    if isinstance(so, Mapping):
        for key in ("grammar", "regex"):
            if isinstance(so.get(key), str):
                texts[f"structured_outputs.{key}"] = so[key]
    for i, tool in enumerate(getattr(req, "tools", None) or []):
        definition = _definition(tool)
        if definition is not None:
            texts[f"tools[{i}].custom.format.grammar.definition"] = definition
    return texts


def _definition(tool: Any) -> str | None:
    if not _is_custom(tool) or not isinstance(tool.get("custom"), Mapping):
        return None
    fmt = tool["custom"].get("format")
    if not isinstance(fmt, Mapping):
        return None
    grammar = fmt.get("grammar", fmt)
    value = grammar.get("definition") if isinstance(grammar, Mapping) else None
    return value if isinstance(value, str) else None


def tools_for_schema_limit(tools: Sequence[Any] | None) -> list[Any] | None:
    """``tools`` as the schema cap counts them: custom tools without their grammar text (the
    grammar cap counts that), so their names and descriptions still count."""
    if tools is None:
        return None
    out = []
    for tool in tools:
        if _definition(tool) is not None:
            tool = json.loads(json.dumps(tool))
            fmt = tool["custom"]["format"]
            (fmt["grammar"] if isinstance(fmt.get("grammar"), dict) else fmt)["definition"] = ""
        out.append(tool)
    return out
