"""The server as a Ray Serve application on a local Ray: two replicas of tiny random Llamas saved to
disk (the model_dirs fixture), official ``openai`` clients, a replica killed by Ray's API.

Marked ``ray`` (not in the default run; ``pytest -m ray``); skipped when ray is not installed.
Every client call has a bounded timeout and every thread a bounded join: a hang is a failure.
Values are judged by ``jsonschema``, never by the server's own validation.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import pytest

pytestmark = pytest.mark.ray
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
ray: Any = None  # imported by the `served` fixture: collecting this module in the default run (where it is deselected) costs no Ray import
serve: Any = None

from constrained_spec.serving.ray_app import ATTEMPTS_HEADER, CACHE_HEADER, REPLICA_HEADER, RayServeOptions, ReplicaOptions, build_app  # noqa: E402

log = logging.getLogger("test_ray")
APP = "cs-test"
TIMEOUT = 60.0  # seconds any one client call may take


def schema(n: int) -> dict:
    """Distinct small schemas (distinct constraints): an object with a bounded integer and a short string."""
    return {"type": "object", "properties": {f"k{n}": {"type": "integer", "minimum": 0, "maximum": 50 + n}, "s": {"type": "string", "maxLength": 6}},
            "required": [f"k{n}", "s"], "additionalProperties": False}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(model_dirs, tmp_path_factory):
    """A local Ray (2 logical CPUs), Serve on a free port, the application with two replicas."""
    global ray, serve
    ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'constrained-spec[ray]'")
    serve = pytest.importorskip("ray.serve", reason="ray[serve] is not installed: pip install 'constrained-spec[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    replica = ReplicaOptions(model=model_dirs[0], draft=model_dirs[1], dtype="fp32", cache_dir=str(tmp_path_factory.mktemp("ray-cache")),
                             num_draft_tokens=3, max_new_tokens=60, app_options={"model_name": "tiny", "request_timeout": 60.0})
    deploy = RayServeOptions(replicas=2, num_cpus_per_replica=0.5, max_ongoing_requests=4, max_queued_requests=8, graceful_shutdown_timeout_s=10)
    started = time.time()
    serve.run(build_app(replica, deploy), name=APP, route_prefix="/")
    log.info("two replicas ready in %.1f s", time.time() - started)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def client(url: str):
    return openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=TIMEOUT)


def ask(c, n: int, seed: int):
    """One constrained request; (status, replica id, cache header, attempts, parsed value or error body)."""
    fmt = {"type": "json_schema", "json_schema": {"name": f"s{n}", "schema": schema(n), "strict": True}}
    try:
        raw = c.chat.completions.with_raw_response.create(model="tiny", messages=[{"role": "user", "content": "Give me a record."}],
                                                          response_format=fmt, max_tokens=40, seed=seed)
    except openai.APIStatusError as exc:
        return exc.status_code, exc.response.headers.get(REPLICA_HEADER), None, exc.response.headers.get(ATTEMPTS_HEADER), exc.response.json()
    completion = raw.parse()
    choice = completion.choices[0]
    value = json.loads(choice.message.content) if choice.finish_reason == "stop" else None
    return raw.http_response.status_code, raw.headers.get(REPLICA_HEADER), raw.headers.get(CACHE_HEADER), raw.headers.get(ATTEMPTS_HEADER), value


def test_twenty_requests_from_four_clients_spread_over_both_replicas(served):
    def worker(w: int) -> list:
        c = client(served)
        return [(n, ask(c, n, seed=100 * w + i)) for i, n in enumerate(range(w, w + 5))]  # 5 requests, 8 distinct schemas over the 4

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(worker, w) for w in range(4)]
        results = [r for f in futures for r in f.result(timeout=180)]
    assert len(results) == 20
    replicas = set()
    for n, (status, replica, _, _, value) in results:
        assert status == 200, value
        assert value is not None, "a complete value within max_tokens"
        jsonschema.validate(value, schema(n))
        replicas.add(replica)
    assert len(replicas) == 2 and None not in replicas, replicas


def test_same_schema_goes_to_the_replica_that_compiled_it(served):
    """Three fresh schemas, each asked three times in a row: every repeat lands on the replica that
    served (compiled) the first, which reports a cache hit. Random routing passes with p = 1/64."""
    c = client(served)
    for n in (101, 102, 103):
        first = ask(c, n, seed=1)
        assert first[0] == 200 and first[2] == "miss", first
        time.sleep(1.5)  # the replica advertises the constraint to Serve's routers (pushed every ~0.1 s, then broadcast)
        for seed in (2, 3):
            again = ask(c, n, seed=seed)
            assert again[0] == 200 and again[1] == first[1] and again[2] == "hit", (first, again)
    stats = httpx.get(served + "/ray/replica", timeout=TIMEOUT).json()
    assert stats["constraint_hits"] >= 1 and stats["replica_id"]


def test_all_replicas_busy_is_a_clear_503_never_a_hang(served):
    """2 replicas x 4 ongoing + 8 queued = 16 places: a burst of 40 gets OpenAI-shaped 503s for the rest."""
    fmt = {"type": "json_schema", "json_schema": {"name": "b", "schema": schema(7)}}
    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "response_format": fmt, "max_tokens": 40}

    def post(i: int):
        r = httpx.post(served + "/v1/chat/completions", json={**body, "seed": i}, timeout=TIMEOUT)
        return r.status_code, r.json()

    started = time.time()
    with ThreadPoolExecutor(40) as pool:
        answers = list(pool.map(post, range(40), timeout=120))
    codes = [status for status, _ in answers]
    assert set(codes) <= {200, 503}, codes
    busy = [b for s, b in answers if s == 503]
    assert busy, "some of the burst must be refused"
    assert all(b["error"]["code"] == "all_replicas_busy" and b["error"]["message"] for b in busy)
    for status, b in answers:
        if status == 200 and b["choices"][0]["finish_reason"] == "stop":
            jsonschema.validate(json.loads(b["choices"][0]["message"]["content"]), schema(7))
    log.info("burst of 40: %d answered, %d busy (503) in %.1f s", codes.count(200), len(busy), time.time() - started)


def replica_actor_names(url: str, within_s: float = 90.0) -> dict[str, str]:
    """replica id -> Ray actor name, asked of the replicas through the gateway until both have
    answered. The router sends each probe to the less loaded replica, so right after the burst
    test one replica still working off its queue can miss 20 quick probes in a row (a CI run saw
    that): probe until both answer or ``within_s`` runs out, pausing between probes."""
    names: dict[str, str] = {}
    deadline = time.time() + within_s
    while len(names) < 2 and time.time() < deadline:
        stats = httpx.get(url + "/ray/replica", timeout=TIMEOUT).json()
        names[stats["replica_id"]] = stats["actor_name"]
        if len(names) < 2:
            time.sleep(0.25)
    return names


def running_replicas() -> int:
    status = serve.status().applications[APP].deployments["ConstrainedSpecReplica"]
    return status.replica_states.get("RUNNING", 0)


def test_killed_replica_is_replaced_and_nothing_hangs(served):
    names = replica_actor_names(served)
    assert len(names) == 2, names
    results: list = []
    stop = threading.Event()

    def load(w: int) -> None:
        c = client(served)
        i = 0
        while not stop.is_set() and i < 30:
            n = 200 + (w * 7 + i) % 6
            results.append((time.time(), n, ask(c, n, seed=i)))
            i += 1

    threads = [threading.Thread(target=load, args=(w,), daemon=True) for w in range(4)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    # A long stream is surely in flight when its replica (named in its response headers, which come
    # first) is killed: the kill always hits a request, whatever the other clients' timing.
    long_fmt = {"type": "json_schema", "json_schema": {"name": "long", "strict": True, "schema": {
        "type": "object", "properties": {"s": {"type": "string", "minLength": 300, "maxLength": 400}}, "required": ["s"]}}}
    raw = client(served).chat.completions.with_raw_response.create(
        model="tiny", messages=[{"role": "user", "content": "A long record."}], response_format=long_fmt, max_tokens=600, stream=True)
    victim = raw.headers.get(REPLICA_HEADER)
    assert victim in names, (victim, names)
    chunks = iter(raw.parse())
    first = next(chunks)  # the stream has started on the victim
    killed_at = time.time()
    ray.kill(ray.get_actor(names[victim], namespace="serve"), no_restart=True)
    log.info("killed replica %s (%s) at +%.1f s with %d requests answered and a stream in flight", victim, names[victim],
             killed_at - results[0][0] if results else 0.0, len(results))
    stream_error = None
    try:
        finish = [c.choices[0].finish_reason for c in [first, *chunks] if c.choices]
    except openai.APIError as exc:  # the cut stream ends with a clear error event
        stream_error = exc
    else:
        assert "stop" not in finish, "a stream cut by its replica's death must not claim a finished answer"
    log.info("the stream in flight on the killed replica ended with %r", stream_error)
    time.sleep(3.0)
    stop.set()
    for t in threads:
        t.join(timeout=TIMEOUT + 10)
        assert not t.is_alive(), "a client hung"

    retried = failed = 0
    for _, n, (status, _, _, attempts, value) in results:
        if status == 200:
            if value is not None:
                jsonschema.validate(value, schema(n))
            retried += attempts == "2"
        else:  # a clear OpenAI-shaped error, not a hang or a bare 500
            assert status == 503 and value["error"]["code"] in ("replica_failed", "all_replicas_busy"), (status, value)
            failed += 1
    log.info("under the kill: %d requests, %d retried on the other replica, %d clear 503s", len(results), retried, failed)

    deadline, live = time.time() + 90, {}
    while time.time() < deadline:  # Serve's status may still count the dead one: ask the replicas themselves
        live = replica_actor_names(served, within_s=10.0)
        if len(live) == 2 and victim not in live:
            break
        time.sleep(1.0)
    assert len(live) == 2 and victim not in live, f"Serve did not replace the killed replica within 90 s: {live}"
    assert running_replicas() == 2
    log.info("two live replicas (%s) answering again %.1f s after the kill", ", ".join(sorted(live)), time.time() - killed_at)

    c = client(served)
    after = [ask(c, 300 + i % 3, seed=i) for i in range(8)]
    assert all(a[0] == 200 and a[1] in live for a in after), after
    for i, a in enumerate(after):
        if a[4] is not None:
            jsonschema.validate(a[4], schema(300 + i % 3))


def test_a_huge_body_is_refused_by_the_gateway_before_it_is_buffered(served):
    """The gateway reads bodies to key them: the server's body cap (413, OpenAI's error shape) comes first."""
    body = b'{"model": "tiny", "messages": [{"role": "user", "content": "' + b"x" * (2 << 20) + b'"}]}'
    r = httpx.post(served + "/v1/chat/completions", content=body, headers={"content-type": "application/json"}, timeout=TIMEOUT)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large", r.text[:300]
    assert REPLICA_HEADER not in r.headers  # refused at the gateway: no replica saw it
    chunked = httpx.post(served + "/v1/chat/completions", content=iter([body[i : i + 65536] for i in range(0, len(body), 65536)]),
                         headers={"content-type": "application/json"}, timeout=TIMEOUT)
    assert chunked.status_code == 413, chunked.text[:300]
