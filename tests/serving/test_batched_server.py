"""The server on the continuous-batching core: concurrent clients over a real socket (uvicorn on a
free port, httpx clients on threads) against a Generator with ``max_batch_size=4``.

Oracles: jsonschema for every output; for greedy requests, the one-at-a-time server (a Generator
without a batch, same tiny weights) answering the same requests serially; the coordinator's own
counters for "rows really ran together"; prometheus-client's parser for ``/metrics``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any, Iterator

import jsonschema
import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
parser = pytest.importorskip("prometheus_client.parser")

from fastapi.testclient import TestClient  # noqa: E402
from live_server import serving  # noqa: E402

from constrained_spec.serving.app import ServerConfig, create_app  # noqa: E402

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
ITEMS = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 2, "maxItems": 5},
                   "ok": {"type": "boolean"}},
    "required": ["items", "ok"],
    "additionalProperties": False,
}
SLOTS = 4
CLIENTS = 8


def json_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}}


def body_for(i: int, stream: bool) -> dict:
    """Client ``i``'s request: its own prompt, one of two schemas, greedy."""
    schema = PERSON if i % 2 == 0 else ITEMS
    return {"messages": [{"role": "user", "content": f"Record number {i} of the list, please."}], "response_format": json_format(schema),
            "temperature": 0.0, "max_tokens": 120, "stream": stream}


@pytest.fixture(scope="module")
def batched(tiny_generator):
    return tiny_generator(max_new_tokens=200, num_draft_tokens=3, max_batch_size=SLOTS, batch_max_tokens=1024, prefix_cache_mb=64)


@pytest.fixture(scope="module")
def reference_outputs(tiny_generator):
    """Each client's greedy content from today's server: one generation at a time, no batch."""
    app = create_app(tiny_generator(max_new_tokens=200, num_draft_tokens=3), ServerConfig(model_name="tiny"))
    with TestClient(app) as c:
        return [c.post("/v1/chat/completions", json=body_for(i, False)).json()["choices"][0]["message"]["content"] for i in range(CLIENTS)]


def sse_events(lines: Iterator[str]) -> list[Any]:
    """The JSON payloads of an SSE stream, then the string ``[DONE]``."""
    events: list[Any] = []
    for line in lines:
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def streamed_content(events: list[Any]) -> str:
    """The content deltas joined, after checking the stream's shape: role first, one finish, [DONE] last."""
    assert events[-1] == "[DONE]" and events[0]["choices"][0]["delta"]["role"] == "assistant"
    finishes = [e["choices"][0]["finish_reason"] for e in events[:-1] if e["choices"] and e["choices"][0]["finish_reason"]]
    assert finishes == ["stop"], events
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1] if e["choices"])


def metric_samples(text: str) -> dict[tuple[str, tuple], float]:
    """``/metrics`` parsed by prometheus-client: (sample name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parser.text_string_to_metric_families(text) for s in f.samples}


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_eight_concurrent_clients_are_batched_and_all_answered(batched, reference_outputs):
    app = create_app(batched, ServerConfig(model_name="tiny", max_queue=CLIENTS))
    assert app.state.queue.workers == SLOTS
    before = dict(batched.batch.metrics.rows_per_forward)
    results: dict[int, Any] = {}
    gate = threading.Barrier(CLIENTS)

    def client(i: int, url: str) -> None:
        gate.wait()
        try:
            with httpx.Client(base_url=url, timeout=60) as http:
                if i % 2:  # odd clients stream
                    with http.stream("POST", "/v1/chat/completions", json=body_for(i, True)) as r:
                        assert r.status_code == 200
                        results[i] = ("stream", sse_events(r.iter_lines()))
                else:
                    r = http.post("/v1/chat/completions", json=body_for(i, False))
                    results[i] = ("json", r.status_code, r.json())
        except Exception as exc:  # noqa: BLE001 - reported below, per client
            results[i] = ("failed", repr(exc))

    with serving(app, lifespan="on") as url:
        threads = [threading.Thread(target=client, args=(i, url)) for i in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        metrics = metric_samples(httpx.get(url + "/metrics").text)

    assert sorted(results) == list(range(CLIENTS)), "a request was lost"
    for i, answer in results.items():
        assert answer[0] != "failed", (i, answer)
        if answer[0] == "stream":
            content = streamed_content(answer[1])
        else:
            assert answer[1] == 200, answer
            content = answer[2]["choices"][0]["message"]["content"]
        jsonschema.validate(json.loads(content), PERSON if i % 2 == 0 else ITEMS)
        assert content == reference_outputs[i], i  # greedy: the same as the one-at-a-time server, chunks in order
    rows = {k: v - before.get(k, 0) for k, v in batched.batch.metrics.rows_per_forward.items()}
    assert any(k > 1 and v > 0 for k, v in rows.items()), rows  # rows really shared forwards
    assert batched.batch.active_rows == 0

    assert metrics[("constrained_spec_requests_total", (("status", "200"),))] == CLIENTS
    assert metrics[("constrained_spec_generations_total", (("outcome", "stop"),))] == CLIENTS
    assert metrics[("constrained_spec_request_duration_seconds_count", ())] == CLIENTS
    assert metrics[("constrained_spec_compile_duration_seconds_count", ())] == CLIENTS
    assert metrics[("constrained_spec_requests_running", ())] == 0 and metrics[("constrained_spec_requests_waiting", ())] == 0
    assert metrics[("constrained_spec_batch_slots", ())] == SLOTS
    generated = sum(len(batched.tokenizer.encode(c)) for c in reference_outputs)
    assert metrics[("constrained_spec_generated_tokens_total", ())] >= generated * 0.5  # EOS excluded; token split may differ from re-encoding
    drafted, accepted = metrics[("constrained_spec_drafted_tokens_total", ())], metrics[("constrained_spec_accepted_tokens_total", ())]
    assert drafted > 0 and metrics[("constrained_spec_acceptance_rate", ())] == pytest.approx(accepted / drafted)
    assert metrics[("constrained_spec_batch_rows_per_forward_count", ())] == sum(batched.batch.metrics.rows_per_forward.values())
    assert metrics[("constrained_spec_batch_rows_per_forward_bucket", (("le", "1.0"),))] < metrics[("constrained_spec_batch_rows_per_forward_count", ())]
    assert metrics[("constrained_spec_prefill_tokens_total", ())] > 0
    assert metrics[("constrained_spec_kv_cache_bytes", ())] == sum(m.cache_bytes for m in batched.batch.models.values()) > 0


LONG = {"structured_outputs": {"regex": "[a-z]{600}"}}


def test_a_cancelled_stream_frees_its_row(batched):
    app = create_app(batched, ServerConfig(model_name="tiny", max_queue=4))
    with serving(app, lifespan="on") as url, httpx.Client(base_url=url, timeout=30) as http:
        body = {"messages": [{"role": "user", "content": "Letters."}], "temperature": 0.0, "max_tokens": 800, "stream": True, **LONG}
        with http.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if '"content": "' in line and '"content": ""' not in line:
                    break  # the first letters arrived: hang up
        wait_for(lambda: batched.batch.active_rows == 0)
        wait_for(lambda: app.state.queue.pending == 0)
        cancelled = ("constrained_spec_generations_total", (("outcome", "cancelled"),))
        # the outcome is counted when the generation's task ends on the loop, a moment after its row is freed
        wait_for(lambda: metric_samples(http.get("/metrics").text).get(cancelled) == 1)
        metrics = metric_samples(http.get("/metrics").text)
        assert metrics[cancelled] == 1
        assert ("constrained_spec_generations_total", (("outcome", "stop"),)) not in metrics
        r = http.post("/v1/chat/completions", json={**body, "stream": False})  # the freed slot serves the same request in full
        assert r.status_code == 200, r.text
        assert re.fullmatch("[a-z]{600}", r.json()["choices"][0]["message"]["content"])
        assert metrics[("constrained_spec_generated_tokens_total", ())] < r.json()["usage"]["completion_tokens"]  # it stopped early


class HeldGenerator:
    """The batched generator, each run held until ``release`` is set (counts runs started)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.release = threading.Event()
        self.started = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.started += 1
        assert self.release.wait(20)
        return self.inner.run(*args, **kwargs)


def test_the_queue_bound_counts_beyond_the_running_rows(batched):
    gen = HeldGenerator(batched)
    app = create_app(gen, ServerConfig(model_name="tiny", max_queue=1, request_timeout=30))
    queue = app.state.queue
    results: list[Any] = []
    with serving(app, lifespan="on") as url, httpx.Client(base_url=url, timeout=30) as http:
        def client(i: int) -> None:
            with httpx.Client(base_url=url, timeout=30) as own:
                results.append(own.post("/v1/chat/completions", json=body_for(i, False)))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(SLOTS + 1)]
        for t in threads[:SLOTS]:
            t.start()
        wait_for(lambda: gen.started == SLOTS)  # every slot's worker took one
        threads[SLOTS].start()
        wait_for(lambda: queue.waiting == 1)
        assert queue.running == SLOTS and queue.pending == SLOTS + 1
        health = http.get("/health").json()["queue"]
        assert (health["running"], health["waiting"]) == (SLOTS, 1)
        held = metric_samples(http.get("/metrics").text)
        assert held[("constrained_spec_requests_running", ())] == SLOTS and held[("constrained_spec_requests_waiting", ())] == 1
        r = http.post("/v1/chat/completions", json=body_for(0, False))
        assert r.status_code == 429 and r.json()["error"]["code"] == "queue_full"
        gen.release.set()
        for t in threads:
            t.join(30)
        metrics = metric_samples(http.get("/metrics").text)
    assert sorted(r.status_code for r in results) == [200] * (SLOTS + 1)
    for i, r in enumerate(results):
        content = r.json()["choices"][0]["message"]["content"]
        assert any(_valid(json.loads(content), s) for s in (PERSON, ITEMS)), content
    assert queue.pending == 0 and batched.batch.active_rows == 0
    assert metrics[("constrained_spec_requests_total", (("status", "429"),))] == 1
    assert metrics[("constrained_spec_requests_total", (("status", "200"),))] == SLOTS + 1
    assert metrics[("constrained_spec_generations_total", (("outcome", "rejected"),))] == 1


def _valid(value: Any, schema: dict) -> bool:
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def test_metrics_needs_the_api_key_and_each_app_has_its_own_registry(batched):
    a = create_app(batched, ServerConfig(model_name="tiny", api_key="k"))
    b = create_app(batched, ServerConfig(model_name="tiny"))  # a second app in the same process: no duplicate registration
    with TestClient(a) as ca, TestClient(b) as cb:
        assert ca.get("/metrics").status_code == 401
        assert ca.get("/health").status_code == 200
        r = ca.get("/metrics", headers={"Authorization": "Bearer k"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert ca.post("/v1/chat/completions", json=body_for(0, False)).status_code == 401
        a_metrics = metric_samples(ca.get("/metrics", headers={"Authorization": "Bearer k"}).text)
        b_metrics = metric_samples(cb.get("/metrics").text)
    assert a_metrics[("constrained_spec_requests_total", (("status", "401"),))] == 1
    assert ("constrained_spec_requests_total", (("status", "401"),)) not in b_metrics


def test_serve_passes_the_batch_options(monkeypatch):
    import constrained_spec.api as api
    from constrained_spec.cli import serve as serve_cli

    made: dict[str, Any] = {}

    class FakeGenerator:
        @classmethod
        def from_config(cls, models, decode, **kwargs):
            made.update(kwargs)
            return cls()

    monkeypatch.setattr(api, "Generator", FakeGenerator)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    assert serve_cli.main(["--model", "m", "--draft", "none"]) == 0
    assert (made["max_batch_size"], made["batch_max_tokens"], made["prefix_cache_mb"]) == (serve_cli.DEFAULT_MAX_BATCH_SIZE, 4096, 1024)
    assert serve_cli.main(["--model", "m", "--max-batch-size", "3", "--batch-max-tokens", "2048", "--prefix-cache-mb", "0"]) == 0
    assert (made["max_batch_size"], made["batch_max_tokens"], made["prefix_cache_mb"]) == (3, 2048, 0)
