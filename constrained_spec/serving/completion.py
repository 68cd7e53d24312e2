"""What one request generates and how its result reads back as an OpenAI message.

``response_format``: ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``
(always enforced exactly; ``strict`` is accepted and ignored), ``{"type": "json_object"}`` (any
JSON object) or ``{"type": "text"}`` / absent (free text, ends at EOS or ``max_tokens``).
``tools`` / ``tool_choice`` / ``parallel_tool_calls``: see :mod:`constrained_spec.tools`; with
``"auto"`` the model picks between a text reply and a call inside one grammar, and with
``response_format`` as well the text reply follows that schema.
Grammars (vLLM's ``guided_grammar`` / ``structured_outputs``) and OpenAI custom tools with a
grammar format: see :mod:`.grammars` (modes ``"grammar"``, whose content is the generated text,
and ``"custom_tool"``, whose reply is one custom tool call).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from constrained_spec.grammar import Regex
from constrained_spec.prompts import plain_messages
from constrained_spec.serving.errors import APIError
from constrained_spec.serving.grammars import (
    choose_custom_tool,
    custom_call,
    custom_tool_messages,
    custom_tools,
    function_tools,
    grammar_constraint,
    has_custom_calls,
    messages_without_custom_calls,
)
from constrained_spec.serving.protocol import ChatCompletionRequest, new_call_id
from constrained_spec.tools import (
    ToolCallStream,
    normalize_tool_choice,
    normalize_tools,
    parse_tool_output,
    partial_json_string,
    tool_call_schema,
    tool_prompt,
)

__all__ = ["FREE_TEXT", "Plan", "make_plan", "partial_message", "reply_message", "stats_extra"]

FREE_TEXT = Regex(r"[\s\S]*")  # response_format text / absent: any text, ended by EOS or the budget


@dataclass
class Plan:
    """What one request generates: the output type, prompt and how to read the value back."""

    output_type: Any
    prompt: list[dict]
    schema_in_prompt: bool
    param: str  # the request field a schema error points at
    mode: Literal["text", "json", "tools", "grammar", "custom_tool"]
    tools: list = field(default_factory=list)
    content_is_text: bool = True  # for mode tools: whether the reply branch is a plain string
    template_tools: list[dict] | None = None  # tool dicts for the chat template's own tool rendering
    custom_tool: str | None = None  # for mode custom_tool: the name of the custom tool called


def make_plan(req: ChatCompletionRequest, tokenizer: Any = None) -> Plan:
    """The plan of ``req``; :class:`APIError` or a project error (a bad tool) when it has none."""
    rf = req.response_format or {"type": "text"}
    rf_type = rf.get("type")
    content_schema: Any = None
    if rf_type == "json_schema":
        spec = rf.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec:
            raise APIError(400, "response_format json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}", param="response_format")
        content_schema = spec["schema"]
        if not isinstance(content_schema, (dict, bool)):
            raise APIError(400, "response_format.json_schema.schema must be a JSON Schema object", param="response_format.json_schema.schema")
    elif rf_type == "json_object":
        content_schema = {"type": "object"}
    elif rf_type != "text":
        raise APIError(400, f"response_format type {rf_type!r} is not supported; use 'json_schema', 'json_object' or 'text'", param="response_format")

    messages = messages_without_custom_calls(req.messages) if has_custom_calls(req.messages) else req.messages
    functions = function_tools(req.tools)
    requested = req.tool_choice if req.tool_choice is not None else "auto"
    grammar = grammar_constraint(req)
    if grammar is not None:
        if rf_type != "text":
            raise APIError(400, f"{grammar.param} and response_format {rf_type!r} cannot be combined: give one constraint", param=grammar.param)
        if req.tools and requested != "none":
            raise APIError(400, f"{grammar.param} cannot be combined with tools (unless tool_choice is 'none'): give one constraint",
                           param=grammar.param)
        return Plan(grammar.output_type, plain_messages(messages), False, grammar.param, "grammar")
    custom = choose_custom_tool(req.tool_choice, functions, custom_tools(req.tools))
    if custom is not None:
        if req.stream:
            raise APIError(400, "stream with a custom tool call is not supported: OpenAI's chunk format has no custom tool-call delta; "
                           "send stream: false", param="stream", code="unsupported_parameter")
        prompt = custom_tool_messages(plain_messages(messages), custom)
        return Plan(custom.output_type, prompt, False, custom.param, "custom_tool", custom_tool=custom.name)
    tools = normalize_tools(functions)
    if not tools and requested == "auto":
        requested = "none"  # tool_choice "auto" without tools: nothing to call
    choice = normalize_tool_choice(requested, tools)
    explicit = req.schema_in_prompt
    if tools and choice != "none":
        parallel = req.parallel_tool_calls is not False  # OpenAI's default: parallel calls allowed
        schema = tool_call_schema(tools, requested, parallel=parallel, content_schema=content_schema)
        prompt, template_tools = tool_prompt(tokenizer, messages, tools, requested, parallel=parallel, content_schema=content_schema)
        return Plan(schema, prompt, bool(explicit), "tools", "tools", tools, content_schema is None, template_tools)
    prompt = plain_messages(messages)
    if content_schema is None:
        return Plan(FREE_TEXT, prompt, False, "response_format", "text")
    return Plan(content_schema, prompt, True if explicit is None else explicit, "response_format.json_schema.schema", "json")


def stats_extra(plan: Plan, result: Any) -> dict:
    """The ``constrained_spec`` field of a response: the decoding stats and the mode."""
    return {"stats": result.stats.as_dict(), "mode": plan.mode}


def reply_message(plan: Plan, result: Any) -> tuple[dict, str]:
    """The assistant message of a finished generation, and its ``finish_reason``."""
    finish = "length" if getattr(result.stats, "stop_reason", "") == "max_new_tokens" else "stop"
    if plan.mode == "custom_tool":
        call = custom_call(str(plan.custom_tool), result.text)
        return {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}, "length" if finish == "length" else "tool_calls"
    if plan.mode == "tools":
        reply = parse_tool_output(result.value, plan.tools)
        if reply.tool_calls:
            calls = [c.to_openai() for c in reply.tool_calls]
            read = ToolCallStream()
            read.push(result.text)
            if [name for name, _ in read.calls] == [c["function"]["name"] for c in calls]:
                for call, (_, raw) in zip(calls, read.calls):
                    call["function"]["arguments"] = raw  # the model's own (validated) JSON text, as streamed
            return {"role": "assistant", "content": None, "tool_calls": calls, "refusal": None}, "tool_calls"
        content = reply.content if plan.content_is_text and isinstance(reply.content, str) else json.dumps(reply.content, ensure_ascii=False)
        return {"role": "assistant", "content": content, "refusal": None}, finish
    return {"role": "assistant", "content": result.text, "refusal": None}, finish


def partial_message(plan: Plan, text: str) -> dict:
    """The message of a generation cut by its token budget: the partial text, or for tools the
    calls begun so far (arguments cut where the budget ran out) or the reply's partial content."""
    if plan.mode == "custom_tool":
        return {"role": "assistant", "content": None, "tool_calls": [custom_call(str(plan.custom_tool), text)], "refusal": None}
    if plan.mode != "tools":
        return {"role": "assistant", "content": text, "refusal": None}
    read = ToolCallStream()
    read.push(text)
    if read.calls:
        calls = [{"id": new_call_id(), "type": "function", "function": {"name": n, "arguments": a}} for n, a in read.calls]
        return {"role": "assistant", "content": None, "tool_calls": calls, "refusal": None}
    raw = read.content
    if raw is None:
        content = ""
    else:
        content = partial_json_string(raw) if plan.content_is_text else raw.strip()
    return {"role": "assistant", "content": content, "refusal": None}
