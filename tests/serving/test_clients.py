"""The clients people already use, against the server unchanged: instructor and LangChain's
``ChatOpenAI(...).with_structured_output``, in process (the app behind FastAPI's TestClient, which is
the ``httpx.Client`` each client is handed). Skipped with a reason where a package is absent (the
``test`` extra installs them). jsonschema judges every value; the Pydantic model is built here."""

from __future__ import annotations

import json
from typing import Literal

import jsonschema
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from constrained_spec.serving.app import ServerConfig, create_app  # noqa: E402


class Person(BaseModel):
    name: str = Field(max_length=10)
    age: int = Field(ge=0, le=120)
    role: Literal["engineer", "artist"]


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "role": {"enum": ["engineer", "artist"]}},
          "required": ["name", "age", "role"]}


@pytest.fixture(scope="module")
def http(tiny_generator):
    with TestClient(create_app(tiny_generator(draft=False, max_new_tokens=400), ServerConfig(model_name="tiny"))) as c:
        yield c


def test_responses_api_is_refused_by_name(http):
    body = {"model": "tiny", "input": "Invent a person.",
            "text": {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}}
    r = http.post("/v1/responses", json=body)
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert error["code"] == "unsupported_endpoint" and "Responses API" in error["message"] and "/v1/chat/completions" in error["message"]
    assert http.post("/v1/nothing", json=body).json()["error"].get("code") != "unsupported_endpoint"  # only this route says so


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor_gets_a_valid_model_on_the_first_try(http, mode):
    instructor = pytest.importorskip("instructor", reason="instructor is not installed (pip install 'constrained-spec[test]')")
    from openai import OpenAI

    client = instructor.from_openai(OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http),
                                    mode=getattr(instructor.Mode, mode))
    person, completion = client.chat.completions.create_with_completion(
        model="tiny", response_model=Person, max_retries=0, seed=1, messages=[{"role": "user", "content": "Invent a person."}])
    assert isinstance(person, Person)
    jsonschema.validate(person.model_dump(mode="json"), PERSON)
    message = completion.choices[0].message
    raw = message.tool_calls[0].function.arguments if mode == "TOOLS" else message.content
    assert json.loads(raw) == person.model_dump(mode="json")  # the server's own output, not a repaired one


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(http, method):
    pytest.importorskip("langchain_openai", reason="langchain-openai is not installed (pip install 'constrained-spec[test]')")
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="tiny", api_key="unused", base_url="http://testserver/v1", http_client=http, temperature=0, max_retries=0)
    result = llm.with_structured_output(Person, method=method, include_raw=True).invoke("Invent a person.")
    assert result["parsing_error"] is None and isinstance(result["parsed"], Person)
    jsonschema.validate(result["parsed"].model_dump(mode="json"), PERSON)


def test_langchain_on_the_responses_api_hears_why(http):
    pytest.importorskip("langchain_openai", reason="langchain-openai is not installed (pip install 'constrained-spec[test]')")
    import openai
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="tiny", api_key="unused", base_url="http://testserver/v1", http_client=http, max_retries=0, use_responses_api=True)
    with pytest.raises(openai.NotFoundError, match="Responses API"):
        llm.with_structured_output(Person).invoke("Invent a person.")


# -- the official openai client's structured-output helpers ---------------------------------------


class Weather(BaseModel):
    city: str = Field(max_length=8)
    days: int = Field(ge=1, le=7)


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"], "additionalProperties": False}


def openai_client(http):
    openai = pytest.importorskip("openai", reason="the openai package is not installed (pip install 'constrained-spec[test]')")
    return openai, openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=http, max_retries=0)


def parse_helpers(client):
    """``chat.completions.parse``, and ``beta.chat.completions.parse`` where this client version still has it."""
    beta_chat = getattr(getattr(client, "beta", None), "chat", None)
    return [client.chat.completions.parse] + ([beta_chat.completions.parse] if beta_chat is not None else [])


def test_openai_parse_with_a_pydantic_response_format(http):
    _, client = openai_client(http)
    for parse in parse_helpers(client):
        completion = parse(model="tiny", messages=[{"role": "user", "content": "Invent a person."}], response_format=Person, seed=3)
        message = completion.choices[0].message
        assert completion.choices[0].finish_reason == "stop" and isinstance(message.parsed, Person)
        jsonschema.validate(json.loads(message.content), PERSON)  # the server's text, judged apart from the client's parse
        assert message.parsed == Person.model_validate_json(message.content)


def test_openai_stream_with_a_pydantic_response_format(http):
    _, client = openai_client(http)
    deltas = []
    with client.chat.completions.stream(model="tiny", messages=[{"role": "user", "content": "Invent a person."}], response_format=Person,
                                        seed=4) as stream:
        for event in stream:
            if event.type == "content.delta":
                deltas.append(event.delta)
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert isinstance(message.parsed, Person) and "".join(deltas) == message.content
    jsonschema.validate(json.loads(message.content), PERSON)


@pytest.mark.parametrize("stream", [False, True])
def test_openai_strict_function_tools(http, stream):
    openai, client = openai_client(http)
    tool = openai.pydantic_function_tool(Weather, name="get_weather", description="The weather in a city.")
    assert tool["function"]["strict"] is True  # what the client sends: strict: true
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris for 3 days?"}], "tools": [tool],
            "tool_choice": "required", "parallel_tool_calls": False, "seed": 5}
    if stream:
        done_events = []
        with client.chat.completions.stream(**body) as events:
            for event in events:
                if event.type == "tool_calls.function.arguments.done":
                    done_events.append(event)
            final = events.get_final_completion()
        assert [e.name for e in done_events] == ["get_weather"] and isinstance(done_events[0].parsed_arguments, Weather)
    else:
        final = client.chat.completions.parse(**body)
    call = final.choices[0].message.tool_calls[0]
    assert final.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert isinstance(call.function.parsed_arguments, Weather)
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)


def test_openai_parse_hears_a_refused_schema_as_a_400(http):
    openai, client = openai_client(http)

    class Tagged(BaseModel):
        tags: list[str] = Field(max_length=3, json_schema_extra={"uniqueItems": True})

    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.parse(model="tiny", messages=[{"role": "user", "content": "Tags?"}], response_format=Tagged)
    assert info.value.body["code"] == "unsupported_schema_keyword" and "uniqueItems" in info.value.body["message"]
