"""Adversarial requests against the server: no single request may stall it or hold what it should not.

Compiles are admitted (a bounded queue, a budget, a cache in front, abandoned ones stopped), a
body must arrive in bounded time from a bounded number of senders, credentials are never
ambiguous, a client that leaves mid-body counts as 499, and ``/health`` shows no path. Each test
is bounded in time; each failed before the fix (checked on 2026-12-02 against main at 834b68a).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402
from live_server import port_of, serving  # noqa: E402

from constrained_spec.engine.stats import DecodeStats  # noqa: E402
from constrained_spec.serving.app import ServerConfig, create_app  # noqa: E402

USER = [{"role": "user", "content": "hi"}]


def schema_body(*names: str) -> dict:
    schema = {"type": "object", "properties": {n: {"type": "integer"} for n in names}, "required": list(names)}
    return {"messages": USER, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}


def assert_openai_error(r, status, code):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"] == code, err
    return err


class SpinCompileGenerator:
    """compile() of a schema with a property starting 'spin' runs (in short sleeps, so it can be
    stopped) until ``release`` is set or ``spin_seconds`` pass; counts compiles per schema and
    records how each spinning compile ended. run() answers '{}' at once."""

    def __init__(self, spin_seconds: float = 6.0, swallow: int = 0):
        self.spin_seconds = spin_seconds
        self.swallow = swallow  # interrupts swallowed first, as a weakref callback run by gc swallows one
        self.release = threading.Event()
        self.spinning = 0
        self.compiles: dict[str, int] = {}
        self.ended: list[str] = []
        self.lock = threading.Lock()

    def compile(self, output_type):
        names = sorted((output_type or {}).get("properties", {})) if isinstance(output_type, dict) else []
        key = ",".join(names)
        with self.lock:
            self.compiles[key] = self.compiles.get(key, 0) + 1
        if any(n.startswith("spin") for n in names):
            with self.lock:
                self.spinning += 1
            end = time.monotonic() + self.spin_seconds
            try:
                while time.monotonic() < end and not self.release.is_set():
                    try:
                        time.sleep(0.005)
                    except BaseException:
                        if self.swallow <= 0:
                            raise
                        self.swallow -= 1  # "Exception ignored in ...": the compile runs on
                how = "finished"
            except BaseException as exc:
                how = type(exc).__name__
                raise
            finally:
                with self.lock:
                    self.spinning -= 1
                    self.ended.append(locals().get("how", "?"))
        return SimpleNamespace(spec=output_type)

    def run(self, prompt, output_type, **options):
        return SimpleNamespace(value={}, text="{}", token_ids=[1, 2], stats=DecodeStats(generated_tokens=2, stop_reason="eos"))


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def background_post(client, body, results):
    t = threading.Thread(target=lambda: results.append(client.post("/v1/chat/completions", json=body)), daemon=True)
    t.start()
    return t


# -- item 2: compiles are admitted ------------------------------------------------------------


def test_a_cached_schema_never_waits_behind_compiles():
    gen = SpinCompileGenerator()
    with TestClient(create_app(gen, ServerConfig(compile_threads=2))) as c:
        assert c.post("/v1/chat/completions", json=schema_body("a")).status_code == 200  # compiled once, cached
        results: list = []
        threads = [background_post(c, schema_body(f"spin{i}"), results) for i in range(4)]  # both threads busy, two waiting
        wait_for(lambda: gen.spinning == 2)
        start = time.monotonic()
        r = c.post("/v1/chat/completions", json=schema_body("a"))
        elapsed = time.monotonic() - start
        assert r.status_code == 200 and elapsed < 1.5, elapsed
        assert gen.compiles["a"] == 1  # answered from the cache, not compiled again
        gen.release.set()
        for t in threads:
            t.join(10)
        assert [x.status_code for x in results] == [200] * 4


def test_a_full_compile_queue_is_a_429_with_retry_after():
    gen = SpinCompileGenerator()
    app = create_app(gen, ServerConfig(compile_threads=1, max_compile_queue=1))
    with TestClient(app) as c:
        results: list = []
        threads = [background_post(c, schema_body("spin1"), results)]
        wait_for(lambda: gen.spinning == 1)
        threads.append(background_post(c, schema_body("spin2"), results))  # waits for the thread
        time.sleep(0.3)
        r = c.post("/v1/chat/completions", json=schema_body("spin3"))
        assert_openai_error(r, 429, "compile_queue_full")
        assert r.headers["retry-after"] and r.json()["error"]["type"] == "rate_limit_error"
        threads.append(background_post(c, schema_body("spin1"), results))  # the same schema joins its compile: no 429
        time.sleep(0.3)
        gen.release.set()
        for t in threads:
            t.join(10)
        assert [x.status_code for x in results] == [200, 200, 200]
    assert "spin3" not in gen.compiles and gen.compiles["spin1"] == 1


def test_one_client_cannot_take_the_whole_compile_queue():
    from constrained_spec.serving.compiles import CompileAdmission
    from constrained_spec.serving.errors import api_error
    from constrained_spec.serving.refusals import ClientCompilesFull

    release = threading.Event()

    def slow():
        while not release.is_set():
            time.sleep(0.005)
        return "done"

    async def main():
        admission = CompileAdmission(threads=4, max_waiting=8, per_client=2)
        first = [asyncio.ensure_future(admission.compile(f"k{i}", slow, client="10.0.0.1")) for i in range(2)]
        await asyncio.sleep(0.1)
        with pytest.raises(ClientCompilesFull) as info:
            await admission.compile("k2", slow, client="10.0.0.1")
        other = asyncio.ensure_future(admission.compile("k3", slow, client="10.0.0.2"))  # another client is admitted
        joined = asyncio.ensure_future(admission.compile("k0", slow, client="10.0.0.1"))  # joining a compile costs nothing more
        await asyncio.sleep(0.1)
        assert admission.running == 3 and not joined.done()
        release.set()
        assert await asyncio.gather(*first, other, joined) == ["done"] * 4
        assert admission.by_client == {}
        return info.value

    refused = asyncio.run(asyncio.wait_for(main(), 10))
    error = api_error(refused)
    assert (error.status, error.code, error.type) == (429, "too_many_compiles", "rate_limit_error")


def test_a_compile_past_its_budget_is_stopped_and_answered_with_a_400():
    gen = SpinCompileGenerator(spin_seconds=6.0)
    app = create_app(gen, ServerConfig(compile_budget=0.5))
    with TestClient(app) as c:
        start = time.monotonic()
        r = c.post("/v1/chat/completions", json=schema_body("spin"))
        elapsed = time.monotonic() - start
        err = assert_openai_error(r, 400, "compile_limit")
        assert "compile budget of 0.5 s" in err["message"] and elapsed < 3.0, elapsed
        wait_for(lambda: gen.ended == ["CompileInterrupted"], timeout=3)  # stopped in its thread, not left to run
        wait_for(lambda: app.state.compiles.running == 0, timeout=3)
        assert c.post("/v1/chat/completions", json=schema_body("a")).status_code == 200  # its slot is free


@pytest.mark.parametrize("again", [True, False], ids=["raised-again", "control-once-only"])
def test_an_interrupt_that_a_callback_swallows_is_raised_again(again, monkeypatch):
    """The soak saw CompileInterrupted land in a WeakKeyDictionary callback, which CPython
    ignores: the compile ran on. With two interrupts swallowed it is still stopped within a second
    or so, not left to spin; the control raises it once only (as before) and the compile runs to
    its own end."""
    from constrained_spec.serving import compiles

    if not again:
        monkeypatch.setattr(compiles, "REINTERRUPT_TRIES", 0)
    gen = SpinCompileGenerator(spin_seconds=2.5, swallow=2)
    with TestClient(create_app(gen, ServerConfig(compile_budget=0.3))) as c:
        start = time.monotonic()
        c.post("/v1/chat/completions", json=schema_body("spin"))
        wait_for(lambda: gen.ended, timeout=5)
        took = time.monotonic() - start
    if again:
        assert gen.ended == ["CompileInterrupted"] and gen.swallow == 0 and took < 2.0, (gen.ended, took)
    else:
        assert gen.ended == ["finished"] and gen.swallow == 1 and took >= 2.5, (gen.ended, took)


def test_an_abandoned_compile_is_stopped_and_frees_its_slot():
    gen = SpinCompileGenerator(spin_seconds=6.0)
    app = create_app(gen, ServerConfig(compile_threads=1))
    status: list[int] = []
    body = json.dumps(schema_body("spin")).encode()
    t = threading.Thread(target=lambda: status.append(asgi_post(app, [body], disconnect_after=0.3)), daemon=True)
    start = time.monotonic()
    t.start()
    wait_for(lambda: gen.ended == ["CompileInterrupted"], timeout=4)
    assert time.monotonic() - start < 3.0
    t.join(5)
    assert status == [499]
    wait_for(lambda: app.state.compiles.running == 0 and app.state.compiles.waiting == 0, timeout=3)
    gen.release.set()
    with TestClient(app) as c:  # the same schema again compiles afresh, not joined to the stopped compile
        assert c.post("/v1/chat/completions", json=schema_body("spin")).status_code == 200


def test_the_2000_property_schema_fails_fast_before_any_compile():
    gen = SpinCompileGenerator()
    schema = {"type": "object", "properties": {f"p{i}": {} for i in range(2000)}}  # 20,922 characters: under the size cap
    with TestClient(create_app(gen)) as c:
        start = time.monotonic()
        r = c.post("/v1/chat/completions", json={"messages": USER, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        err = assert_openai_error(r, 400, "compile_limit")
        assert time.monotonic() - start < 2.0 and "2000 properties" in err["message"]
        assert err["param"] == "response_format"
    assert gen.compiles == {}


@pytest.mark.slow
def test_the_2000_property_schema_is_refused_fast_by_the_real_compiler_too(tiny_generator):
    schema = {"type": "object", "properties": {f"p{i}": {} for i in range(2000)}}
    with TestClient(create_app(tiny_generator(max_new_tokens=20))) as c:
        start = time.monotonic()
        r = c.post("/v1/chat/completions", json={"messages": USER, "response_format": {
            "type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        assert_openai_error(r, 400, "compile_limit")
        assert time.monotonic() - start < 3.0


# -- item 5: freed memory goes back -----------------------------------------------------------


def test_freed_memory_is_given_back_once_the_server_is_idle():
    from constrained_spec.serving.memory import trim_memory

    if not trim_memory():
        pytest.skip("no malloc_trim here (not glibc)")
    app = create_app(SpinCompileGenerator(), ServerConfig(trim_interval=0.2))
    with TestClient(app) as c:
        time.sleep(0.5)
        assert app.state.trimmer.trims == 0  # nothing served yet: nothing to give back
        assert c.post("/v1/chat/completions", json=schema_body("a")).status_code == 200
        wait_for(lambda: app.state.trimmer.trims == 1, timeout=3)
        time.sleep(0.5)
        assert app.state.trimmer.trims == 1  # idle since: once


# -- item 3: a body arrives in bounded time, from a bounded number of senders ----------------


def open_body(port: int, declared: int, sent: int) -> socket.socket:
    """A connection that sent the headers and ``sent`` of ``declared`` body bytes, then nothing."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              + f"Content-Length: {declared}\r\n\r\n".encode())
    s.sendall(b"x" * sent)
    return s


def read_answer(s: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection (or ``timeout``)."""
    s.settimeout(timeout)
    out = b""
    with contextlib.suppress(socket.timeout):
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_a_body_that_stops_arriving_is_a_408_and_the_connection_closes():
    app = create_app(SpinCompileGenerator(), ServerConfig(body_timeout=1.0))
    pytest.importorskip("uvicorn")
    with serving(app) as url:
        port = port_of(url)
        start = time.monotonic()
        s = open_body(port, 1_048_576, 1_048_000)
        try:
            answer = read_answer(s, timeout=6.0)
        finally:
            s.close()
        elapsed = time.monotonic() - start
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert elapsed < 5.0, elapsed
        body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == "request_timeout" and "1 s" in body["error"]["message"]
        assert 'constrained_spec_requests_total{status="408"} 1.0' in app.state.metrics.render().decode()


def test_bodies_read_at_once_are_bounded_with_a_429():
    app = create_app(SpinCompileGenerator(), ServerConfig(body_timeout=5.0, max_body_readers=2))
    pytest.importorskip("uvicorn")
    with serving(app) as url:
        port = port_of(url)
        slow = [open_body(port, 1000, 10) for _ in range(2)]
        try:
            time.sleep(0.3)
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            body = json.dumps({"messages": USER}).encode()
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            answer = read_answer(s, timeout=4.0)
            s.close()
            assert answer.startswith(b"HTTP/1.1 429"), answer[:200]
            assert b"retry-after: 1" in answer.lower() and b"too_many_uploads" in answer
        finally:
            for c in slow:
                c.close()
        wait_for(lambda: all(m.readers == 0 for m in guards(app)), timeout=5)  # the slow senders' slots come back


def guards(app):
    """The Guard middleware instances of a started app."""
    from constrained_spec.serving.limits import Guard

    found, node = [], app.middleware_stack
    while node is not None:
        if isinstance(node, Guard):
            found.append(node)
        node = getattr(node, "app", None)
    return found


# -- item 4: credentials, the 499, /health -----------------------------------------------------


@pytest.mark.parametrize("order", [("wrong", "k"), ("k", "wrong"), ("k", "k")])
def test_two_authorization_headers_are_a_401(order):
    with TestClient(create_app(SpinCompileGenerator(), ServerConfig(api_key="k"))) as c:
        headers = [("Authorization", f"Bearer {key}") for key in order]
        r = c.post("/v1/chat/completions", json={"messages": USER}, headers=headers)
        err = assert_openai_error(r, 401, "invalid_api_key")
        assert "Authorization" in err["message"]
        assert c.post("/v1/chat/completions", json={"messages": USER}, headers={"Authorization": "Bearer k"}).status_code == 200


def asgi_post(app, parts, disconnect_after=None, more_body_last=False):
    """POST body ``parts`` straight through ASGI (lifespan not run); after them the receive reports
    a disconnect once ``disconnect_after`` seconds have passed. Returns the status sent (0: none)."""
    sent: list[dict] = []

    async def main():
        start = time.monotonic()
        pulled = 0

        async def receive():
            nonlocal pulled
            if pulled < len(parts):
                pulled += 1
                return {"type": "http.request", "body": parts[pulled - 1], "more_body": pulled < len(parts) or more_body_last}
            if disconnect_after is not None:
                left = disconnect_after - (time.monotonic() - start)
                if left <= 0:  # answered at once: a poll (Request.is_disconnected) cancels a receive that waits
                    return {"type": "http.disconnect"}
                await asyncio.sleep(left)
                return {"type": "http.disconnect"}
            await asyncio.sleep(3600)

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
                 "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1), "server": ("test", 80)}
        await app(scope, receive, send)

    asyncio.run(main())
    return next((m["status"] for m in sent if m["type"] == "http.response.start"), 0)


def test_a_client_that_leaves_mid_body_counts_as_499():
    app = create_app(SpinCompileGenerator())
    body = json.dumps({"messages": USER}).encode()
    for _ in range(3):
        assert asgi_post(app, [body[:10]], disconnect_after=0.05, more_body_last=True) == 0  # nobody to answer
    text = app.state.metrics.render().decode()
    assert 'constrained_spec_requests_total{status="499"} 3.0' in text
    assert 'status="500"' not in text


def test_health_shows_the_model_id_not_its_path(tmp_path):
    folder = tmp_path / "models" / "tiny-target"
    folder.mkdir(parents=True)
    gen = SpinCompileGenerator()
    gen.target = SimpleNamespace(name_or_path=str(folder))
    with TestClient(create_app(gen)) as c:
        health = c.get("/health")
        assert health.json()["model"] == "tiny-target" and str(tmp_path) not in health.text
        assert c.get("/v1/models").json()["data"][0]["id"] == "tiny-target"
    from constrained_spec.serving.app import public_model_id

    assert public_model_id(str(folder)) == "tiny-target" and public_model_id(str(folder) + "/") == "tiny-target"
    assert public_model_id("Qwen/Qwen2.5-Coder-1.5B-Instruct") == "Qwen/Qwen2.5-Coder-1.5B-Instruct"  # a hub id stays
    assert public_model_id("qwen2.5-coder-1.5b") == "qwen2.5-coder-1.5b"


def test_serve_reports_a_local_model_by_its_folder_name(monkeypatch, tmp_path):
    import uvicorn

    from constrained_spec import api
    from constrained_spec.cli import serve as serve_cli

    folder = tmp_path / "tiny1"
    folder.mkdir()
    ran: dict = {}
    monkeypatch.setattr(api, "Generator", SimpleNamespace(from_config=lambda *a, **k: SpinCompileGenerator()))
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app))
    assert serve_cli.main(["--model", str(folder), "--draft", "none"]) == 0
    assert ran["app"].state.model_name == "tiny1"


MMAP_PROBE = r"""
import ctypes, sys
from constrained_spec.serving.memory import pin_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "pin":
    assert pin_mmap_threshold()
libc.free(libc.malloc(8 << 20))  # an 8 MiB block, mapped and freed: glibc's threshold moves up to it
before = libc.mallinfo2().hblks
block = libc.malloc(1 << 20)      # 1 MiB: its own mapping only while the threshold stays low
print(libc.mallinfo2().hblks - before)
libc.free(block)
"""


def test_a_pinned_mmap_threshold_keeps_mid_sized_blocks_out_of_the_arenas():
    """What the soak's flat RSS rests on: once a large block is freed, glibc moves its mmap threshold
    up and later MiB-sized blocks fragment the arenas; pinned, they keep their own mappings. The
    control (not pinned) shows the move, read from glibc's own ``mallinfo2``."""
    import subprocess
    import sys

    from constrained_spec.serving.memory import trim_memory

    if not trim_memory():
        pytest.skip("not glibc")

    def mapped_blocks(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", MMAP_PROBE, mode], capture_output=True, text=True, timeout=60)
        if "mallinfo2" in out.stderr:
            pytest.skip("glibc before 2.33 (no mallinfo2)")
        assert out.returncode == 0, out.stderr
        return int(out.stdout.strip())

    assert mapped_blocks("pin") == 1
    assert mapped_blocks("control") == 0  # the dynamic threshold the pin prevents


def test_the_app_pins_the_mmap_threshold_while_it_runs(monkeypatch):
    from constrained_spec.serving import app as app_module

    pinned: list[int] = []
    monkeypatch.setattr(app_module, "pin_mmap_threshold", lambda n: pinned.append(n) or True)
    with TestClient(create_app(SpinCompileGenerator(), ServerConfig(mmap_threshold=256 * 1024))):
        pass
    with TestClient(create_app(SpinCompileGenerator(), ServerConfig(mmap_threshold=None))):
        pass
    assert pinned == [256 * 1024]  # the configured value, and nothing where the config says None
