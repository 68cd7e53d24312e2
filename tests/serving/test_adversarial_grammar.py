"""Requests built to stall the server through its grammar code (issue 32), on the tiny pair.

Each repro answers in bounded time with the documented status: a backtracking pattern, a schema
nested past Python's recursion limit in tool parameters, an empty language, a regex past the
engine's limits, and an ``if`` pattern that was wrongly called empty. Outputs are judged by
``jsonschema`` / ``re``, not by the server. (The cubic Lark post-parse is bounded in
``tests/grammar/test_grammar_limits.py``: the tiny model rarely ends an unbounded language.)
"""

from __future__ import annotations

import faulthandler
import json
import threading
import time

import jsonschema
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from constrained_spec.serving.app import ServerConfig, create_app  # noqa: E402

USER = [{"role": "user", "content": "Answer."}]
KEY = "a" * 40 + "b"
#: issue 32 item 1: the key is forced by the grammar, then ``^(a+)+$`` is tried on it when validating
EVIL = {"type": "object", "properties": {KEY: {"type": "integer", "minimum": 0, "maximum": 9}}, "required": [KEY],
        "additionalProperties": False, "patternProperties": {"^(a+)+$": {}}, "maxProperties": 1}


def json_format(schema, name="out"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def deep_items(n: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(n):
        schema = {"type": "array", "items": schema}
    return schema


@pytest.fixture(scope="module")
def generator(tiny_generator):
    return tiny_generator(max_new_tokens=60, num_draft_tokens=3)


@pytest.fixture(scope="module")
def client(generator):
    with TestClient(create_app(generator, ServerConfig(model_name="tiny", request_timeout=30.0))) as c:
        yield c


def post(client, **body):
    body.setdefault("messages", USER)
    body.setdefault("seed", 1)
    return client.post("/v1/chat/completions", json=body)


def error_of(r, status, code):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and "Traceback" not in r.text, err
    return err


@pytest.fixture
def watchdog():
    """A backtracking ``re`` holds the GIL in C code, where no Python timeout can run: a hang is
    ended by faulthandler's own thread, which dumps the stacks and exits the run after 120 s."""
    faulthandler.dump_traceback_later(120, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def test_a_backtracking_pattern_neither_freezes_the_request_nor_the_health_check(client, watchdog):
    """40 a's and a b under ``^(a+)+$``: hours on Python's ``re``, which held the GIL (``/health`` 16 s)."""
    answer: dict = {}

    def ask() -> None:
        start = time.perf_counter()
        answer["response"] = post(client, response_format=json_format(EVIL), max_tokens=60, temperature=1.0)
        answer["seconds"] = time.perf_counter() - start

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    slowest = 0.0
    while worker.is_alive():
        start = time.perf_counter()
        assert client.get("/health").status_code == 200
        slowest = max(slowest, time.perf_counter() - start)
        worker.join(timeout=0.05)
        assert time.perf_counter() - start < 60, "the request did not answer"
    assert slowest < 1.0
    r = answer["response"]
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop"  # the value is complete: it went through validation
    value = json.loads(choice["message"]["content"])
    assert list(value) == [KEY] and 0 <= value[KEY] <= 9  # independent of the pattern keywords
    assert answer["seconds"] < 30


def test_tool_parameters_nested_past_the_recursion_limit_are_a_400(client):
    """Issue 32 item 4: ``items`` nested 330 deep in tool parameters answered 500 (RecursionError)."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": deep_items(330)}}}}]
    err = error_of(post(client, tools=tools, tool_choice="required", max_tokens=8), 400, "invalid_tools")
    assert "levels deep" in err["message"]
    err = error_of(post(client, response_format=json_format(deep_items(330)), max_tokens=8), 400, "invalid_schema")
    assert "levels deep" in err["message"]
    # the response_format beside tools goes through the tool helpers too
    ok_tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]
    err = error_of(post(client, tools=ok_tools, response_format=json_format(deep_items(330)), max_tokens=8), 400, "invalid_schema")
    assert "levels deep" in err["message"]


def test_an_empty_language_and_a_regex_past_the_limits_are_400s_before_decoding(client):
    err = error_of(post(client, guided_grammar='start: x\nx: "a" x\n', max_tokens=8), 400, "empty_language")
    assert "not allowed" not in err["message"]
    err = error_of(post(client, guided_regex="a{1000000}", max_tokens=8), 400, "compile_limit")
    assert "roll back" not in err["message"]


def test_an_if_pattern_disjoint_from_the_string_is_no_empty_language(client):
    """Issue 32: refused as ``empty_language`` though "aaaaaaaaaab" is valid."""
    schema = {"type": "string", "pattern": "^a{10}b$", "if": {"pattern": "^(a+)+$"}, "then": {}}
    r = post(client, response_format=json_format(schema), max_tokens=20)
    assert r.status_code == 200, r.text
    value = json.loads(r.json()["choices"][0]["message"]["content"])
    assert value == "a" * 10 + "b" and jsonschema.Draft202012Validator(schema).is_valid(value)
