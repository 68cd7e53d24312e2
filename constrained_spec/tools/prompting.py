"""Tool prompts from what users give: tools and ``tool_choice`` normalised, then the text of
:mod:`constrained_spec.prompts.tools`."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from constrained_spec.grammar.nesting import check_nesting
from constrained_spec.prompts import apply_chat_template, plain_messages, tool_turn, tools_in_system_message, user_messages
from constrained_spec.tools.call_schema import normalize_tool_choice
from constrained_spec.tools.definitions import normalize_tools

__all__ = ["render_prompt", "tool_prompt", "tool_prompt_messages"]


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
        check_nesting(content_schema, "the content schema")  # the call schema's _embeddable recurses on it
    return tools_in_system_message(messages, tool_list, choice, parallel, content_schema)


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
    Without tools: the messages with tool turns spelled as text, and None.
    """
    tool_list = normalize_tools(tools)
    if not tool_list:
        return plain_messages(user_messages(messages)), None
    choice = normalize_tool_choice(tool_choice, tool_list)
    if content_schema is not None:
        check_nesting(content_schema, "the content schema")  # the call schema's _embeddable recurses on it
    return tool_turn(tokenizer, messages, tool_list, choice, parallel, content_schema)


def render_prompt(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]] | str,
    tools: Iterable[Any] = (),
    tool_choice: Any = "auto",
    *,
    parallel: bool = False,
    content_schema: Any = None,
) -> str:
    """Prompt text for a tool-enabled turn, ending where the assistant's reply starts: the
    messages of :func:`tool_prompt` through the chat template (with its tool list when the
    template renders tools). Without a chat template the contents are joined by newlines."""
    return apply_chat_template(tokenizer, *tool_prompt(tokenizer, messages, tools, tool_choice, parallel=parallel, content_schema=content_schema))
