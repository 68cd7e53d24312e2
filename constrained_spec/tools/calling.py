"""Running and dispatching: one tool-enabled generation, and a call handed to its Python function."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from constrained_spec.errors import ToolError
from constrained_spec.prompts import arguments_dict
from constrained_spec.tools.call_schema import tool_call_schema
from constrained_spec.tools.definitions import Tool, is_model_class, normalize_tools, tool_from_function, tool_from_model
from constrained_spec.tools.messages import ToolCall, ToolReply, parse_tool_output
from constrained_spec.tools.prompting import tool_prompt

__all__ = ["call_tool", "generate_tool_calls"]


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
        name, args = fn.get("name"), arguments_dict(fn.get("arguments", {}))
    else:
        raise ToolError(f"cannot dispatch {tool_call!r}: not a tool call")
    if not isinstance(args, dict):
        raise ToolError(f"the arguments of the call to {name!r} are not a JSON object: {args!r}")
    if isinstance(functions, Mapping):
        table = {k: (v if isinstance(v, Tool) else None, v) for k, v in functions.items()}
    else:
        table = {}
        for f in functions:
            t = f if isinstance(f, Tool) else (tool_from_model(f) if is_model_class(f) else tool_from_function(f))
            table[t.name] = (t, f)
    if name not in table:
        raise ToolError(f"the call names tool {name!r}, which has no function; known: {sorted(table)}")
    tool, target = table[name]
    if tool is None:
        tool = tool_from_model(target, name=name) if is_model_class(target) else tool_from_function(target, name=name)
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

