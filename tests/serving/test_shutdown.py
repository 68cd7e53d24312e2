"""Shutdown with requests in flight: a request whose handler is cancelled (what uvicorn does to the
requests still running when its graceful-shutdown timeout ends) stops at its next step and frees its
batch rows, a plain row and an SMC request's particles alike; the scheduler's shutdown cancels what
still runs and waits for it; SIGTERM to ``constrained-spec serve`` during a long request exits within
the shutdown timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from constrained_spec.serving.scheduler import Scheduler  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LONG = r"[ab]{400}"  # every token a forward: a request that runs for as long as its steps are slowed


class Slowed:
    """``generator`` whose runs pause ``pause`` seconds at each step (a long request on tiny models)."""

    def __init__(self, generator: Any, pause: float = 0.1) -> None:
        self.generator, self.batch, self.pause = generator, generator.batch, pause
        self.started = threading.Event()
        self.runs_ended = 0

    def run(self, prompt: Any, output_type: Any, on_step: Any = None, **options: Any) -> Any:
        def step() -> None:
            self.started.set()
            time.sleep(self.pause)
            if on_step is not None:
                on_step()

        try:
            return self.generator.run(prompt, output_type, on_step=step, **options)
        finally:
            self.runs_ended += 1


def _rows_free(batch: Any) -> bool:
    return batch.active_rows == 0 and len(batch._free) == batch.slots


@pytest.fixture(scope="module", params=["torch", "llamacpp"])
def batched(request, tiny_generator, gpt2_tokenizer, tmp_path_factory):
    """A Generator with 4 batch rows over tiny random models, on each runtime."""
    if request.param == "torch":
        return tiny_generator(max_new_tokens=400, num_draft_tokens=2, max_batch_size=4)
    from constrained_spec.api import Generator

    target, draft = (str(p) for p in request.getfixturevalue("tiny_ggufs"))
    return Generator(target, draft, runtime="llamacpp", tokenizer=gpt2_tokenizer, progress=False, cache_dir=tmp_path_factory.mktemp("cache"),
                     draft_plan="always", max_new_tokens=400, num_draft_tokens=2, max_batch_size=4, batch_max_tokens=512, prefix_cache_mb=16)


@pytest.mark.parametrize("options", [{"temperature": 0.0}, {"temperature": 1.0, "seed": 3, "alignment": "smc", "particles": 3}],
                         ids=["row", "smc-particles"])
def test_a_cancelled_request_frees_its_rows_at_its_next_step(batched, options) -> None:
    """The handler's task is cancelled mid-generation: the generation stops within a step or two
    (not after its 400 tokens), every batch slot is free again, and the freed rows serve the next
    request (its output in the language: ``re.fullmatch``)."""
    import re

    from constrained_spec.grammar import Regex

    slowed = Slowed(batched)
    scheduler = Scheduler(slowed, max_queue=4, request_timeout=600.0)

    async def scenario() -> float:
        cancel = threading.Event()
        task = asyncio.ensure_future(scheduler.generate("Answer.", Regex(LONG), dict(options, max_new_tokens=400), cancel, None))
        while not slowed.started.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert not _rows_free(batched.batch)  # the request holds its rows now
        task.cancel()  # what uvicorn does once its graceful-shutdown timeout ends
        t0 = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        while slowed.runs_ended == 0 and time.monotonic() - t0 < 15:
            await asyncio.sleep(0.01)
        return time.monotonic() - t0

    try:
        stopped_in = asyncio.run(scenario())
    finally:
        scheduler.shutdown()
    assert slowed.runs_ended == 1 and stopped_in < 2.0, f"the generation ran on for {stopped_in:.1f} s after its request was cancelled"
    assert _rows_free(batched.batch)
    assert scheduler.queue.running == 0 and scheduler.queue.pending == 0
    after = batched.run("Again.", Regex("[ab]{6}c"), max_new_tokens=20, **{k: v for k, v in options.items() if k != "max_new_tokens"})
    assert re.fullmatch("[ab]{6}c", after.text) and _rows_free(batched.batch)


def test_scheduler_shutdown_cancels_running_generations_and_waits(batched) -> None:
    """At the app's shutdown, generations still running (a stream's, whose handler is gone) are
    cancelled and waited for: when ``shutdown`` returns, the rows are free."""
    from constrained_spec.grammar import Regex

    slowed = Slowed(batched)
    scheduler = Scheduler(slowed, max_queue=4, request_timeout=600.0)

    async def scenario() -> None:
        cancel = threading.Event()
        scheduler.spawn(scheduler.generate("Answer.", Regex(LONG), {"temperature": 0.0, "max_new_tokens": 400}, cancel, None))
        while not slowed.started.is_set():
            await asyncio.sleep(0.01)
        t0 = time.monotonic()
        scheduler.shutdown()
        assert time.monotonic() - t0 < 5.0
        assert slowed.runs_ended == 1 and _rows_free(batched.batch)

    asyncio.run(scenario())


# ----------------------------------------------------------------------------- the real server, SIGTERM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_sigterm_with_requests_in_flight_exits_within_the_shutdown_timeout(model_dirs, tmp_path: Path) -> None:
    """``constrained-spec serve`` on tiny models, two batch rows decoding and 40 requests queued
    (about half a minute of work: the tiny models' context holds ~1000 tokens, so many requests make
    a long one); SIGTERM once the rows run: the server stops within ``--shutdown-timeout`` plus a
    few seconds, by the signal (uvicorn re-raises it once shut down), its log saying it cancelled
    the requests, and the cancelled requests answered 503 (uvicorn's bare 500 before). Before the
    timeout existed it waited for every request to finish."""
    import httpx

    port = _free_port()
    shutdown_timeout = 1.0
    env = {**os.environ, "CONSTRAINED_SPEC_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "constrained_spec.cli", "serve", "--model", model_dirs[0], "--draft", model_dirs[1],
           "--port", str(port), "--max-batch-size", "2", "--max-queue", "40", "--shutdown-timeout", str(shutdown_timeout), "--dtype", "fp32"]
    log_path = tmp_path / "server.log"  # a file, not a pipe: 40 cancelled requests' tracebacks would fill a pipe and block the server
    with log_path.open("w") as log_file:
        server = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
            assert server.poll() is None, log_path.read_text()
        body = {"messages": [{"role": "user", "content": "Go."}], "temperature": 0.0, "max_tokens": 1000, "guided_regex": "[ab]*"}
        statuses: list[int] = []

        def client() -> None:
            try:
                statuses.append(httpx.post(f"{base}/v1/chat/completions", json=body, timeout=300).status_code)
            except httpx.HTTPError:
                statuses.append(0)

        for _ in range(42):
            threading.Thread(target=client, daemon=True).start()
        while time.monotonic() < deadline:
            queue = httpx.get(f"{base}/health", timeout=5).json()["queue"]
            if queue["running"] == 2 and queue["waiting"] >= 30:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the requests never filled the queue: {queue}")
        t0 = time.monotonic()
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=120)
        took = time.monotonic() - t0
    finally:
        if server.poll() is None:
            server.kill()
    log = log_path.read_text()
    assert code in (0, -signal.SIGTERM), log[-3000:]
    print(f"stopped {took:.1f} s after SIGTERM; {statuses.count(200)} of 42 answered 200")
    assert took < shutdown_timeout + 8, f"took {took:.1f} s to stop with {len(statuses)} of 42 answered\n{log[-3000:]}"
    assert "timeout graceful shutdown exceeded" in log  # uvicorn cancelled the requests left
    assert statuses.count(200) < 30  # most were still queued: cancelled, not drained
    deadline = time.monotonic() + 10
    while len(statuses) < 42 and time.monotonic() < deadline:
        time.sleep(0.1)
    # the cancelled ones are told so (503 server_shutting_down), not answered uvicorn's bare 500 with a traceback logged
    assert statuses.count(503) >= 10 and 500 not in statuses, sorted(statuses)
    assert "Exception in ASGI application" not in log, log[-3000:]


# ----------------------------------------------------------------------------- cancelled at shutdown: 503, not uvicorn's 500


def _cancel_mid_request(app: Any) -> tuple[list[dict], BaseException | None]:
    """Run ``app`` on one request, cancel its task once it waits (what uvicorn does when the
    graceful-shutdown timeout ends); the messages it sent, and what the task raised."""
    sent: list[dict] = []

    async def receive() -> dict:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    async def scenario() -> BaseException | None:
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
        task = asyncio.ensure_future(app(scope, receive, send))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            await task
        except BaseException as exc:  # noqa: BLE001 - what the task ended with is the result
            return exc
        return None

    return sent, asyncio.run(scenario())


def _hanging_app(stream_first: bool) -> Any:
    async def app(scope: dict, receive: Any, send: Any) -> None:
        if stream_first:
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
            await send({"type": "http.response.body", "body": b'data: {"id": "x"}\n\n', "more_body": True})
        await asyncio.sleep(3600)  # a generation still running

    return app


def test_a_request_cancelled_before_answering_gets_a_503_in_openais_shape() -> None:
    """The middleware answers 503 ``server_shutting_down`` with Retry-After and OpenAI's error
    body, and the task ends quietly; without it (the control) the cancellation reaches uvicorn,
    which logs a traceback and answers 500."""
    import json

    from constrained_spec.serving.stopping import CancelledAsStopping

    sent, raised = _cancel_mid_request(CancelledAsStopping(_hanging_app(False)))
    assert raised is None
    start, body = sent
    assert start["status"] == 503 and (b"retry-after", b"1") in start["headers"]
    error = json.loads(body["body"])["error"]
    assert error["code"] == "server_shutting_down" and error["type"] == "server_error" and "shutting down" in error["message"]
    sent, raised = _cancel_mid_request(_hanging_app(False))  # control: the bare app
    assert isinstance(raised, asyncio.CancelledError) and sent == []


def test_a_stream_cancelled_midway_ends_with_the_error_event() -> None:
    """A stream under way when cancelled gets the 503's error body as its last event, then its end."""
    import json

    from constrained_spec.serving.stopping import CancelledAsStopping

    sent, raised = _cancel_mid_request(CancelledAsStopping(_hanging_app(True)))
    assert raised is None
    assert [m["type"] for m in sent] == ["http.response.start"] + ["http.response.body"] * 3
    last_event = sent[2]["body"]
    assert last_event.startswith(b"data: ") and json.loads(last_event[6:])["error"]["code"] == "server_shutting_down"
    assert sent[3] == {"type": "http.response.body", "body": b""}
