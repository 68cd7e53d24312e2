"""Grammar requests to the server: vLLM's ``structured_outputs`` / ``guided_grammar`` and OpenAI
custom tools with a Lark (or regex) format, on tiny random models through FastAPI's TestClient.

Every generated text is judged by the ``lark`` package (or ``re.fullmatch``), not by the server;
the grammars have finite languages, so a tiny model always finishes them.
"""

from __future__ import annotations

import json
import re
import threading
import time

import jsonschema
import pytest
from grammar_oracles import in_language

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from constrained_spec import serving as server  # noqa: E402
from constrained_spec.serving.app import ServerConfig, create_app  # noqa: E402

YES_NO = 'start: "yes" | "no"\n'
BRACKETS = 'start: pair | pair pair\npair: "(" ")" | "[" "]"\n'
PHRASE = 'start: "alpha beta gamma delta epsilon"\n'  # several tokens, no choice: for the token budget
USER = [{"role": "user", "content": "Answer."}]
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"], "additionalProperties": False}}}


def custom(name="shape", grammar=BRACKETS, syntax="lark", description="Draws brackets."):
    return {"type": "custom", "custom": {"name": name, "description": description,
                                         "format": {"type": "grammar", "grammar": {"syntax": syntax, "definition": grammar}}}}


def pick(name):
    return {"type": "custom", "custom": {"name": name}}


@pytest.fixture(scope="module")
def generator(tiny_generator):
    return tiny_generator(max_new_tokens=64, num_draft_tokens=3)


@pytest.fixture(scope="module")
def client(generator):
    with TestClient(create_app(generator, ServerConfig(model_name="tiny"))) as c:
        yield c


def post(client, **body):
    body.setdefault("messages", USER)
    body.setdefault("seed", 1)
    body.setdefault("temperature", 1.0)
    return client.post("/v1/chat/completions", json=body)


def error_of(r, status, code=None, param=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"] and "Traceback" not in r.text
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    return err


def test_the_oracle_rejects_text_outside_the_language():  # negative control of in_language
    assert in_language(BRACKETS, "()[]") and not in_language(BRACKETS, "(]") and not in_language(BRACKETS, "()\n")
    assert in_language(YES_NO, "no") and not in_language(YES_NO, "yes no")


# -- vLLM's grammar parameters -------------------------------------------------------------------


@pytest.mark.parametrize("field", ["guided_grammar", "structured_outputs"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_grammar_request_answers_text_in_the_language(client, field, seed):
    body = {"guided_grammar": BRACKETS} if field == "guided_grammar" else {"structured_outputs": {"grammar": BRACKETS}}
    r = post(client, seed=seed, **body)
    assert r.status_code == 200, r.text
    out = r.json()
    choice = out["choices"][0]
    assert in_language(BRACKETS, choice["message"]["content"]), choice
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert out["constrained_spec"]["mode"] == "grammar" and out["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("body", [{"guided_regex": "[0-9]{3}-[a-c]"}, {"structured_outputs": {"regex": "[0-9]{3}-[a-c]"}}])
def test_a_regex_request_fully_matches(client, body):
    r = post(client, **body)
    assert r.status_code == 200, r.text
    assert re.fullmatch("[0-9]{3}-[a-c]", r.json()["choices"][0]["message"]["content"])


def test_vllm_options_that_do_not_change_a_grammar_are_accepted(client):
    r = post(client, structured_outputs={"grammar": YES_NO, "disable_fallback": True, "disable_any_whitespace": False, "json": None})
    assert r.status_code == 200, r.text
    assert in_language(YES_NO, r.json()["choices"][0]["message"]["content"])


def test_a_streamed_grammar_reply_is_the_non_streamed_one(client):
    body = {"messages": USER, "seed": 4, "temperature": 1.0, "structured_outputs": {"grammar": BRACKETS}}
    whole = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == whole and in_language(BRACKETS, text)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] == ["stop"]


@pytest.mark.parametrize("grammar, needle", [
    ("start: foo\n", "foo"),  # lark: an undefined rule
    ("start: /a(?=b)/\n", "look-around"),  # lark (Python re) loads it, llguidance cannot enforce it
    ("%declare FOO\nstart: FOO\n", "declare"),  # llguidance refuses the construct
    ('start: "a" |\n  | ) (\n', "lark cannot load"),  # not Lark at all
    ("root ::= \"yes\" | \"no\"\n", "lark cannot load"),  # GBNF (vLLM with xgrammar) is not Lark
    ("start: X\n%import grammars.json.value\n", "not allowed"),  # no grammar file of the server's is read
    ("start: X\n%import .sibling.X\n", "not allowed"),
    ('start: ("a" | "b" | " ")~1..40\n', "alternatives"),  # lark's loader would expand 3^40 alternatives, for ever
])
@pytest.mark.parametrize("field", ["guided_grammar", "structured_outputs.grammar"])
def test_a_grammar_that_cannot_be_compiled_is_a_400_naming_the_problem(client, grammar, needle, field):
    body = {"guided_grammar": grammar} if field == "guided_grammar" else {"structured_outputs": {"grammar": grammar}}
    err = error_of(post(client, **body), 400, "grammar_error", field)
    assert needle in err["message"], err


def test_an_invalid_regex_is_a_400(client):
    err = error_of(post(client, guided_regex="a(b"), 400, "grammar_error", "guided_regex")
    assert "regex" in err["message"]


def test_a_grammar_over_the_cap_is_a_400_naming_the_limit_before_compiling(generator, monkeypatch):
    compiled = []
    monkeypatch.setattr(generator, "compile", lambda *a, **k: compiled.append(a))
    big = 'start: "a"\n' + "".join(f'r{i}: "x{i}"\n' for i in range(4000))  # > 32768 characters
    assert len(big) > server.MAX_GRAMMAR_CHARS
    with TestClient(create_app(generator, ServerConfig(model_name="tiny"))) as c:
        start = time.monotonic()
        err = error_of(post(c, structured_outputs={"grammar": big}), 400, "grammar_too_large", "structured_outputs.grammar")
        assert time.monotonic() - start < 3.0 and str(server.MAX_GRAMMAR_CHARS) in err["message"]
        err = error_of(post(c, tools=[custom(grammar=big)], tool_choice=pick("shape")), 400, "grammar_too_large",
                       "tools[0].custom.format.grammar.definition")
        assert "max_grammar_chars" in err["message"]
    with TestClient(create_app(generator, ServerConfig(model_name="tiny", max_grammar_chars=20))) as c:
        error_of(post(c, guided_grammar=BRACKETS), 400, "grammar_too_large", "guided_grammar")
    assert compiled == []  # refused on admission, nothing compiled


def test_a_custom_tools_grammar_counts_against_the_grammar_cap_not_the_schema_cap(generator):
    with TestClient(create_app(generator, ServerConfig(model_name="tiny", max_schema_chars=200, max_grammar_chars=None))) as c:
        big = BRACKETS + "".join(f'r{i}: "x{i}"\n' for i in range(40))  # > 200 characters: only the grammar cap could refuse it
        r = post(c, tools=[custom(grammar=big)], tool_choice=pick("shape"))
        assert r.status_code == 200, r.text
        assert in_language(big, r.json()["choices"][0]["message"]["tool_calls"][0]["custom"]["input"])
        error_of(post(c, tools=[custom(description="d" * 300)], tool_choice=pick("shape")), 400, "schema_too_large", "tools")


@pytest.mark.parametrize("body, param, needle", [
    ({"guided_grammar": YES_NO, "response_format": {"type": "json_object"}}, "guided_grammar", "response_format"),
    ({"guided_grammar": YES_NO, "structured_outputs": {"grammar": YES_NO}}, "structured_outputs.grammar", "one grammar"),
    ({"guided_grammar": YES_NO, "tools": [ADD]}, "guided_grammar", "tools"),
    ({"structured_outputs": {"json": {"type": "object"}}}, "structured_outputs.json", "response_format"),
    ({"structured_outputs": {"choice": ["a", "b"]}}, "structured_outputs.choice", "grammar"),
    ({"structured_outputs": {"grammer": YES_NO}}, "structured_outputs.grammer", "unrecognized"),
    ({"structured_outputs": {"grammar": ""}}, "structured_outputs.grammar", "non-empty"),
    ({"structured_outputs": "start: x"}, "structured_outputs", "dictionary"),  # the request model refuses it
    ({"guided_json": {"type": "object"}}, "guided_json", "response_format"),  # refused by name, with what to use
    ({"response_format": {"type": "grammar", "grammar": YES_NO}}, "response_format", "grammar"),  # vLLM has no such type either
])
def test_grammar_requests_it_cannot_serve_are_400s_naming_the_field(client, body, param, needle):
    err = error_of(post(client, **body), 400, param=param)
    assert needle in err["message"], err


def test_grammar_with_tool_choice_none_is_served(client):
    r = post(client, guided_grammar=YES_NO, tools=[ADD], tool_choice="none")
    assert r.status_code == 200 and in_language(YES_NO, r.json()["choices"][0]["message"]["content"]), r.text


def test_grammars_compile_on_the_compile_threads(generator, monkeypatch):
    from constrained_spec.grammar.backends import llguidance

    threads = []
    real = llguidance.compile_grammar

    def spy(kind, source, *args):
        threads.append((kind, threading.current_thread().name))
        return real(kind, source, *args)

    monkeypatch.setattr(llguidance, "compile_grammar", spy)  # the compile work itself; the generation is handed its result
    with TestClient(create_app(generator, ServerConfig(model_name="tiny"))) as c:
        assert post(c, guided_grammar='start: "maybe" | "no"\n').status_code == 200
        assert post(c, tools=[custom(grammar='start: "(" ")" "(" ")"\n')], tool_choice=pick("shape")).status_code == 200
    assert [kind for kind, _ in threads] == ["lark", "lark"], threads
    assert all(name.startswith("constrained-spec-compile") for _, name in threads), threads


# -- OpenAI custom tools ---------------------------------------------------------------------------


def only_call(r):
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert set(call) == {"id", "type", "custom"} and call["type"] == "custom" and call["id"].startswith("call_")
    assert set(call["custom"]) == {"name", "input"}
    return call["custom"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_named_custom_tool_is_called_with_input_in_its_grammar(client, seed):
    call = only_call(post(client, seed=seed, tools=[custom(), custom("answer", YES_NO)], tool_choice=pick("shape")))
    assert call["name"] == "shape" and in_language(BRACKETS, call["input"]), call
    call = only_call(post(client, seed=seed, tools=[custom(), custom("answer", YES_NO)], tool_choice=pick("answer")))
    assert call["name"] == "answer" and in_language(YES_NO, call["input"]), call


def test_required_with_one_custom_tool_calls_it(client):
    call = only_call(post(client, tools=[custom()], tool_choice="required"))
    assert call["name"] == "shape" and in_language(BRACKETS, call["input"])


def test_a_regex_custom_tool_fully_matches(client):
    call = only_call(post(client, tools=[custom("code", "[A-Z]{2}[0-9]", "regex")], tool_choice=pick("code")))
    assert re.fullmatch("[A-Z]{2}[0-9]", call["input"]), call


def test_a_text_custom_tool_takes_any_text(client):
    tool = {"type": "custom", "custom": {"name": "note", "format": {"type": "text"}}}
    for t in (tool, {"type": "custom", "custom": {"name": "note"}}):  # no format: text, OpenAI's default
        r = post(client, tools=[t], tool_choice=pick("note"), max_tokens=6)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        (call,) = choice["message"]["tool_calls"]
        assert call["custom"]["name"] == "note" and isinstance(call["custom"]["input"], str)
        assert choice["finish_reason"] in ("tool_calls", "length")


def test_the_responses_api_flat_format_is_read_too(client):
    tool = {"type": "custom", "custom": {"name": "shape", "format": {"type": "grammar", "syntax": "lark", "definition": BRACKETS}}}
    assert in_language(BRACKETS, only_call(post(client, tools=[tool], tool_choice=pick("shape")))["input"])


def test_function_and_custom_tools_together(client):
    call = only_call(post(client, tools=[ADD, custom()], tool_choice=pick("shape")))
    assert call["name"] == "shape" and in_language(BRACKETS, call["input"])
    r = post(client, tools=[ADD, custom()], tool_choice={"type": "function", "function": {"name": "add"}})
    assert r.status_code == 200, r.text
    calls = r.json()["choices"][0]["message"]["tool_calls"]
    assert calls and all(c["type"] == "function" and c["function"]["name"] == "add" for c in calls)
    for c in calls:
        jsonschema.validate(json.loads(c["function"]["arguments"]), ADD["function"]["parameters"])


def test_tool_choice_none_with_custom_tools_answers_text(client):
    r = post(client, tools=[custom()], tool_choice="none", max_tokens=4)
    assert r.status_code == 200, r.text
    message = r.json()["choices"][0]["message"]
    assert isinstance(message["content"], str) and not message.get("tool_calls")


@pytest.mark.parametrize("extra, param, needle", [
    ({"tools": [custom()]}, "tool_choice", "'auto'"),  # OpenAI's default tool_choice
    ({"tools": [custom()], "tool_choice": "auto"}, "tool_choice", "name the tool"),
    ({"tools": [custom(), custom("answer", YES_NO)], "tool_choice": "required"}, "tool_choice", "several custom tools"),
    ({"tools": [ADD, custom()], "tool_choice": "required"}, "tool_choice", "function and custom"),
    ({"tools": [ADD, custom()]}, "tool_choice", "custom"),
    ({"tools": [custom()], "tool_choice": pick("draw")}, "tools", "'draw'"),
    ({"tools": [custom()], "tool_choice": pick("shape"), "stream": True}, "stream", "stream"),
    ({"tools": [custom(syntax="ebnf")], "tool_choice": pick("shape")}, "tools", "ebnf"),
    ({"tools": [custom(grammar="")], "tool_choice": pick("shape")}, "tools", "definition"),
    ({"tools": [custom("bad name")], "tool_choice": pick("bad name")}, "tools", "bad name"),
    ({"tools": [custom(), custom()], "tool_choice": pick("shape")}, "tools", "two custom tools"),
    ({"tools": [{"type": "custom", "custom": {"name": "x", "format": {"type": "json"}}}], "tool_choice": pick("x")}, "tools", "'json'"),
    ({"tools": [{"type": "custom"}], "tool_choice": pick("x")}, "tools", "custom"),
])
def test_custom_tool_requests_it_cannot_serve_are_400s(client, extra, param, needle):
    err = error_of(post(client, **extra), 400, param=param)
    assert needle in err["message"], err


def test_a_custom_tools_grammar_that_cannot_be_compiled_is_a_grammar_error(client):
    err = error_of(post(client, tools=[custom(grammar="start: /a(?=b)/\n")], tool_choice=pick("shape")), 400, "grammar_error",
                   "tools[0].custom.format.grammar.definition")
    assert "look-around" in err["message"]


def test_a_custom_call_cut_by_the_budget_is_a_partial_call(client, gpt2_tokenizer):
    r = post(client, tools=[custom("say", PHRASE)], tool_choice=pick("say"), max_tokens=2)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    (call,) = choice["message"]["tool_calls"]
    text = call["custom"]["input"]
    assert call["custom"]["name"] == "say" and text and "alpha beta gamma delta epsilon".startswith(text) and not in_language(PHRASE, text)
    assert len(gpt2_tokenizer.encode(text)) <= 2


def test_history_with_custom_calls_is_accepted_and_given_as_text(client, generator, monkeypatch):
    history = [
        {"role": "user", "content": "Draw."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "custom", "custom": {"name": "shape", "input": "()[]"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "drawn"},
        {"role": "user", "content": "Again."},
    ]
    prompts = []
    real = generator.run
    monkeypatch.setattr(generator, "run", lambda prompt, *a, **k: prompts.append(prompt) or real(prompt, *a, **k))
    call = only_call(post(client, messages=history, tools=[custom()], tool_choice=pick("shape")))
    assert in_language(BRACKETS, call["input"])
    (prompt,) = prompts
    assert {"role": "assistant", "content": "()[]"} in prompt
    assert any(m["role"] == "user" and "'shape'" in m["content"] and "drawn" in m["content"] for m in prompt)
    assert prompt[0]["role"] == "system" and BRACKETS in prompt[0]["content"] and "Draws brackets." in prompt[0]["content"]
    bad = [*history[:1], {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {"input": "()"}}]}]
    error_of(post(client, messages=bad, tools=[custom()], tool_choice=pick("shape")), 400, "invalid_message", "messages[1].tool_calls[0]")


# -- the official client ---------------------------------------------------------------------------


def test_the_official_client_reads_custom_calls_and_sends_grammars(generator):
    openai = pytest.importorskip("openai", reason="the openai package is not installed")
    from openai.types.chat import ChatCompletion

    with TestClient(create_app(generator, ServerConfig(model_name="tiny"))) as http:
        raw = post(http, tools=[custom()], tool_choice=pick("shape")).json()
        parsed = ChatCompletion.model_validate(raw)  # the client's own types
        call = parsed.choices[0].message.tool_calls[0]
        assert call.type == "custom" and call.custom.name == "shape" and in_language(BRACKETS, call.custom.input)
        assert parsed.choices[0].finish_reason == "tool_calls"

        client = openai.OpenAI(api_key="k", base_url="http://testserver/v1", http_client=http, max_retries=0)
        done = client.chat.completions.create(model="tiny", messages=USER, seed=2, temperature=1.0, tool_choice={"type": "custom", "custom": {"name": "shape"}},
                                              tools=[{"type": "custom", "custom": {"name": "shape", "format": {
                                                  "type": "grammar", "grammar": {"syntax": "lark", "definition": BRACKETS}}}}])
        call = done.choices[0].message.tool_calls[0]
        assert call.type == "custom" and in_language(BRACKETS, call.custom.input)
        done = client.chat.completions.create(model="tiny", messages=USER, seed=2, temperature=1.0,
                                              extra_body={"structured_outputs": {"grammar": YES_NO}})
        assert in_language(YES_NO, done.choices[0].message.content)
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="tiny", messages=USER, extra_body={"guided_grammar": "start: foo"})
        assert info.value.body["code"] == "grammar_error" and "foo" in info.value.body["message"]
