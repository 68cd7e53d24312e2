"""A soak: a bounded loop of mixed traffic against a server this script starts on 127.0.0.1.

``python -m benchmarks.soak`` starts ``constrained-spec``'s server in a child process (the tiny
random models the tests use, unless ``--model`` names one; ``--runtime llamacpp``: the tests' tiny
GGUF pair on llama.cpp), then sends it, from ``--clients``
threads, a mix of requests for ``--minutes`` (default 30):

* JSON Schema replies (a few fixed schemas, and fresh ones that miss every cache), tools,
  free text, streamed replies, now and then a schema that is slow to compile (a peak of memory);
* clients that disconnect mid-stream and mid-body;
* bad input: malformed JSON, an unsupported keyword, a schema over the size cap, a wrong field.

Every minute (``--report-every``) it prints the requests served, the answers by status code,
p50/p95 latency of that interval, and the server's RSS (``/proc/PID/status``); at the end the RSS
of minute 5 (or the first report) against the last one. ``--json FILE`` writes every report.
``--tracemalloc`` makes the server trace Python allocations and write the 25 largest growths
between the first report and each later one to ``<out>/tracemalloc-*.txt`` (a leak in Python
objects shows there; RSS growth that does not is the allocator's).

All traffic goes to 127.0.0.1; nothing else is contacted. The figures depend on the machine
(the server shares its cores with the clients): keep ``--clients`` modest on a small machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
ORDER = {"type": "object", "properties": {
    "id": {"type": "string", "pattern": "^ORD-[0-9]{4}$"},
    "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string", "maxLength": 6},
                                                                      "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
                                         "required": ["sku", "qty"], "additionalProperties": False}, "maxItems": 3},
    "express": {"type": "boolean"}}, "required": ["id", "items"], "additionalProperties": False}
ENUM = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "number"}}, "required": ["color"]}
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["a", "b"], "additionalProperties": False}}}]
USER = [{"role": "user", "content": "Answer in JSON."}]


def json_format(schema: dict, name: str = "soak") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def fresh_schema(rng: random.Random) -> dict:
    """A small schema no earlier request used (a compile-cache miss every time)."""
    names = [f"k{rng.randrange(10**9)}" for _ in range(rng.randint(1, 3))]
    return {"type": "object", "properties": {n: {"type": rng.choice(["integer", "boolean"])} for n in names}, "required": names,
            "additionalProperties": False}


# -- the server, in a child process ---------------------------------------------------------


def serve_child(args: argparse.Namespace) -> None:
    """The child: build the generator, create the app, run uvicorn on 127.0.0.1:port."""
    import logging

    import uvicorn

    from constrained_spec.serving import ServerConfig, create_app

    if args.model:
        from constrained_spec import Generator

        generator = Generator(args.model, None if args.draft in (None, "none") else args.draft, progress=False, runtime=args.runtime,
                              max_batch_size=args.max_batch_size, max_new_tokens=64, prefix_cache_mb=args.prefix_cache_mb)
    elif args.runtime == "llamacpp":
        generator = tiny_gguf_generator(args)
    else:
        sys.path.insert(0, str(ROOT / "examples"))
        from _models import make_generator  # type: ignore[import-not-found]

        generator = make_generator(argparse.Namespace(tiny=True), max_new_tokens=64, max_batch_size=args.max_batch_size,
                                   prefix_cache_mb=args.prefix_cache_mb)
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(10)  # after the models are built: what serving allocates
        snapshots: list[Any] = []

        def dump(*_: Any) -> None:
            snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
            if not snapshots:
                snapshots.append(snap)
                return
            stats = snap.compare_to(snapshots[0], "traceback")
            total = sum(s.size_diff for s in stats)
            path = Path(args.out) / f"tracemalloc-{int(time.time())}.txt"
            with open(path, "w") as fh:
                fh.write(f"traced now {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB; growth since the first snapshot "
                         f"{total / 2**20:+.1f} MiB\n")
                for stat in stats[:25]:
                    fh.write(f"{stat.size_diff / 2**20:+.2f} MiB, {stat.count_diff:+d} blocks\n")
                    fh.write("\n".join("    " + line for line in stat.traceback.format()[-6:]) + "\n")

        signal.signal(signal.SIGUSR1, dump)
    options: dict[str, Any] = {} if args.trim_interval is None else {"trim_interval": args.trim_interval or None}
    if args.mmap_threshold is not None:
        options["mmap_threshold"] = args.mmap_threshold or None
    app = create_app(generator, ServerConfig(model_name="soak", max_queue=args.max_queue, request_timeout=60.0, **options))
    logging.getLogger("constrained_spec").setLevel(logging.CRITICAL)  # 500s are counted by the client, not logged here
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="critical")


def tiny_gguf_generator(args: argparse.Namespace) -> Any:
    """The tests' tiny random GGUF pair (``tests/tiny_gguf.py``: GPT-2's vocabulary, float32) on the
    llama.cpp runtime, written to a temporary folder."""
    import tempfile

    from transformers import AutoTokenizer

    from constrained_spec import Generator
    from constrained_spec.models.store.tokenizer_assets import ensure_vocab_tokenizer

    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_gguf import write_tiny_gguf  # type: ignore[import-not-found]

    folder = Path(tempfile.mkdtemp(prefix="constrained-spec-soak-"))
    target, draft = write_tiny_gguf(folder / "target.gguf", seed=1), write_tiny_gguf(folder / "draft.gguf", seed=2, logit_scale=0.5)
    tokenizer = AutoTokenizer.from_pretrained(str(ensure_vocab_tokenizer("gpt-2")))
    return Generator(str(target), str(draft), runtime="llamacpp", tokenizer=tokenizer, progress=False, cache_dir=folder / "cache",
                     max_new_tokens=64, max_batch_size=args.max_batch_size, prefix_cache_mb=args.prefix_cache_mb)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prefix_cache_mib(port: int) -> float:
    """MiB the server's prefix caches hold (``/metrics``' ``prefix_cache_bytes``, all models); 0 where unreadable."""
    import httpx

    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    except httpx.HTTPError:
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("constrained_spec_prefix_cache_bytes{")) / 2**20


def rss_mib(pid: int) -> float:
    """The resident set of process ``pid`` in MiB (0 where /proc cannot tell)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# -- the clients ------------------------------------------------------------------------------


class Stats:
    """Answers by status (or a connection error), and latencies, per interval and in all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.codes: Counter[str] = Counter()
        self.total: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.served = 0

    def add(self, code: str, seconds: float) -> None:
        with self.lock:
            self.codes[code] += 1
            self.total[code] += 1
            self.served += 1
            self.latencies.append(seconds)

    def take(self) -> tuple[Counter[str], list[float]]:
        with self.lock:
            codes, lat = self.codes, self.latencies
            self.codes, self.latencies = Counter(), []
            return codes, lat


def request(port: int, body: bytes | None, *, path: str = "/v1/chat/completions", stream: bool = False,
            leave_after: int | None = None, timeout: float = 120.0) -> str:
    """POST ``body``; the status as a string ('disconnected' where the client left on purpose)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if stream and leave_after is not None and r.status == 200:
            for _ in range(leave_after):
                if not r.readline():
                    break
            return "disconnected"
        r.read()
        return str(r.status)
    finally:
        conn.close()


def leave_mid_body(port: int) -> str:
    """Send headers and half a body, then close: the server must count a 499 and hold nothing."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        body = json.dumps({"messages": USER}).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body) + 100}\r\n\r\n".encode() + body[: len(body) // 2])
        time.sleep(0.05)
    return "disconnected"


def one_request(port: int, rng: random.Random, heavy_share: float) -> str:
    kinds = ["schema", "fresh", "tools", "text", "stream", "leave_stream", "leave_body", "bad"]
    weights = [30, 10, 10, 10, 15, 8, 5, 12]
    kind = rng.choices(kinds + ["heavy"], weights=[w * (1 - heavy_share) for w in weights] + [100 * heavy_share])[0]
    base: dict[str, Any] = {"messages": USER, "seed": rng.randrange(1000), "temperature": 1.0, "max_tokens": 48}
    if kind == "schema":
        body = {**base, "response_format": json_format(rng.choice([PERSON, ORDER, ENUM]))}
    elif kind == "fresh":
        body = {**base, "response_format": json_format(fresh_schema(rng))}
    elif kind == "tools":
        body = {**base, "tools": TOOLS, "tool_choice": "required"}
    elif kind == "text":
        body = {**base, "max_tokens": 16}
    elif kind in ("stream", "leave_stream"):
        body = {**base, "stream": True, "response_format": json_format(rng.choice([PERSON, ORDER]))}
        return request(port, json.dumps(body).encode(), stream=True, leave_after=2 if kind == "leave_stream" else None)
    elif kind == "heavy":  # a schema that is slow to compile (hundreds of optional properties): a peak of memory
        names = [f"h{rng.randrange(10**6)}_{i}" for i in range(rng.randint(150, 300))]
        body = {**base, "response_format": json_format({"type": "object", "properties": {n: {} for n in names}})}
    elif kind == "leave_body":
        return leave_mid_body(port)
    else:
        bad = rng.choice([
            b"{not json",
            json.dumps({**base, "response_format": json_format({"type": "array", "uniqueItems": True})}).encode(),
            json.dumps({**base, "response_format": json_format({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(3000)}})}).encode(),
            json.dumps({**base, "logit_bias": {"1": 3}}).encode(),
            json.dumps({**base, "temperature": 9}).encode(),
        ])
        return request(port, bad)
    return request(port, json.dumps(body).encode())


def client_loop(port: int, seed: int, stop: threading.Event, stats: Stats, heavy_share: float) -> None:
    rng = random.Random(seed)
    while not stop.is_set():
        start = time.perf_counter()
        try:
            code = one_request(port, rng, heavy_share)
        except (OSError, http.client.HTTPException) as exc:
            code = f"conn:{type(exc).__name__}"
        stats.add(code, time.perf_counter() - start)


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def wait_up(port: int, proc: subprocess.Popen, limit: float = 300.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("the server did not come up")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="how long to send traffic (default 30)")
    p.add_argument("--report-every", type=float, default=60.0, help="seconds between reports (default 60)")
    p.add_argument("--clients", type=int, default=2, help="client threads (default 2)")
    p.add_argument("--idle", type=float, default=0.0, help="seconds to stay idle at the end, RSS reported (default 0)")
    p.add_argument("--model", default=None, help="target model (default: the tests' tiny random models)")
    p.add_argument("--draft", default=None, help="draft model with --model, or 'none'")
    p.add_argument("--max-batch-size", type=int, default=8, help="batch rows, as serve's default (8)")
    p.add_argument("--prefix-cache-mb", type=int, default=1024, help="the prefix cache per model, as serve's default (1024)")
    p.add_argument("--runtime", choices=["auto", "torch", "llamacpp"], default="auto",
                   help="the runtime; llamacpp without --model: the tests' tiny GGUF pair (default auto: torch's tiny pair)")
    p.add_argument("--trim-interval", type=float, default=None,
                   help="the server's trim_interval (idle seconds before freed memory goes back; 0: never; default: the server's)")
    p.add_argument("--mmap-threshold", type=int, default=None,
                   help="the server's mmap_threshold in bytes (0: glibc's moving default; default: the server's, 128 KiB)")
    p.add_argument("--max-queue", type=int, default=16)
    p.add_argument("--heavy-share", type=float, default=0.02, help="share of requests with a schema slow to compile (default 0.02)")
    p.add_argument("--tracemalloc", action="store_true", help="trace the server's Python allocations (slower)")
    p.add_argument("--out", default=str(ROOT / "results" / "soak"), help="folder of --json / --tracemalloc files (ignored by git)")
    p.add_argument("--json", default=None, help="write the reports to this file (in --out unless absolute)")
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--serve-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve_child:
        serve_child(args)
        return 0
    Path(args.out).mkdir(parents=True, exist_ok=True)
    port = free_port()
    child = [sys.executable, str(Path(__file__).resolve()), "--serve-child", "--port", str(port), "--out", args.out,
             "--max-batch-size", str(args.max_batch_size), "--max-queue", str(args.max_queue)]
    child += ["--model", args.model] if args.model else []
    child += ["--runtime", args.runtime, "--prefix-cache-mb", str(args.prefix_cache_mb)]
    child += ["--draft", args.draft] if args.draft else []
    child += ["--tracemalloc"] if args.tracemalloc else []
    child += ["--trim-interval", str(args.trim_interval)] if args.trim_interval is not None else []
    child += ["--mmap-threshold", str(args.mmap_threshold)] if args.mmap_threshold is not None else []
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(child, cwd=ROOT, env=env)
    reports: list[dict] = []
    try:
        wait_up(port, proc)
        print(f"server pid {proc.pid} on 127.0.0.1:{port}; RSS {rss_mib(proc.pid):.0f} MiB at start; {args.clients} clients for "
              f"{args.minutes:g} min", flush=True)
        if args.tracemalloc:
            os.kill(proc.pid, signal.SIGUSR1)  # the baseline snapshot
        stats, stop = Stats(), threading.Event()
        threads = [threading.Thread(target=client_loop, args=(port, i, stop, stats, args.heavy_share), daemon=True) for i in range(args.clients)]
        for t in threads:
            t.start()
        start = time.monotonic()
        end = start + args.minutes * 60
        while time.monotonic() < end:
            time.sleep(max(min(args.report_every, end - time.monotonic()), 0))
            codes, lat = stats.take()
            report = {"minute": round((time.monotonic() - start) / 60, 2), "served": stats.served, "interval": sum(codes.values()),
                      "codes": dict(sorted(codes.items())), "p50_s": round(percentile(lat, 0.5), 3), "p95_s": round(percentile(lat, 0.95), 3),
                      "rss_mib": round(rss_mib(proc.pid), 1), "prefix_cache_mib": round(prefix_cache_mib(port), 1)}
            reports.append(report)
            print(json.dumps(report), flush=True)
            if args.tracemalloc:
                os.kill(proc.pid, signal.SIGUSR1)
            if proc.poll() is not None:
                raise SystemExit(f"the server exited with {proc.returncode}")
        stop.set()
        for t in threads:
            t.join(150)
        if args.idle > 0:
            time.sleep(args.idle)
            print(json.dumps({"idle_s": args.idle, "rss_mib": round(rss_mib(proc.pid), 1)}), flush=True)
        print("answers in all: " + json.dumps(dict(sorted(stats.total.items()))), flush=True)
        if reports:
            first = next((r for r in reports if r["minute"] >= 5), reports[0])
            last = reports[-1]
            change = (last["rss_mib"] - first["rss_mib"]) / first["rss_mib"] * 100 if first["rss_mib"] else float("nan")
            print(f"RSS at minute {first['minute']:g}: {first['rss_mib']:.0f} MiB; at minute {last['minute']:g}: {last['rss_mib']:.0f} MiB "
                  f"({change:+.1f}%)", flush=True)
            held = last["prefix_cache_mib"] - first["prefix_cache_mib"]
            net = (last["rss_mib"] - held - first["rss_mib"]) / first["rss_mib"] * 100 if first["rss_mib"] else float("nan")
            print(f"the prefix cache (bounded by --prefix-cache-mb) grew {held:+.1f} MiB meanwhile; RSS growth without it {net:+.1f}%",
                  flush=True)
        if args.json:
            path = Path(args.json) if os.path.isabs(args.json) else Path(args.out) / args.json
            path.write_text(json.dumps(reports, indent=1))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
