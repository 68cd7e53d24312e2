"""The OpenAI-compatible server, through FastAPI's TestClient (in process, no socket bound)."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import jsonschema
import pytest
import torch

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from constrained_spec import serving as server  # noqa: E402
from constrained_spec.cli import serve as serve_cli  # noqa: E402
from constrained_spec.engine.stats import DecodeStats  # noqa: E402
from constrained_spec.serving import app as server_app  # noqa: E402
from constrained_spec.serving.app import ServerConfig, create_app  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["a", "b"], "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
USER = [{"role": "user", "content": "Tell me about a person."}]


def json_format(schema, name="person"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def generator(tiny_generator):
    return tiny_generator(max_new_tokens=200, num_draft_tokens=3)


@pytest.fixture(scope="module")
def client(generator):
    with TestClient(create_app(generator, ServerConfig(model_name="tiny"))) as c:
        yield c


def post(client, **body):
    body.setdefault("messages", USER)
    body.setdefault("seed", 1)
    return client.post("/v1/chat/completions", json=body)


def test_health_and_models(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["model"] == "tiny" and health["queue"]["pending"] == 0
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "tiny"


def test_json_schema_response_validates(client):
    r = post(client, response_format=json_format(PERSON), temperature=1.0, max_tokens=100)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "tiny"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] in ("stop", "length")
    jsonschema.validate(json.loads(choice["message"]["content"]), PERSON)
    usage = body["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    stats = body["constrained_spec"]["stats"]
    assert stats["generated_tokens"] == usage["completion_tokens"] and stats["target_forwards"] >= 1


def test_same_seed_same_answer(client):
    a = post(client, response_format=json_format(PERSON), temperature=1.0, seed=7).json()
    b = post(client, response_format=json_format(PERSON), temperature=1.0, seed=7).json()
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]


@pytest.mark.parametrize("parallel", [None, False])
@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_tools_response_has_a_valid_tool_call(client, tool_choice, parallel):
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    r = post(client, messages=[{"role": "user", "content": "Add 2 and 3."}], tools=TOOLS, tool_choice=tool_choice, temperature=1.0, seed=3, **extra)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    calls = choice["message"]["tool_calls"]
    assert 1 <= len(calls) <= (1 if parallel is False else 4)
    for call in calls:
        assert call["type"] == "function" and call["id"].startswith("call_")
        name = call["function"]["name"]
        if isinstance(tool_choice, dict):
            assert name == "add"
        jsonschema.validate(json.loads(call["function"]["arguments"]), PARAMS[name])


def test_tools_auto_with_response_format(client):
    history = [
        {"role": "user", "content": "Weather in Rome, then a person."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome", "days": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    for seed in (1, 2):
        r = post(client, messages=history, tools=TOOLS, response_format=json_format(PERSON), temperature=1.0, seed=seed)
        assert r.status_code == 200, r.text
        message = r.json()["choices"][0]["message"]
        if message.get("tool_calls"):
            for call in message["tool_calls"]:
                jsonschema.validate(json.loads(call["function"]["arguments"]), PARAMS[call["function"]["name"]])
        else:
            jsonschema.validate(json.loads(message["content"]), PERSON)


def test_free_text_without_response_format(client):
    r = post(client, max_tokens=8, temperature=1.0)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert isinstance(choice["message"]["content"], str) and choice["finish_reason"] in ("stop", "length")


def test_unsupported_keyword_is_a_400_naming_it(client):
    schema = {"type": "array", "items": {"type": "object"}, "uniqueItems": True}
    r = post(client, response_format=json_format(schema))
    assert r.status_code == 400
    err = r.json()["error"]
    assert "uniqueItems" in err["message"] and err["code"] == "unsupported_schema_keyword"
    assert err["type"] == "invalid_request_error"


def test_malformed_schema_is_a_400(client):
    r = post(client, response_format=json_format({"type": 5}))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_schema"
    r = post(client, response_format={"type": "json_schema", "json_schema": {"name": "x"}})
    assert r.status_code == 400 and "schema" in r.json()["error"]["message"]
    r = post(client, response_format={"type": "xml"})
    assert r.status_code == 400 and "xml" in r.json()["error"]["message"]


@pytest.mark.parametrize("extra, param", [
    ({"n": 2}, "n"),
    ({"stop": ["\n"]}, "stop"),
    ({"logprobs": True}, "logprobs"),
    ({"temperature": 5}, "temperature"),
    ({"messages": []}, "messages"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tools"),
])
def test_bad_requests_are_400(client, extra, param):
    r = post(client, **extra)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"].startswith(param) and err["message"]


def test_n_2_message_is_clear(client):
    assert "n=1" in post(client, n=2).json()["error"]["message"]


def test_token_budget_exhausted_is_a_200_with_finish_reason_length_and_the_partial_text(client, generator, gpt2_tokenizer):
    r = post(client, response_format=json_format(PERSON), max_tokens=2, temperature=1.0)
    assert r.status_code == 200, r.text
    body = r.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length" and body["usage"]["completion_tokens"] == 2
    content = choice["message"]["content"]
    assert content.startswith("{")  # the start of a PERSON object, not a whole one
    with pytest.raises(json.JSONDecodeError):
        json.loads(content)
    # the Python API raises, with the partial output attached
    from constrained_spec.errors import TokenBudgetExceeded

    with pytest.raises(TokenBudgetExceeded) as info:
        generator.run(USER, PERSON, max_new_tokens=2, temperature=1.0, seed=1)
    exc = info.value
    assert len(exc.token_ids) == 2 and exc.prompt_tokens > 0
    assert exc.partial_text == gpt2_tokenizer.decode(exc.token_ids) and exc.partial_text.startswith("{")


def test_stream_sends_sse_chunks_then_done(client):
    body = {"messages": USER, "seed": 1, "temperature": 1.0, "response_format": json_format(PERSON), "stream": True,
            "stream_options": {"include_usage": True}}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    jsonschema.validate(json.loads(text), PERSON)
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and "stats" in finals[0]["constrained_spec"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


@pytest.mark.parametrize("seed, parallel", [(2, None), (4, None), (2, False)])
def test_stream_of_tool_calls_sends_argument_deltas_as_generated(client, seed, parallel):
    body = {"messages": USER, "seed": seed, "temperature": 1.0, "tools": TOOLS, "tool_choice": "required"}
    if parallel is not None:
        body["parallel_tool_calls"] = parallel
    whole = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["tool_calls"]
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    deltas = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    calls: dict[int, dict] = {}
    for d in deltas:
        if d["index"] not in calls:  # OpenAI's shape: the first delta of a call has its id, type and name
            assert d["id"].startswith("call_") and d["type"] == "function" and d["function"]["name"] in PARAMS
            calls[d["index"]] = {"name": d["function"]["name"], "arguments": d["function"].get("arguments", "")}
        else:
            assert set(d) == {"index", "function"} and set(d["function"]) == {"arguments"}
            calls[d["index"]]["arguments"] += d["function"]["arguments"]
    assert sorted(calls) == list(range(len(calls))) and len(calls) == len(whole)
    for i, call in calls.items():
        jsonschema.validate(json.loads(call["arguments"]), PARAMS[call["name"]])
        assert call == {"name": whole[i]["function"]["name"], "arguments": whole[i]["function"]["arguments"]}
    assert sum(1 for d in deltas if d["function"].get("arguments")) >= 2  # streamed in pieces, not at the end


def stream_events(client, body):
    """The parsed events of a streamed request (``[DONE]`` last, as a string)."""
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


def content_deltas(chunks):
    return [c["choices"][0]["delta"]["content"] for c in chunks if c.get("choices") and c["choices"][0]["delta"].get("content")]


@pytest.mark.parametrize("body", [
    {"response_format": json_format(PERSON), "temperature": 1.0, "seed": 4},
    {"temperature": 1.0, "seed": 5, "max_tokens": 24},  # free text: random GPT-2 tokens, split multi-byte characters included
])
def test_streamed_deltas_are_the_non_streamed_content(client, body):
    body = {"messages": USER, **body}
    whole = client.post("/v1/chat/completions", json=body).json()
    chunks = stream_events(client, {**body, "stream_options": {"include_usage": True}})
    deltas = content_deltas(chunks)
    message = whole["choices"][0]["message"]
    assert "".join(deltas) == message["content"]
    assert len(deltas) >= 2 and whole["usage"]["completion_tokens"] > 1  # streamed as generated, not in one piece
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [f["choices"][0]["finish_reason"] for f in finals] == [whole["choices"][0]["finish_reason"]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert len({c["id"] for c in chunks}) == 1


def test_stream_without_include_usage_has_no_usage_chunk(client):
    chunks = stream_events(client, {"messages": USER, "seed": 1, "temperature": 1.0, "response_format": json_format(PERSON)})
    assert all(c["choices"] for c in chunks) and "usage" not in chunks[-1]


def test_stream_error_before_decoding_is_an_http_error(client):
    body = {"messages": USER, "stream": True, "response_format": json_format({"type": "array", "uniqueItems": True})}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_schema_keyword"


def test_stream_whose_budget_runs_out_ends_with_finish_reason_length(client):
    chunks = stream_events(client, {"messages": USER, "seed": 1, "temperature": 1.0, "response_format": json_format(PERSON), "max_tokens": 2,
                                    "stream_options": {"include_usage": True}})
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert not any("error" in c for c in chunks)
    finals = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finals == ["length"] and chunks[-1]["usage"]["completion_tokens"] == 2
    text = "".join(content_deltas(chunks))
    assert text.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_prompt_is_tokenized_once_and_counted(client, generator, monkeypatch):
    calls = []
    real = generator.prompt_ids

    def counting(*args, **kwargs):
        ids = real(*args, **kwargs)
        calls.append(len(ids))
        return ids

    monkeypatch.setattr(generator, "prompt_ids", counting)
    body = post(client, response_format=json_format(PERSON), temperature=1.0).json()
    assert calls == [body["usage"]["prompt_tokens"]] and calls[0] > 0


class RecordingGenerator:
    """Returns a fixed tool call; records the options and prompt of each run; has a tokenizer."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.runs = []

    def run(self, prompt, output_type, **options):
        self.runs.append((prompt, options))
        value = {"name": "add", "arguments": {"a": 1, "b": 2}}
        return SimpleNamespace(value=value, text=json.dumps(value), token_ids=[1] * 5, stats=DecodeStats(generated_tokens=5, stop_reason="eos"))


class ToolTemplateTokenizer:
    chat_template = "{% if tools %}{{ tools }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **kwargs):
        return "|".join(str(m.get("content")) for m in messages)


def test_tools_go_to_a_chat_template_that_renders_them():
    gen = RecordingGenerator(ToolTemplateTokenizer())
    with TestClient(create_app(gen)) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "tools": TOOLS, "tool_choice": "required"})
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "tool_calls"
    prompt, options = gen.runs[-1]
    assert [t["function"]["name"] for t in options["tools"]] == ["get_weather", "add"]
    assert prompt[0]["role"] == "system" and "get_weather" not in prompt[0]["content"]  # the template lists them
    gen = RecordingGenerator(SimpleNamespace(chat_template="{% for m in messages %}{{ m.content }}{% endfor %}"))
    with TestClient(create_app(gen)) as c:
        c.post("/v1/chat/completions", json={"messages": USER, "tools": TOOLS, "tool_choice": "required"})
    prompt, options = gen.runs[-1]
    assert "tools" not in options and "get_weather" in prompt[0]["content"]  # fallback: spelled in a system message


# -- queue and timeout, with a generator that blocks until released --------------------------


class BlockingGenerator:
    """Answers '{}' once ``release`` is set; counts the runs that started."""

    def __init__(self):
        self.release = threading.Event()
        self.started = 0

    def run(self, prompt, output_type, **options):
        self.started += 1
        self.release.wait(10)
        return SimpleNamespace(value={}, text="{}", token_ids=[1, 2], stats=DecodeStats(generated_tokens=2, stop_reason="eos"))


def _wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def test_queue_full_is_a_429():
    gen = BlockingGenerator()
    app = create_app(gen, ServerConfig(max_queue=1, request_timeout=20))
    body = {"messages": USER, "response_format": {"type": "json_object"}}
    with TestClient(app) as c:
        results = []
        threads = [threading.Thread(target=lambda: results.append(c.post("/v1/chat/completions", json=body))) for _ in range(2)]
        threads[0].start()
        _wait_for(lambda: gen.started == 1)
        threads[1].start()
        _wait_for(lambda: app.state.queue.pending == 2)  # one running, one waiting: the queue is full
        assert c.get("/health").json()["queue"]["waiting"] == 1
        r = c.post("/v1/chat/completions", json=body)
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full" and r.headers["retry-after"]
        gen.release.set()
        for t in threads:
            t.join(10)
        assert [x.status_code for x in results] == [200, 200]
        assert results[0].json()["choices"][0]["message"]["content"] == "{}"
        assert app.state.queue.pending == 0


def test_request_timeout_is_a_504_and_the_waiting_job_is_dropped():
    gen = BlockingGenerator()
    app = create_app(gen, ServerConfig(max_queue=4, request_timeout=0.3))
    body = {"messages": USER, "response_format": {"type": "json_object"}}
    with TestClient(app) as c:
        first = threading.Thread(target=lambda: c.post("/v1/chat/completions", json=body))
        first.start()
        _wait_for(lambda: gen.started == 1)
        r = c.post("/v1/chat/completions", json=body)  # waits behind the blocked one, then times out
        assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
        gen.release.set()
        first.join(10)
        _wait_for(lambda: app.state.queue.pending == 0)
        assert gen.started == 1  # the timed-out request never ran


class LoopingGenerator:
    """Commits a token every 10 ms for up to 10 s through on_tokens (or, ``via="step"``, reports
    its steps through on_step only, as an SMC request does: its particles' tokens are not
    streamed); counts the steps and records how it ended."""

    def __init__(self, via: str = "tokens"):
        self.ended = threading.Event()
        self.how = None
        self.steps = 0
        self.via = via

    def run(self, prompt, output_type, *, on_tokens=None, on_step=None, **options):
        try:
            for _ in range(1000):
                self.steps += 1
                if self.via == "tokens":
                    on_tokens([1])
                else:
                    on_step()
                time.sleep(0.01)
            self.how = "finished"
        except server.Cancelled:
            self.how = "cancelled"
            raise
        finally:
            self.ended.set()
        return SimpleNamespace(value={}, text="{}", token_ids=[1], stats=DecodeStats(generated_tokens=1, stop_reason="eos"))


def test_a_timed_out_running_generation_stops_at_its_next_step():
    gen = LoopingGenerator()
    app = create_app(gen, ServerConfig(request_timeout=0.3))
    with TestClient(app) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "response_format": {"type": "json_object"}})
        assert r.status_code == 504
        assert gen.ended.wait(3) and gen.how == "cancelled"
        _wait_for(lambda: app.state.queue.pending == 0)


# -- the serve entry point -------------------------------------------------------------------


def test_main_builds_the_generator_and_runs_uvicorn_on_loopback(monkeypatch):
    import uvicorn

    import constrained_spec.api as api

    made, ran = {}, {}

    class FakeGenerator:
        @classmethod
        def from_config(cls, models, decode, **kwargs):
            made.update(model=models.model, draft=models.draft, num_draft_tokens=decode.num_draft_tokens, **kwargs)
            return cls()

    monkeypatch.setattr(api, "Generator", FakeGenerator)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app, **kw))
    assert serve_cli.main(["--model", "m", "--draft", "none", "-k", "3", "--port", "8123", "--max-queue", "2"]) == 0
    assert made["model"] == "m" and made["draft"] is None and made["num_draft_tokens"] == 3
    assert ran["host"] == "127.0.0.1" and ran["port"] == 8123
    assert ran["app"].state.queue.max_queue == 2 and ran["app"].state.model_name == "m"


def test_serve_flags_become_one_server_config_for_local_and_ray(monkeypatch):
    """Every ``serve`` limit flag lands in its ServerConfig field (0 seconds: no limit), and ``--ray``
    hands the replicas the same config as plain values."""
    import constrained_spec.cli.ray_serve as ray_serve

    argv = ["--model", "some/dir/m", "--draft", "none", "--max-queue", "3", "--timeout", "7", "--max-tokens-limit", "9", "--api-key", "k",
            "--max-body-bytes", "11", "--max-schema-chars", "12", "--max-grammar-chars", "13", "--compile-threads", "4",
            "--max-compile-queue", "5", "--max-compiles-per-client", "6", "--compile-budget", "0", "--max-schema-properties", "14",
            "--body-timeout", "0", "--max-body-readers", "15"]
    config = serve_cli.server_config(serve_cli.build_parser().parse_args(argv))
    assert config == ServerConfig(model_name="some/dir/m", max_queue=3, request_timeout=7.0, max_tokens_limit=9, api_key="k", max_body_bytes=11,
                                  max_schema_chars=12, max_grammar_chars=13, compile_threads=4, max_compile_queue=5, max_compiles_per_client=6,
                                  compile_budget=None, max_schema_properties=14, body_timeout=None, max_body_readers=15)
    handed = {}
    monkeypatch.setattr(ray_serve, "run_ray", lambda args, options: handed.update(options) or 0)
    assert serve_cli.main(argv + ["--ray"]) == 0
    assert ServerConfig(**handed) == config


class ScriptedGenerator:
    """Returns a fixed value, as if the model had generated it."""

    def __init__(self, value):
        self.value = value

    def run(self, prompt, output_type, **options):
        text = json.dumps(self.value, separators=(",", ":"))
        return SimpleNamespace(value=self.value, text=text, token_ids=[1] * 5, stats=DecodeStats(generated_tokens=5, stop_reason="eos"))


def test_auto_text_branch_becomes_message_content():
    with TestClient(create_app(ScriptedGenerator({"content": "hello"}))) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "tools": TOOLS})
        choice = r.json()["choices"][0]
        assert choice["message"]["content"] == "hello" and "tool_calls" not in choice["message"]
        assert choice["finish_reason"] == "stop"
    with TestClient(create_app(ScriptedGenerator({"content": {"name": "Al", "age": 3}}))) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "tools": TOOLS, "response_format": json_format(PERSON)})
        assert json.loads(r.json()["choices"][0]["message"]["content"]) == {"name": "Al", "age": 3}


def test_parallel_tool_calls_come_back_as_several_entries():
    calls = {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": {"city": "Rome", "days": 1}}]}
    with TestClient(create_app(ScriptedGenerator(calls))) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": True})
        entries = r.json()["choices"][0]["message"]["tool_calls"]
        assert [e["function"]["name"] for e in entries] == ["add", "get_weather"] and len({e["id"] for e in entries}) == 2


# -- the server refuses what it cannot serve, in OpenAI's shapes --------


def assert_openai_error(r, status, code=None, param=None):
    """``r`` is an error of ``status`` in OpenAI's body shape; returns its error object."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str) and err["message"]
    assert "Traceback" not in r.text
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err
    return err


def asgi_post(app, parts, headers=(), disconnect_after=None, path="/v1/chat/completions"):
    """POST ``parts`` (body chunks) straight through ASGI; the receive may report a disconnect.
    Returns (status, body bytes, how many chunks the app pulled)."""
    import asyncio

    sent, pulled = [], [0]

    async def main():
        start = time.monotonic()

        async def receive():
            if pulled[0] < len(parts):
                pulled[0] += 1
                return {"type": "http.request", "body": parts[pulled[0] - 1], "more_body": pulled[0] < len(parts)}
            if disconnect_after is not None and time.monotonic() - start > disconnect_after:
                return {"type": "http.disconnect"}
            await asyncio.sleep(3600)  # nothing yet (a disconnect poll cancels this wait)

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
                 "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json"), *headers], "client": ("127.0.0.1", 1), "server": ("test", 80)}
        await app(scope, receive, send)

    asyncio.run(main())
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"), pulled[0]


def test_prefill_computes_the_head_for_the_last_position_only(gpt2_tokenizer):
    from tiny_models import tiny_llama

    from constrained_spec.models.torch.hf import HFModel

    model = tiny_llama(50257, 3)
    seen = []
    model.lm_head.register_forward_hook(lambda mod, args, out: seen.append(tuple(out.shape)))
    ids = gpt2_tokenizer("a prompt of some length, long enough to matter " * 4)["input_ids"]
    wrapped = HFModel(model)
    wrapped.prefill(ids[:-1])
    assert wrapped.length == len(ids) - 1 and seen == [(1, 1, 50257)]  # never [T, V]
    last = wrapped.extend(ids[-1:])[-1]
    reference = HFModel(tiny_llama(50257, 3)).extend(ids)[-1]  # an independent full forward
    assert torch.allclose(last, reference, atol=1e-4)


def test_api_key_is_required_when_set(monkeypatch):
    with TestClient(create_app(ScriptedGenerator({}), ServerConfig(api_key="s3cret"))) as c:
        body = {"messages": USER, "response_format": {"type": "json_object"}}
        assert_openai_error(c.post("/v1/chat/completions", json=body), 401, "invalid_api_key")
        r = c.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer wrong"})
        assert_openai_error(r, 401, "invalid_api_key")
        assert r.headers["www-authenticate"] == "Bearer"
        assert_openai_error(c.get("/v1/models"), 401, "invalid_api_key")
        assert c.get("/health").status_code == 200  # for load balancers
        ok = c.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "{}"
        assert c.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_serve_reads_the_api_key_from_the_environment(monkeypatch):
    import uvicorn

    from constrained_spec import api

    ran = {}
    monkeypatch.setattr(api, "Generator", SimpleNamespace(from_config=lambda *a, **k: ScriptedGenerator({})))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app))
    monkeypatch.setenv(server.API_KEY_ENV, "from-env")
    assert serve_cli.main(["--model", "m", "--draft", "none"]) == 0
    with TestClient(ran["app"]) as c:
        assert_openai_error(c.get("/v1/models"), 401)
        assert c.get("/v1/models", headers={"Authorization": "Bearer from-env"}).status_code == 200
    assert serve_cli.main(["--model", "m", "--draft", "none", "--api-key", "flag"]) == 0  # the flag wins
    with TestClient(ran["app"]) as c:
        assert c.get("/v1/models", headers={"Authorization": "Bearer flag"}).status_code == 200


def test_a_5_mb_body_is_a_413():
    gen = RecordingGenerator(None)
    with TestClient(create_app(gen)) as c:
        big = {"messages": [{"role": "user", "content": "x" * 5_000_000}]}
        err = assert_openai_error(c.post("/v1/chat/completions", json=big), 413, "request_too_large")
        assert str(server.MAX_BODY_BYTES) in err["message"]
    assert gen.runs == []


def test_a_chunked_body_over_the_cap_is_a_413_while_reading():
    gen = RecordingGenerator(None)
    app = create_app(gen, ServerConfig(max_body_bytes=100_000))
    parts = [b'{"messages": [{"role": "user", "content": "'] + [b"x" * 10_000] * 50 + [b'"}]}']  # no Content-Length
    status, body, pulled = asgi_post(app, parts)
    assert status == 413 and json.loads(body)["error"]["code"] == "request_too_large"
    assert pulled <= 12 < len(parts)  # refused as soon as the bytes read passed the cap
    assert gen.runs == []
    small = [b'{"messages": [{"role": "user", ', b'"content": "hi"}], "tools": ', json.dumps(TOOLS).encode(), b', "tool_choice": "required"}']
    status, body, _ = asgi_post(app, small)  # a chunked body under the cap is read whole
    assert status == 200, body


def test_a_5000_property_schema_is_a_400_fast(client):
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}
    start = time.monotonic()
    r = post(client, response_format=json_format(schema))
    assert time.monotonic() - start < 3.0
    err = assert_openai_error(r, 400, "schema_too_large", "response_format")
    assert str(server.MAX_SCHEMA_CHARS) in err["message"]


def test_schema_hint_in_the_prompt_is_bounded():
    from constrained_spec.api import SCHEMA_HINT_MAX_CHARS, schema_hint

    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}
    hint = schema_hint(schema)
    assert len(hint) < SCHEMA_HINT_MAX_CHARS + 200 < len(json.dumps(schema))
    assert "cut at" in hint
    assert schema_hint(PERSON).endswith(json.dumps(PERSON))  # small schemas are given whole


def test_compilation_past_its_cap_is_a_400_naming_the_cap(client, generator, monkeypatch):
    monkeypatch.setattr(generator.compiler, "max_regex_chars", 50)
    schema = {"type": "object", "properties": {"zz": {"type": "string", "maxLength": 3}}, "required": ["zz"], "additionalProperties": False}
    err = assert_openai_error(post(client, response_format=json_format(schema)), 400, "compile_limit")
    assert "cap of 50" in err["message"]


class SlowCompileGenerator(ScriptedGenerator):
    """compile() blocks on schemas with a 'slow' property until released; run() answers at once."""

    def __init__(self):
        super().__init__({})
        self.release = threading.Event()
        self.compiling = threading.Event()
        self.compile_threads = set()

    def compile(self, output_type):
        self.compile_threads.add(threading.current_thread().name)
        if isinstance(output_type, dict) and "slow" in output_type.get("properties", {}):
            self.compiling.set()
            self.release.wait(10)
        return SimpleNamespace(spec=output_type)


def test_a_slow_compile_holds_no_other_request():
    gen = SlowCompileGenerator()
    slow = {"messages": USER, "response_format": json_format({"type": "object", "properties": {"slow": {"type": "string"}}})}
    fast = {"messages": USER, "response_format": {"type": "json_object"}}
    with TestClient(create_app(gen)) as c:
        results = []
        t = threading.Thread(target=lambda: results.append(c.post("/v1/chat/completions", json=slow)))
        t.start()
        assert gen.compiling.wait(5)
        r = c.post("/v1/chat/completions", json=fast)  # served while the other compiles
        assert r.status_code == 200 and not results
        gen.release.set()
        t.join(10)
        assert results[0].status_code == 200
    assert all(name.startswith("constrained-spec-compile") for name in gen.compile_threads)


class ForwardCounter:
    """Counts every forward (extend / prefill / head variants) of a wrapped model."""

    def __init__(self, monkeypatch, model):
        self.calls = 0
        for attr in ("extend", "prefill", "extend_last", "extend_prefix_head"):
            real = getattr(model, attr, None)
            if real is not None:
                monkeypatch.setattr(model, attr, self._counting(real))

    def _counting(self, real):
        def wrapper(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)
        return wrapper


def test_a_prompt_over_the_context_is_a_400_before_any_forward(client, generator, gpt2_tokenizer, monkeypatch):
    target, draft = ForwardCounter(monkeypatch, generator.target), ForwardCounter(monkeypatch, generator.draft)
    limit = generator.context_length
    assert limit == 1024  # the tiny models' max_position_embeddings and GPT-2's model_max_length
    long = "hello world " * 1000
    assert len(gpt2_tokenizer(long)["input_ids"]) > limit
    err = assert_openai_error(post(client, messages=[{"role": "user", "content": long}]), 400, "context_length_exceeded", "messages")
    assert "1024" in err["message"]
    # a short prompt whose max_tokens would not fit either
    assert_openai_error(post(client, max_tokens=1020), 400, "context_length_exceeded")
    assert target.calls == 0 and draft.calls == 0
    from constrained_spec.errors import ContextLengthError

    with pytest.raises(ContextLengthError):
        generator.run(long, PERSON)
    assert target.calls == 0 and draft.calls == 0
    r = post(client, response_format=json_format(PERSON), max_tokens=50)  # one that fits runs
    assert r.status_code == 200 and target.calls > 0


@pytest.mark.parametrize("messages, param", [
    ([{"content": "hi"}], "messages[0].role"),
    ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": {"text": "hi"}}], "messages[0].content"),
    ([{"role": "user"}], "messages[0].content"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}], "messages[0].content[0]"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": "nope"}], "messages[1].tool_calls"),
    (["just a string"], "messages.0"),
])
def test_malformed_messages_are_400s(client, messages, param):
    assert_openai_error(post(client, messages=messages), 400, param=param)


def test_lone_surrogates_are_400s(client):
    for raw, param in ((b'{"messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages[0].content"),
                       ((b'{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", '
                         b'"json_schema": {"name": "x", "schema": {"const": "\\udfff"}}}}'), "response_format.json_schema.schema.const")):
        r = client.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
        assert_openai_error(r, 400, "invalid_text", param)


def test_framework_errors_have_openai_shape(client):
    r = client.post("/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert_openai_error(r, 400)
    assert_openai_error(post(client, temperature=5), 400, param="temperature")
    assert_openai_error(client.get("/v1/nothing-here"), 404)
    assert_openai_error(client.get("/v1/chat/completions"), 405)


class FailingGenerator:
    def run(self, prompt, output_type, **options):
        raise RuntimeError("secret-detail at /home/someone/file.py")


def test_unexpected_errors_are_500s_without_internals(monkeypatch):
    with TestClient(create_app(FailingGenerator()), raise_server_exceptions=False) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER})
        err = assert_openai_error(r, 500)
        assert err["type"] == "server_error" and "secret-detail" not in r.text
    monkeypatch.setattr(server_app, "usage", lambda result: 1 / 0)  # an error outside every handler's try
    with TestClient(create_app(ScriptedGenerator({})), raise_server_exceptions=False) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER})
        err = assert_openai_error(r, 500)
        assert "division" not in r.text


class RaisingGenerator:
    """Raises ``exc`` from ``run`` (or from ``compile``, with ``at="compile"``)."""

    def __init__(self, exc, at="run"):
        self.exc, self.at = exc, at

    def compile(self, output_type):
        if self.at == "compile":
            raise self.exc
        return SimpleNamespace(spec=output_type)

    def run(self, prompt, output_type, **options):
        raise self.exc


@pytest.mark.parametrize("at", ["run", "compile"])
@pytest.mark.parametrize("stream", [False, True])
def test_an_internal_value_error_is_a_500_not_a_400(at, stream, caplog):
    gen = RaisingGenerator(ValueError("secret-detail: bitmask shape (3, 7) does not match"), at)
    with caplog.at_level("ERROR", logger="constrained_spec.serving"):
        with TestClient(create_app(gen), raise_server_exceptions=False) as c:
            r = c.post("/v1/chat/completions", json={"messages": USER, "response_format": json_format(PERSON), "stream": stream})
    err = assert_openai_error(r, 500)
    assert err["type"] == "server_error" and err["param"] is None and err["code"] is None
    assert "secret-detail" not in r.text and "ValueError" not in r.text and "bitmask" not in r.text
    logged = [rec for rec in caplog.records if rec.exc_info and isinstance(rec.exc_info[1], ValueError)]
    assert logged and "secret-detail" in caplog.text  # the details go to the log, with the traceback


@pytest.mark.parametrize("at", ["run", "compile"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_schema_error_is_still_a_400(at, stream):
    from constrained_spec.errors import SchemaError

    gen = RaisingGenerator(SchemaError("'type' must be a string or an array", "/properties/age"), at)
    with TestClient(create_app(gen), raise_server_exceptions=False) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "response_format": json_format(PERSON), "stream": stream})
    err = assert_openai_error(r, 400, "invalid_schema", "response_format.json_schema.schema")
    assert err["type"] == "invalid_request_error" and "/properties/age" in err["message"]


@pytest.mark.parametrize("exc_name, status, code", [
    ("UnsupportedKeywordError", 400, "unsupported_schema_keyword"),
    ("EmptyLanguageError", 400, "empty_language"),
    ("CompileLimitError", 400, "compile_limit"),
    ("GrammarError", 400, "grammar_error"),
    ("OutputValidationError", 422, "output_validation_failed"),
    ("SamplingError", 500, "sampling_error"),
    ("NoParticleLeftError", 400, "no_particle_left"),
    ("ModelLoadError", 500, "model_error"),
    ("ConfigError", 400, "invalid_parameter"),
    ("ConstrainedSpecError", 400, "constraint_error"),
])
def test_project_errors_map_one_to_one_to_codes(exc_name, status, code):
    from constrained_spec import errors

    cls = getattr(errors, exc_name)
    exc = cls("uniqueItems") if cls is errors.UnsupportedKeywordError else cls("what went wrong")
    with TestClient(create_app(RaisingGenerator(exc)), raise_server_exceptions=False) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "response_format": json_format(PERSON)})
    err = assert_openai_error(r, status, code)
    assert err["type"] == ("server_error" if status == 500 else "output_validation_error" if status == 422 else "invalid_request_error")


@pytest.mark.parametrize("seed", [1 << 64, -(1 << 63) - 1])
def test_a_seed_out_of_range_is_a_400(seed):
    gen = RecordingGenerator(None)
    with TestClient(create_app(gen)) as c:
        assert_openai_error(c.post("/v1/chat/completions", json={"messages": USER, "seed": seed}), 400, param="seed")
        assert c.post("/v1/chat/completions", json={"messages": USER, "seed": (1 << 64) - 1}).status_code == 200
    assert len(gen.runs) == 1


def test_a_draft_length_beyond_the_cap_is_a_400():
    """A request's k is a cost (the verify forward grows with it): capped at config.MAX_DRAFT_TOKENS."""
    from constrained_spec.config import MAX_DRAFT_TOKENS

    gen = RecordingGenerator(None)
    with TestClient(create_app(gen)) as c:
        for k in (MAX_DRAFT_TOKENS + 1, 1 << 70):
            assert_openai_error(c.post("/v1/chat/completions", json={"messages": USER, "num_draft_tokens": k}), 400,
                                param="num_draft_tokens")
        assert c.post("/v1/chat/completions", json={"messages": USER, "num_draft_tokens": MAX_DRAFT_TOKENS}).status_code == 200
    assert len(gen.runs) == 1


def test_numbers_out_of_range_are_400s_not_500s():
    gen = RecordingGenerator(None)
    with TestClient(create_app(gen), raise_server_exceptions=False) as c:
        assert_openai_error(c.post("/v1/chat/completions", json={"messages": USER, "top_k": 1 << 63}), 400, param="top_k")
        for schema, param in (({"type": "number", "minimum": float("nan")}, "response_format.json_schema.schema.minimum"),
                              ({"const": float("inf")}, "response_format.json_schema.schema.const")):
            raw = json.dumps({"messages": USER, "response_format": json_format(schema)})  # NaN / Infinity: Python reads them
            r = c.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
            assert_openai_error(r, 400, "invalid_number", param)
    assert gen.runs == []


def test_unknown_model_is_a_404_and_models_by_id(client):
    assert_openai_error(post(client, model="gpt-4o"), 404, "model_not_found", "model")
    assert post(client, model="tiny", max_tokens=4).status_code == 200
    card = client.get("/v1/models/tiny").json()
    assert card["id"] == "tiny" and card["object"] == "model"
    assert_openai_error(client.get("/v1/models/gpt-4o"), 404, "model_not_found")


@pytest.mark.parametrize("field, value", [
    ("logit_bias", {"50256": -100}),
    ("functions", [{"name": "f", "parameters": {"type": "object"}}]),
    ("function_call", "auto"),
    ("logprobs", True),
    ("top_logprobs", 3),
    ("n", 2),
    ("audio", {"voice": "alloy", "format": "wav"}),
    ("modalities", ["text", "audio"]),
    ("prediction", {"type": "content", "content": "x"}),
    ("reasoning_effort", "low"),
    ("presence_penalty", 0.5),
    ("stop", ["\n"]),
    ("no_such_field", 1),
])
def test_unsupported_fields_are_refused_by_name(field, value):
    gen = RecordingGenerator(None)
    with TestClient(create_app(gen)) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, field: value})
        err = assert_openai_error(r, 400, param=field)
        assert field in err["message"]
    assert gen.runs == []


def test_harmless_fields_are_accepted():
    with TestClient(create_app(ScriptedGenerator({}))) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "user": "u1", "metadata": {"a": "b"}, "store": False,
                                                 "logit_bias": {}, "logprobs": False, "n": 1, "modalities": ["text"]})
        assert r.status_code == 200, r.text


def test_parallel_tool_calls_defaults_to_true():
    gen = RecordingGenerator(None)
    seen = []
    real_run = gen.run
    gen.run = lambda prompt, output_type, **options: (seen.append(output_type), real_run(prompt, output_type, **options))[1]
    with TestClient(create_app(gen)) as c:
        for extra in ({}, {"parallel_tool_calls": False}):
            c.post("/v1/chat/completions", json={"messages": USER, "tools": TOOLS, "tool_choice": "required", **extra})
    default, single = seen
    assert "tool_calls" in default["properties"] and default["properties"]["tool_calls"]["type"] == "array"
    assert "tool_calls" not in json.dumps(single)


def test_a_client_that_disconnects_cancels_its_generation():
    gen = LoopingGenerator()
    app = create_app(gen)
    body = json.dumps({"messages": USER, "response_format": {"type": "json_object"}}).encode()
    start = time.monotonic()
    status, _, _ = asgi_post(app, [body], disconnect_after=0.3)
    assert gen.ended.wait(5) and gen.how == "cancelled"
    assert gen.steps < 200 and time.monotonic() - start < 5  # stopped within steps of the disconnect, not after 1000
    assert status == 499


def test_official_openai_client(generator):
    openai = pytest.importorskip("openai", reason="the openai package is not installed")
    with TestClient(create_app(generator, ServerConfig(model_name="tiny", api_key="k"))) as http:
        client = openai.OpenAI(api_key="k", base_url="http://testserver/v1", http_client=http, max_retries=0)
        done = client.chat.completions.create(model="tiny", messages=USER, response_format=json_format(PERSON), seed=1, temperature=1.0)
        jsonschema.validate(json.loads(done.choices[0].message.content), PERSON)
        assert done.choices[0].finish_reason == "stop" and done.usage.completion_tokens > 0
        calls: dict[int, dict] = {}
        for event in client.chat.completions.create(model="tiny", messages=USER, tools=TOOLS, tool_choice="required", seed=2,
                                                    temperature=1.0, stream=True):
            for d in event.choices[0].delta.tool_calls or [] if event.choices else []:
                entry = calls.setdefault(d.index, {"name": d.function.name, "arguments": ""})
                entry["arguments"] += d.function.arguments or ""
        assert calls and all(jsonschema.validate(json.loads(c["arguments"]), PARAMS[c["name"]]) is None for c in calls.values())
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="gpt-4o", messages=USER)
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(model="tiny", messages=USER, logit_bias={"1": 5})
        assert info.value.body["param"] == "logit_bias"
        assert client.models.retrieve("tiny").id == "tiny"
        bad = openai.OpenAI(api_key="wrong", base_url="http://testserver/v1", http_client=http, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()


@pytest.mark.parametrize("value", [
    {"name": "add", "arguments": {"a": 1, "b": 2}},
    {"arguments": {"a": 1, "b": [1, {"x": "}\"]"}]}, "name": "add"},
    {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": {"city": "R\"o{m}e", "days": 1}}]},
    {"name": "x", "arguments": {}},
    {"content": "hello \"world\" \u00e9"},
])
@pytest.mark.parametrize("dump", [json.dumps, lambda v: json.dumps(v, separators=(",", ":")), lambda v: json.dumps(v, indent=2)])
@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_tool_call_stream_reads_calls_in_any_layout(value, dump, piece):
    from constrained_spec.tools import ToolCallStream, partial_json_string

    text = dump(value)
    stream, streamed = ToolCallStream(), {}
    names = {}
    for i in range(0, len(text), piece):
        for kind, index, payload in stream.push(text[i:i + piece]):
            if kind == "name":
                assert index not in names and index not in streamed  # the name comes before any argument piece
                names[index] = payload
            else:
                streamed[index] = streamed.get(index, "") + payload
    expected = value.get("tool_calls") or ([value] if "name" in value else [])
    assert [(n, json.loads(a)) for n, a in stream.calls] == [(c["name"], c["arguments"]) for c in expected]
    assert [streamed.get(i, "") for i in range(len(expected))] == [a for _, a in stream.calls]
    assert names == {i: c["name"] for i, c in enumerate(expected)}
    if "content" in value:
        assert json.loads(stream.content) == value["content"]
        raw = json.dumps(value["content"])
        for cut in range(len(raw)):  # any cut of the string decodes to a prefix of the text
            assert value["content"].startswith(partial_json_string(raw[:cut]))



def test_a_timed_out_generation_that_streams_nothing_stops_at_its_next_step():
    gen = LoopingGenerator(via="step")
    app = create_app(gen, ServerConfig(request_timeout=0.3))
    with TestClient(app) as c:
        r = c.post("/v1/chat/completions", json={"messages": USER, "response_format": {"type": "json_object"}})
        assert r.status_code == 504
        assert gen.ended.wait(3) and gen.how == "cancelled" and gen.steps < 500
        _wait_for(lambda: app.state.queue.pending == 0)
