"""Latency, throughput and errors of the Ray Serve application for 1 and 2 replicas.

Tiny random Llamas saved to a temporary folder (GPT-2's tokenizer), a local Ray, requests from
concurrent HTTP clients over a few schemas; every 200's value is checked with jsonschema::

    python benchmarks/ray_bench.py --replicas 1 2 --requests 40 --clients 4

Prints one line per replica count and, with --json, the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def schema(n: int) -> dict:
    return {"type": "object", "properties": {f"k{n}": {"type": "integer", "minimum": 0, "maximum": 99}, "s": {"type": "string", "maxLength": 8}},
            "required": [f"k{n}", "s"], "additionalProperties": False}


def tiny_models(folder: Path) -> list[str]:
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import tiny_llama
    from transformers import AutoTokenizer

    from constrained_spec.models.store.tokenizer_assets import ensure_vocab_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_vocab_tokenizer("gpt-2")))
    dirs = []
    for seed in (1, 2):
        path = folder / f"tiny{seed}"
        tiny_llama(50257, seed=seed).save_pretrained(path)
        tokenizer.save_pretrained(path)
        dirs.append(str(path))
    return dirs


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def load(url: str, requests: int, clients: int, schemas: int, max_tokens: int) -> dict:
    import httpx
    import jsonschema

    def one(i: int) -> tuple[float, int, str | None, bool]:
        n = i % schemas
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Give me a record."}], "seed": i, "max_tokens": max_tokens,
                "response_format": {"type": "json_schema", "json_schema": {"name": f"s{n}", "schema": schema(n)}}}
        started = time.perf_counter()
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
        elapsed = time.perf_counter() - started
        valid = False
        if r.status_code == 200:
            choice = r.json()["choices"][0]
            if choice["finish_reason"] == "stop":
                jsonschema.validate(json.loads(choice["message"]["content"]), schema(n))
                valid = True
        return elapsed, r.status_code, r.headers.get("x-constrained-spec-replica"), valid

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, range(requests)))
    wall = time.perf_counter() - started
    latencies = [r[0] for r in results if r[1] == 200]
    return {"requests": requests, "clients": clients, "ok": len(latencies), "errors": sum(r[1] != 200 for r in results),
            "complete_values": sum(r[3] for r in results), "replicas_seen": len({r[2] for r in results if r[2]}),
            "p50_ms": round(1000 * statistics.median(latencies), 1) if latencies else None,
            "p95_ms": round(1000 * percentile(latencies, 0.95), 1) if latencies else None,
            "throughput_rps": round(len(latencies) / wall, 2), "wall_s": round(wall, 2)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--schemas", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=40)
    p.add_argument("--num-cpus", type=float, default=2, help="logical CPUs of the local Ray")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import ray
    from ray import serve

    from constrained_spec.serving.ray_app import RayServeOptions, ReplicaOptions, build_app

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        dirs = tiny_models(Path(tmp))
        ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        url = f"http://127.0.0.1:{port}"
        try:
            for count in args.replicas:
                replica = ReplicaOptions(model=dirs[0], draft=dirs[1], dtype="fp32", cache_dir=str(Path(tmp) / "cache"), num_draft_tokens=3,
                                         max_new_tokens=args.max_tokens, app_options={"model_name": "tiny", "request_timeout": 120.0})
                deploy = RayServeOptions(replicas=count, num_cpus_per_replica=0.5, max_queued_requests=args.requests)
                started = time.perf_counter()
                serve.run(build_app(replica, deploy), name=f"bench{count}", route_prefix="/")
                ready = time.perf_counter() - started
                load(url, args.schemas * count, 1, args.schemas, args.max_tokens)  # warm: each schema compiled (affinity spreads them)
                row = {"replicas": count, "ready_s": round(ready, 1), **load(url, args.requests, args.clients, args.schemas, args.max_tokens)}
                rows.append(row)
                print(f"replicas={count} ready={row['ready_s']}s requests={row['requests']} clients={row['clients']} ok={row['ok']} "
                      f"errors={row['errors']} complete={row['complete_values']} replicas_seen={row['replicas_seen']} "
                      f"p50={row['p50_ms']}ms p95={row['p95_ms']}ms throughput={row['throughput_rps']}/s wall={row['wall_s']}s", flush=True)
                serve.delete(f"bench{count}")
        finally:
            serve.shutdown()
            ray.shutdown()
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
