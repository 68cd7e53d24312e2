"""Function calling: tool definitions -> one call schema, tool_choice, prompts, dispatch, generation."""

from __future__ import annotations

import json
from datetime import date
from types import SimpleNamespace
from typing import Annotated, Literal

import jsonschema
import pytest
from pydantic import BaseModel, Field

from constrained_spec.errors import ConstrainedSpecError
from constrained_spec.tools import (
    Tool,
    ToolCall,
    ToolError,
    call_tool,
    generate_tool_calls,
    normalize_tool_choice,
    normalize_tools,
    parse_tool_output,
    plain_messages,
    render_prompt,
    tool_call_schema,
    tool_from_function,
    tool_prompt,
    tool_prompt_messages,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


def add(a: int, b: int = 2) -> int:
    """Add two numbers.

    Args:
        a: The first number,
            any integer.
        b: The second number.

    Returns:
        The sum.
    """
    return a + b


def book(day: date, seats: Literal[1, 2, 3], note: str = "") -> str:
    """Book a table.

    :param day: the day of the booking
    :param seats: how many seats
    """
    return f"{day.isoformat()}:{seats}:{note}"


class Point(BaseModel):
    x: int = Field(ge=0, le=9)
    y: int = Field(ge=0, le=9)


class Move(BaseModel):
    """Move the robot to a point."""

    to: Point
    speed: Literal["slow", "fast"]


# -- input styles ----------------------------------------------------------------------------


def test_openai_dict_and_bare_function_dict():
    t = normalize_tools([WEATHER])[0]
    assert (t.name, t.description) == ("get_weather", "Current weather in a city.")
    assert t.parameters == WEATHER["function"]["parameters"]
    assert t.to_openai() == WEATHER
    bare = normalize_tools([{"name": "ping", "description": "Ping."}])[0]
    assert bare.parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize("bad, words", [
    ({"type": "retrieval"}, "not supported"),
    ({"type": "function", "function": {"name": "has space", "parameters": {}}}, "invalid"),
    ({"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}, "object schema"),
    (42, "cannot use"),
])
def test_bad_tool_definitions_raise_tool_error(bad, words):
    with pytest.raises(ToolError, match=words) as info:
        normalize_tools([bad])
    assert isinstance(info.value, ConstrainedSpecError)


def test_duplicate_tool_names_are_refused():
    with pytest.raises(ToolError, match="unique"):
        normalize_tools([WEATHER, WEATHER])


def test_function_signature_and_docstring_become_the_schema():
    t = tool_from_function(add)
    assert t.name == "add" and t.description == "Add two numbers."
    p = t.parameters
    assert p["type"] == "object" and p["required"] == ["a"] and p["additionalProperties"] is False
    assert p["properties"]["a"] == {"type": "integer", "description": "The first number, any integer."}
    assert p["properties"]["b"]["default"] == 2 and p["properties"]["b"]["description"] == "The second number."
    assert "title" not in json.dumps(p)

    b = tool_from_function(book)
    props = b.parameters["properties"]
    assert props["day"]["format"] == "date" and props["day"]["description"] == "the day of the booking"
    assert props["seats"]["enum"] == [1, 2, 3]
    assert sorted(b.parameters["required"]) == ["day", "seats"]


def scale(x: Annotated[int, Field(ge=0, le=10, description="how much")], *, tag: str | None = None) -> int:
    return x


def test_annotated_constraints_and_keyword_only_parameters_survive():
    p = tool_from_function(scale).parameters
    assert p["properties"]["x"] == {"type": "integer", "minimum": 0, "maximum": 10, "description": "how much"}
    assert p["required"] == ["x"] and "tag" in p["properties"]
    assert call_tool(ToolCall("scale", {"x": 3}), [scale]) == 3


def test_functions_with_var_args_are_refused():
    def f(*args: int) -> None: ...

    with pytest.raises(ToolError, match="named parameters"):
        tool_from_function(f)


def test_pydantic_model_tool_keeps_its_defs_working_inside_the_call_schema():
    t = normalize_tools([Move])[0]
    assert t.name == "Move" and t.description == "Move the robot to a point."
    assert "$defs" in t.parameters
    schema = tool_call_schema([Move], "required")
    jsonschema.Draft202012Validator.check_schema(schema)
    good = {"name": "Move", "arguments": {"to": {"x": 1, "y": 2}, "speed": "fast"}}
    jsonschema.validate(good, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "Move", "arguments": {"to": {"x": 11, "y": 2}, "speed": "fast"}}, schema)


def test_content_schema_with_refs_keeps_working_inside_auto_and_none():
    content = Move.model_json_schema()
    good = {"content": {"to": {"x": 1, "y": 2}, "speed": "slow"}}
    for choice in ("auto", "none"):
        schema = tool_call_schema([Move], choice, content_schema=content)
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.validate(good, schema)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"content": {"to": {"x": 10, "y": 2}, "speed": "slow"}}, schema)
    from constrained_spec.grammar import output_spec

    assert output_spec(tool_call_schema([Move], "auto", content_schema=content)).regex


def test_mixed_styles_in_one_list():
    tools = normalize_tools([WEATHER, add, Move, Tool("noop")])
    assert [t.name for t in tools] == ["get_weather", "add", "Move", "noop"]


# -- tool_choice ----------------------------------------------------------------------------


def _call(name, **arguments):
    return {"name": name, "arguments": arguments}


def test_tool_choice_required_is_an_anyof_of_calls_only():
    schema = tool_call_schema([WEATHER, add], "required")
    assert len(schema["anyOf"]) == 2
    jsonschema.validate(_call("get_weather", city="Rome", days=2), schema)
    jsonschema.validate(_call("add", a=1), schema)
    for bad in ({"content": "hi"}, _call("add", city="Rome"), _call("nope", a=1), _call("get_weather", city="Rome")):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_tool_choice_named_function_allows_that_tool_only():
    schema = tool_call_schema([WEATHER, add], {"type": "function", "function": {"name": "add"}})
    assert schema["properties"]["name"] == {"const": "add"}
    jsonschema.validate(_call("add", a=1, b=3), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_call("get_weather", city="Rome", days=2), schema)


def test_tool_choice_auto_adds_the_content_branch():
    schema = tool_call_schema([WEATHER, add], "auto", content_schema={"type": "string", "maxLength": 5})
    assert len(schema["anyOf"]) == 3  # flat: the reply object and one branch per tool
    jsonschema.validate({"content": "hello"}, schema)
    jsonschema.validate(_call("add", a=1), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"content": "too long"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"content": "hi", "name": "add"}, schema)


def test_tool_choice_none_and_parallel():
    assert tool_call_schema([WEATHER], "none") == {
        "type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"], "additionalProperties": False}
    schema = tool_call_schema([WEATHER, add], "required", parallel=True, max_calls=2)
    jsonschema.validate({"tool_calls": [_call("add", a=1), _call("get_weather", city="x", days=1)]}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tool_calls": [_call("add", a=1)] * 3}, schema)


@pytest.mark.parametrize("choice, words", [
    ({"type": "function", "function": {"name": "missing"}}, "not among"),
    ("sometimes", "must be"),
    ({"type": "function"}, "must look like"),
])
def test_bad_tool_choice(choice, words):
    with pytest.raises(ToolError, match=words):
        normalize_tool_choice(choice, normalize_tools([WEATHER]))


def test_required_without_tools_is_refused():
    with pytest.raises(ToolError, match="at least one tool"):
        tool_call_schema([], "required")


def test_open_objects_are_closed_for_generation_only():
    open_tool = {"name": "f", "parameters": {"type": "object", "properties": {"o": {"type": "object", "properties": {"k": {"type": "integer"}}}}}}
    schema = tool_call_schema([open_tool], "required")
    args = schema["properties"]["arguments"]
    assert args["additionalProperties"] is False and args["properties"]["o"]["additionalProperties"] is False
    assert "additionalProperties" not in open_tool["parameters"]  # the definition itself is untouched
    assert "additionalProperties" not in tool_call_schema([open_tool], "required", close_objects=False)["properties"]["arguments"]
    all_of = {"name": "g", "parameters": {"type": "object", "allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}}
    branch = tool_call_schema([all_of], "required")["properties"]["arguments"]
    assert all("additionalProperties" not in s for s in branch["allOf"])


def test_parse_tool_output_shapes():
    assert parse_tool_output({"content": "hi"}).content == "hi"
    one = parse_tool_output(_call("add", a=1))
    assert [(c.name, c.arguments) for c in one.tool_calls] == [("add", {"a": 1})] and one.content is None
    two = parse_tool_output({"tool_calls": [_call("add", a=1), _call("add", a=2)]})
    assert len(two.tool_calls) == 2 and two.tool_calls[0].id != two.tool_calls[1].id
    entry = one.tool_calls[0].to_openai()
    assert entry["type"] == "function" and json.loads(entry["function"]["arguments"]) == {"a": 1}
    assert entry["id"].startswith("call_")
    assert parse_tool_output(_call("add", a=1), [add]).tool_calls[0].arguments == {"a": 1}
    with pytest.raises(ToolError, match="fail its parameters"):
        parse_tool_output(_call("add", a="x"), [add])
    with pytest.raises(ToolError, match="not among"):
        parse_tool_output(_call("sub", a=1), [add])


# -- prompts ---------------------------------------------------------------------------------


def test_tool_prompt_messages_lists_tools_in_a_system_message():
    msgs = tool_prompt_messages([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}], [WEATHER, add], "auto")
    assert len(msgs) == 2 and msgs[0]["role"] == "system"
    text = msgs[0]["content"]
    assert text.startswith("Be brief.") and "get_weather" in text and "Add two numbers." in text
    assert '"content"' in text and '"arguments"' in text
    only = tool_prompt_messages("Weather?", [WEATHER], {"type": "function", "function": {"name": "get_weather"}})
    assert only[0]["role"] == "system" and "get_weather" in only[0]["content"] and only[1] == {"role": "user", "content": "Weather?"}


def test_plain_messages_spell_tool_turns_as_text():
    history = [
        {"role": "user", "content": [{"type": "text", "text": "Add 1 "}, {"type": "text", "text": "and 2"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "3"},
    ]
    msgs = plain_messages(history)
    assert msgs[0] == {"role": "user", "content": "Add 1 and 2"}
    assert json.loads(msgs[1]["content"]) == {"name": "add", "arguments": {"a": 1, "b": 2}}
    assert msgs[2]["role"] == "user" and "'add'" in msgs[2]["content"] and msgs[2]["content"].endswith("3")
    with pytest.raises(ToolError, match="image_url"):
        plain_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])


class _TemplateTokenizer:
    """A stand-in tokenizer whose chat template renders tools; records what it was given."""

    chat_template = "{% if tools %}{{ tools }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"

    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kwargs):
        self.calls.append((messages, kwargs))
        return "|".join(str(m.get("content")) for m in messages) + ("|TOOLS" if kwargs.get("tools") else "")


def test_render_prompt_uses_the_templates_tool_support():
    tok = _TemplateTokenizer()
    text = render_prompt(tok, [{"role": "user", "content": "hi"},
                               {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}]}],
                         [add], "required")
    messages, kwargs = tok.calls[-1]
    assert text.endswith("|TOOLS") and kwargs["tools"][0]["function"]["name"] == "add"
    assert messages[0]["role"] == "system" and "Call one of the tools" in messages[0]["content"]
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == {"a": 1}  # dicts, as templates expect


class _CallableTemplateTokenizer(_TemplateTokenizer):
    """The stand-in, tokenizing each character as one id (what Generator.prompt_ids needs)."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(ch) % 50 for ch in text]}


def test_tool_prompt_hands_tools_to_a_template_that_renders_them():
    msgs, tools = tool_prompt(_TemplateTokenizer(), "Weather?", [WEATHER, add], "auto")
    assert [t["function"]["name"] for t in tools] == ["get_weather", "add"]
    assert msgs[0]["role"] == "system" and "get_weather" not in msgs[0]["content"] and '"content"' in msgs[0]["content"]
    assert msgs[1] == {"role": "user", "content": "Weather?"}
    for tokenizer in (None, SimpleNamespace(chat_template="{{ messages }}")):  # no template / one without tools
        msgs, tools = tool_prompt(tokenizer, "Weather?", [WEATHER], "auto")
        assert tools is None and "get_weather" in msgs[0]["content"]


def test_generator_prompt_ids_passes_tools_to_the_template():
    from constrained_spec.api import Generator

    tok = _CallableTemplateTokenizer()
    msgs, tools = tool_prompt(tok, "Weather?", [WEATHER], "required")
    ids = Generator.prompt_ids(SimpleNamespace(tokenizer=tok), msgs, None, False, tools=tools)
    messages, kwargs = tok.calls[-1]
    assert kwargs["tools"] == tools and messages == msgs and len(ids) == len("|".join(m["content"] for m in msgs) + "|TOOLS")
    Generator.prompt_ids(SimpleNamespace(tokenizer=tok), "hi")
    assert "tools" not in tok.calls[-1][1]
    with pytest.raises(ValueError, match="chat template"):
        Generator.prompt_ids(SimpleNamespace(tokenizer=SimpleNamespace(chat_template=None)), "hi", tools=tools)


def test_content_schema_hint_is_the_shared_schema_hint():
    from constrained_spec.api import schema_hint

    content = {"type": "object", "properties": {"n": {"type": "integer"}}}
    for choice in ("auto", "none"):
        text = tool_prompt_messages("Hi", [WEATHER], choice, content_schema=content)[0]["content"]
        assert text.endswith(schema_hint(content, 'The value of "content" is a single JSON value'))
    assert schema_hint({"type": "string"}) == 'Answer with a single JSON value that follows this JSON Schema:\n{"type": "string"}'


def test_render_prompt_without_a_template(gpt2_tokenizer):
    text = render_prompt(gpt2_tokenizer, "Weather in Rome?", [WEATHER])
    assert "get_weather" in text and text.rstrip().endswith("Weather in Rome?")


# -- dispatch --------------------------------------------------------------------------------


def test_call_tool_converts_and_dispatches():
    assert call_tool({"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 40}'}}, [add]) == 42
    assert call_tool(ToolCall("book", {"day": "2024-05-01", "seats": 2}), {"book": book}) == "2024-05-01:2:"
    move = call_tool({"name": "Move", "arguments": {"to": {"x": 1, "y": 2}, "speed": "slow"}}, [Move])
    assert isinstance(move, Move) and move.to == Point(x=1, y=2)
    with pytest.raises(ToolError, match="has no function"):
        call_tool(ToolCall("sub", {}), [add])
    with pytest.raises(ToolError, match="do not validate"):
        call_tool(ToolCall("add", {"a": "many"}), [add])


# -- generation with tiny random models ------------------------------------------------------


@pytest.fixture(scope="module")
def generator(tiny_generator):
    return tiny_generator(max_new_tokens=200, num_draft_tokens=3)


SMALL_ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["a", "b"], "additionalProperties": False}}}


@pytest.mark.parametrize("choice, seed", [("required", 1), ({"type": "function", "function": {"name": "get_weather"}}, 2)])
def test_generated_call_validates_against_the_chosen_tool(generator, choice, seed):
    tools = normalize_tools([WEATHER, SMALL_ADD])
    reply = generate_tool_calls(generator, "What is the weather in Rome?", tools, choice, temperature=1.0, seed=seed)
    assert reply.content is None and len(reply.tool_calls) == 1
    call = reply.tool_calls[0]
    if isinstance(choice, dict):
        assert call.name == "get_weather"
    params = {t.name: t.parameters for t in tools}[call.name]
    jsonschema.validate(call.arguments, params)
    if call.name == "add":
        assert call_tool(call, {"add": lambda a, b: a + b}) == call.arguments["a"] + call.arguments["b"]


def test_auto_gives_content_or_a_valid_call(generator):
    tools = normalize_tools([SMALL_ADD])
    content = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["n"], "additionalProperties": False}
    for seed in (3, 4):
        reply = generate_tool_calls(generator, "Add 2 and 3.", tools, "auto", content_schema=content, temperature=1.0, seed=seed)
        assert (reply.content is None) != (not reply.tool_calls)
        if reply.tool_calls:
            jsonschema.validate(reply.tool_calls[0].arguments, tools[0].parameters)
        else:
            jsonschema.validate(reply.content, content)


def test_auto_grammar_accepts_both_branches_exactly():
    import re

    from constrained_spec.grammar import output_spec

    regex = output_spec(tool_call_schema([SMALL_ADD], "auto", content_schema={"type": "string", "maxLength": 6})).regex
    assert re.fullmatch(regex, '{"content":"hi"}') and re.fullmatch(regex, '{"name":"add","arguments":{"a":5,"b":7}}')
    for bad in ('{"content":"far too long"}', '{"name":"add","arguments":{"a":5}}', '{"name":"sub","arguments":{"a":5,"b":7}}'):
        assert not re.fullmatch(regex, bad)


def test_tool_choice_none_generates_content(generator):
    reply = generate_tool_calls(generator, "Say hi.", [SMALL_ADD], "none", content_schema={"type": "string", "maxLength": 6},
                                temperature=1.0, seed=5)
    assert not reply.tool_calls and isinstance(reply.content, str) and len(reply.content) <= 6


def test_render_prompt_through_a_real_chatml_template_without_tool_support():
    from conftest import real_tokenizer

    tok = real_tokenizer("qwen2")
    history = [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    text = render_prompt(tok, history, [WEATHER], "auto")
    assert text.startswith("<|im_start|>system\nYou can call these tools") and "get_weather" in text
    assert '{"name": "get_weather", "arguments": {"city": "Rome", "days": 1}}' in text
    assert "Result of tool 'get_weather': sunny" in text and text.endswith("<|im_start|>assistant\n")
