"""The OpenAPI document says what the server takes and answers (cheap checks, in the default run;
the fuzzing is in test_contract.py, marker ``contract``). jsonschema judges bodies against the
document's own schemas; the server answers the same bodies."""

from __future__ import annotations

import json

import jsonschema
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from constrained_spec.serving.app import ServerConfig, create_app  # noqa: E402
from constrained_spec.serving.openapi import CHAT_EXAMPLES  # noqa: E402

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def client(tiny_generator):
    with TestClient(create_app(tiny_generator(draft=False, max_new_tokens=8), ServerConfig(model_name="tiny", max_tokens_limit=8,
                                                                                                         max_particles=4))) as c:
        yield c


@pytest.fixture(scope="module")
def doc(client):
    return client.get("/openapi.json").json()


def body_validator(doc):
    """jsonschema's validator of the chat request body, as the document states it."""
    return jsonschema.Draft202012Validator({"$ref": "#/components/schemas/ChatRequestBody", "components": doc["components"]})


def test_every_operation_documents_its_answers(doc):
    ops = {(path, method): op for path, methods in doc["paths"].items() for method, op in methods.items()}
    assert set(ops) == {("/health", "get"), ("/metrics", "get"), ("/v1/models", "get"), ("/v1/models/{model_id}", "get"),
                        ("/v1/responses", "post"), ("/v1/chat/completions", "post")}
    chat = ops[("/v1/chat/completions", "post")]
    assert set(chat["responses"]) == {"200", "400", "404", "408", "413", "422", "429", "500", "503", "504"}
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert set(ops[("/v1/responses", "post")]["responses"]) == {"404", "408", "413", "429"}
    assert set(ops[("/metrics", "get")]["responses"]["200"]["content"]) == {"text/plain"}
    for (path, method), op in ops.items():
        for status, answer in op["responses"].items():
            if status != "200":
                assert answer["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}, (path, status)
    assert "HTTPValidationError" not in json.dumps(doc) and "security" not in json.dumps(doc)  # no key set: no 401, no scheme


def test_an_api_key_adds_401_and_the_bearer_scheme(tiny_generator):
    with TestClient(create_app(tiny_generator(draft=False), ServerConfig(model_name="tiny", api_key="k"))) as c:
        doc = c.get("/openapi.json", headers={"Authorization": "Bearer k"}).json()
    assert doc["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, methods in doc["paths"].items():
        for op in methods.values():
            assert ("401" in op["responses"]) == (path != "/health"), path


def test_the_documents_examples_are_valid_and_served(client, doc):
    validator = body_validator(doc)
    examples = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert set(examples) == set(CHAT_EXAMPLES) and max(e["value"].get("max_tokens", 0) for e in CHAT_EXAMPLES.values()) > 8
    for name, example in examples.items():
        validator.validate(example["value"])  # within max_tokens_limit, as the document states it
        r = client.post("/v1/chat/completions", json=example["value"])
        assert r.status_code == 200, (name, r.text)


# (body, whether the document takes it): the server answers 200 to those it takes, 400 to the others
AGREEMENT = [
    ({"messages": USER, "max_tokens": 5.0}, True),  # a float without a fraction is a JSON integer
    ({"messages": USER, "seed": 1e18}, True),
    ({"messages": [{"role": "user", "content": "hi", "name": 5}]}, True),  # undeclared message keys are ignored
    ({"messages": USER, "presence_penalty": 0.0, "logit_bias": {}, "n": 1, "stop": []}, True),
    ({"messages": USER, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "boolean"}}}}, True),
    ({"messages": [{}]}, False),  # the case: a message with no role
    ({"messages": USER, "temperature": "0.5"}, False),
    ({"messages": USER, "n": True}, False),
    ({"messages": USER, "logprobs": 0}, False),
    ({"messages": USER, "max_tokens": 9}, False),  # over max_tokens_limit, which the document states
    ({"messages": USER, "alignment": "smc", "particles": 5}, False),  # over max_particles, likewise
    ({"messages": USER, "response_format": {"type": "json_schema", "json_schema": {"name": 5, "schema": {}}}}, False),
    ({"messages": USER, "tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}]}, False),
    ({"messages": USER, "stream_options": {"include_usage": 1}}, False),
    ({"messages": USER, "structured_outputs": {"grammar": "  "}}, False),
    ({"messages": [{"role": "assistant"}]}, False),
    ({"messages": [{"role": "user", "content": "hi", "tool_calls": []}]}, False),
]


@pytest.mark.parametrize("body, takes", AGREEMENT)
def test_the_document_and_the_server_agree(client, doc, body, takes):
    assert body_validator(doc).is_valid(body) is takes
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == (200 if takes else 400), r.text
    if not takes:
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"]


def test_a_method_not_served_is_a_405_with_allow(client):
    for method, path, allowed in (("TRACE", "/v1/models", "GET"), ("PUT", "/v1/chat/completions", "POST"), ("DELETE", "/health", "GET")):
        r = client.request(method, path)
        assert r.status_code == 405 and allowed in r.headers["allow"].split(", "), (method, path, r.headers)
        assert r.json()["error"]["code"] == "method_not_allowed"
    assert "allow" not in client.get("/v1/nothing-here").headers  # a 404 names no methods


def test_a_tool_turn_without_tool_call_id_after_a_custom_call_is_not_a_500(client):
    """Found by schemathesis: the history's custom call had no id and the tool turn no tool_call_id (a KeyError, 500)."""
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"type": "custom", "custom": {"name": "t", "input": "x"}}]},
                {"role": "tool", "content": "done"}]
    r = client.post("/v1/chat/completions", json={"messages": messages})
    assert r.status_code == 200, r.text


def test_the_typed_body_is_made_from_the_one_request_declaration():
    """The document's body has the request model's fields, each of its ``Typed`` mark's type in strict JSON types;
    a field without a mark keeps its own type and bounds (the control: the request model itself takes the loose values)."""
    from typing import Annotated, Any

    from pydantic import BaseModel, Field, ValidationError

    from constrained_spec.serving.protocol import ChatCompletionRequest, ChatRequestBody
    from constrained_spec.serving.schemas import Typed, typed_body

    assert list(ChatRequestBody.model_fields) == list(ChatCompletionRequest.model_fields)

    class Loose(BaseModel):
        a: Annotated[dict[str, Any] | None, Typed(Annotated[dict[str, Any], Field(max_length=0)] | None)] = Field(default=None, description="d")
        b: int = Field(default=1, ge=1)

    Strict = typed_body(Loose, "Strict", "doc")
    assert Loose.model_validate({"a": {"k": 1}, "b": "2"}).b == 2  # the loose declaration takes both
    for bad in ({"a": {"k": 1}}, {"b": "2"}, {"b": 0}, {"c": 1}):
        with pytest.raises(ValidationError):
            Strict.model_validate(bad)
    assert Strict.model_validate({"a": {}, "b": 3}).model_dump() == {"a": {}, "b": 3}
    schema = Strict.model_json_schema()
    assert schema["properties"]["a"]["description"] == "d" and schema["description"] == "doc"
