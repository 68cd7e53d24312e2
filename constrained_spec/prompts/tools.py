"""Tool prompts: the messages of a tool-enabled turn, for templates with and without tool support.

Takes tools already normalised (anything with ``name``, ``description``, ``parameters`` and
``to_openai()``, such as :class:`constrained_spec.tools.Tool`) and a normalised ``tool_choice``
(``"auto"``, ``"required"``, ``"none"`` or ``"=<name>"``); :mod:`constrained_spec.tools` normalises
what users give and calls these.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Protocol, Sequence

from constrained_spec.errors import ToolError
from constrained_spec.prompts.chat import apply_chat_template, user_messages, with_system_text
from constrained_spec.prompts.schema_hint import schema_hint

__all__ = ["PROMPT_GRAMMAR_CHARS", "ToolSpec", "arguments_dict", "content_text", "custom_tool_messages", "format_instruction",
           "plain_messages", "template_supports_tools", "tool_turn", "tools_in_system_message"]

#: the longest grammar text spelled into a custom tool's prompt (the constraint is always the whole grammar)
PROMPT_GRAMMAR_CHARS = 6000


class ToolSpec(Protocol):
    """What a tool prompt reads of a tool."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict: ...

    def to_openai(self) -> dict: ...


def template_supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a ``tools`` list (a heuristic on its text)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = " ".join(str(v) for v in template.values())
    return isinstance(template, str) and "tools" in template


def format_instruction(tools: Sequence[ToolSpec], choice: str, parallel: bool, content_schema: Any = None) -> str:
    """The sentence that asks for the reply format of ``choice`` (a call, a ``content`` reply, or either)."""
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


def content_text(content: Any) -> str:
    """A message's content as text: text parts joined; a :class:`ToolError` for other parts."""
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


def arguments_dict(args: Any) -> Any:
    """A call's arguments as a dict when they are JSON text of one (OpenAI sends text); else as given."""
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
                calls.append({"name": fn.get("name"), "arguments": arguments_dict(fn.get("arguments"))})
            text = json.dumps(calls[0] if len(calls) == 1 else {"tool_calls": calls}, ensure_ascii=False)
            out.append({"role": "assistant", "content": text})
        elif role in ("tool", "function"):
            name = m.get("name") or names.get(str(m.get("tool_call_id", "")), "")
            label = f"Result of tool {name!r}" if name else "Tool result"
            out.append({"role": "user", "content": f"{label}: {content_text(m.get('content'))}"})
        elif role == "developer":
            out.append({"role": "system", "content": content_text(m.get("content"))})
        else:
            out.append({"role": role, "content": content_text(m.get("content"))})
    return out


def tools_in_system_message(messages: Sequence[Mapping[str, Any]] | str, tools: Sequence[ToolSpec], choice: str,
                            parallel: bool = False, content_schema: Any = None) -> list[dict]:
    """Plain messages with a system message listing the tools and the reply format (any template).

    An existing first system message is kept and the tool text appended to it.
    """
    msgs = plain_messages(user_messages(messages))
    lines = ["You can call these tools (JSON Schema of each tool's arguments):"]
    for t in tools:
        desc = f": {t.description}" if t.description else ""
        lines.append(f"- {t.name}{desc}\n  arguments: {json.dumps(t.parameters, ensure_ascii=False)}")
    lines.append(format_instruction(tools, choice, parallel, content_schema))
    return with_system_text(msgs, "\n".join(lines))


def _template_messages(messages: Sequence[Mapping[str, Any]] | str) -> list[dict]:
    """Messages in the form a tool-rendering template takes: tool calls with dict arguments, text content."""
    msgs = user_messages(messages)
    for m in msgs:
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {**c.get("function", {}), "arguments": arguments_dict(c.get("function", {}).get("arguments"))}}
                for c in m["tool_calls"]
            ]
        if isinstance(m.get("content"), list):
            m["content"] = content_text(m["content"])
        if m.get("role") == "developer":
            m["role"] = "system"
    return msgs


def tool_turn(tokenizer: Any, messages: Sequence[Mapping[str, Any]] | str, tools: Sequence[ToolSpec], choice: str,
              parallel: bool = False, content_schema: Any = None) -> tuple[list[dict], list[dict] | None]:
    """The messages of a tool-enabled turn and the tool list for the chat template.

    When the tokenizer's template renders tools (:func:`template_supports_tools`, and a trial
    render succeeds): the messages in the template's own form with the reply-format line added as
    a system message, and the OpenAI tool dicts for ``apply_chat_template(..., tools=...)``.
    Otherwise the tools are spelled in a system message (:func:`tools_in_system_message`) and the
    tool list is None. ``tokenizer`` may be None.
    """
    if template_supports_tools(tokenizer):
        msgs = with_system_text(_template_messages(messages), format_instruction(tools, choice, parallel, content_schema))
        openai_tools = [t.to_openai() for t in tools]
        try:
            apply_chat_template(tokenizer, msgs, openai_tools)
            return msgs, openai_tools
        except Exception:  # noqa: BLE001 - a template that chokes on tool turns: fall back to text
            pass
    return tools_in_system_message(messages, tools, choice, parallel, content_schema), None


def custom_tool_messages(messages: list[dict], name: str, description: str, syntax: str, definition: str) -> list[dict]:
    """``messages`` (plain, see :func:`plain_messages`) with a system message that describes a
    custom tool (``syntax``: ``"text"``, ``"lark"`` or ``"regex"``) and asks for its input alone."""
    lines = [f"You can call the tool {name!r}" + (f": {description}" if description else ".")]
    if syntax == "text":
        lines.append("Its input is free text.")
    else:
        grammar = definition
        if len(grammar) > PROMPT_GRAMMAR_CHARS:
            grammar = grammar[:PROMPT_GRAMMAR_CHARS] + f"\n... (cut at {PROMPT_GRAMMAR_CHARS} of {len(definition)} characters)"
        kind = "Lark grammar" if syntax == "lark" else "regular expression (the whole input matches it)"
        lines.append(f"Its input is text in the language of this {kind}:\n{grammar}")
    lines.append(f"Call the tool {name!r} now: reply with its input only, nothing else.")
    # appended to a leading system message, as the function tools' text is
    return with_system_text([dict(m) for m in messages], "\n".join(lines))
