"""Everything that becomes prompt text: the schema hint, its type sketch, the chat template, tool prompts.

* :mod:`.schema_hint`: the sentence that gives the model the JSON Schema its answer follows;
* :mod:`.type_sketch`: a schema as a short TypeScript-like sketch (schema hint style ``"types"``);
* :mod:`.chat`: messages through the chat template, to text and token ids (``Generator.prompt_ids``);
* :mod:`.tools`: the messages of a tool-enabled turn (function tools and OpenAI custom tools).

This room knows nothing of HTTP or the engine; :mod:`constrained_spec.tools` normalises tool
definitions and calls :mod:`.tools` here, and its public prompt functions (``tool_prompt``,
``render_prompt``, ``tool_prompt_messages``) stay there.
"""

from constrained_spec.prompts.chat import apply_chat_template, has_chat_template, prompt_token_ids, user_messages, with_system_text
from constrained_spec.prompts.schema_hint import SCHEMA_HINT_MAX_CHARS, schema_hint
from constrained_spec.prompts.tools import (
    PROMPT_GRAMMAR_CHARS,
    ToolSpec,
    arguments_dict,
    content_text,
    custom_tool_messages,
    format_instruction,
    plain_messages,
    template_supports_tools,
    tool_turn,
    tools_in_system_message,
)
from constrained_spec.prompts.type_sketch import render_types

__all__ = [
    "PROMPT_GRAMMAR_CHARS",
    "SCHEMA_HINT_MAX_CHARS",
    "ToolSpec",
    "apply_chat_template",
    "arguments_dict",
    "content_text",
    "custom_tool_messages",
    "format_instruction",
    "has_chat_template",
    "plain_messages",
    "prompt_token_ids",
    "render_types",
    "schema_hint",
    "template_supports_tools",
    "tool_turn",
    "tools_in_system_message",
    "user_messages",
    "with_system_text",
]
