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
