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
:func:`render_prompt` is the same as prompt text. The prompt text itself is written in
:mod:`constrained_spec.prompts.tools`.

Files: :mod:`.definitions` (tool definitions -> :class:`Tool`), :mod:`.schema_edits` (the schema
edits below), :mod:`.call_schema` (the call grammar), :mod:`.messages` (the OpenAI message shapes
and reading a value back), :mod:`.stream` (the streamed-arguments scanner), :mod:`.prompting`
(tool prompts from what users give), :mod:`.calling` (running a turn, dispatching a call).
"""

from constrained_spec.errors import ToolError
from constrained_spec.prompts import plain_messages, template_supports_tools
from constrained_spec.tools.call_schema import normalize_tool_choice, reply_schema, tool_call_schema
from constrained_spec.tools.calling import call_tool, generate_tool_calls
from constrained_spec.tools.definitions import Tool, normalize_tools, tool_from_dict, tool_from_function, tool_from_model
from constrained_spec.tools.messages import ToolCall, ToolReply, parse_tool_output
from constrained_spec.tools.prompting import render_prompt, tool_prompt, tool_prompt_messages
from constrained_spec.tools.stream import ToolCallStream, partial_json_string

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
    "plain_messages",
    "reply_schema",
]
