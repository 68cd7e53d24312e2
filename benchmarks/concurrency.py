"""Concurrent clients: today's one-at-a-time decoding against continuous batching, side by side.

``python -m benchmarks.concurrency`` (or ``python benchmarks/bench.py --concurrency 1,8``) loads the
default pair once and runs the benchmark prompts from C concurrent clients (C in ``--clients``),
first through a Generator that decodes one request at a time (what the server did before
batching: the others wait in its queue), then through one with ``max_batch_size = max(C)``.
Each client sends its share of the prompts one after another; a request's latency runs from its
send to its answer, prefill and waiting included. Printed per setting: aggregate throughput
(generated tokens / wall seconds), p50/p95 latency, and the batched/serial ratios; then the
prefix-cache check (the same system prompt and tools twice, two different questions: the second
request's prefill time against the first's) and memory (RSS, the preallocated caches).
Greedy; greedy outputs of both paths are compared token for token.

``--peer llama-server`` adds llama.cpp's own server as a third column, in the same run: ``llama-server -np C`` on
the same target GGUF (built by ``scripts/build_llama_server.sh`` from the binding's own llama.cpp source), sent the
same prompt token ids with its ``json_schema``, greedy, from the same C clients (``benchmarks/llama_server_peer.py``);
its peak RSS is the server process's. ``--runtime llamacpp`` is then the default pair on the GGUF for all three.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.workload import load_workload  # noqa: E402

SYSTEM = ("You are the order desk assistant of Northwind Traders. You answer in JSON only. You know the "
          "catalogue, the shipping rules (standard 3-5 days, express next day before 14:00, free over 50 EUR) "
          "and the returns policy (30 days, unused, with the receipt). Be precise; never invent order numbers. ") * 3
TOOLS = [
    {"type": "function", "function": {"name": "lookup_order", "description": "Find an order by its id.",
                                      "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "pattern": "^ORD-[0-9]{6}$"}},
                                                     "required": ["order_id"]}}},
    {"type": "function", "function": {"name": "quote_shipping", "description": "Price a shipment.",
                                      "parameters": {"type": "object", "properties": {
                                          "weight_kg": {"type": "number", "minimum": 0, "maximum": 100},
                                          "express": {"type": "boolean"},
                                          "country": {"type": "string", "enum": ["DE", "NL", "FR", "UK"]}},
                                          "required": ["weight_kg", "express", "country"]}}},
]
QUESTIONS = ["Where is my order ORD-118822?", "How much to send 3.5 kg to the Netherlands by express?"]


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def rss_mb() -> float:
    """This process's peak RSS in MB."""
    from benchmarks.llama_server_peer import vmhwm_mb

    return vmhwm_mb("self")


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (``VmHWM``) to its current RSS (Linux: ``5`` to ``/proc/self/clear_refs``), so
    the next :func:`rss_mb` is the peak of what ran since; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _valid(text: str, schema: Any) -> bool:
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
        return True
    except Exception:  # noqa: BLE001 - any failure is "not valid"
        return False


def run_clients(gen: Any, items: Sequence[Any], clients: int, max_new_tokens: int) -> dict[str, Any]:
    """``clients`` threads, client i sending items i, i+clients, ... in turn; per-request records."""
    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        for item in items[i::clients]:
            t0 = time.perf_counter()
            try:
                result = gen.run(item.prompt, item.schema, max_new_tokens=max_new_tokens)
                rec = {"id": item.id, "tokens": len(result.token_ids), "token_ids": result.token_ids,
                       "prefill_s": result.stats.prefill_seconds, "ok": True, "valid": _valid(result.text, item.schema)}
            except Exception as exc:  # noqa: BLE001 - a failed request is a figure too
                rec = {"id": item.id, "tokens": 0, "token_ids": None, "error": f"{type(exc).__name__}: {exc}", "ok": False}
            rec["latency_s"] = time.perf_counter() - t0
            with lock:
                records.append(rec)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    peak_reset = reset_peak_rss()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = [r["latency_s"] for r in records]
    tokens = sum(r["tokens"] for r in records)
    return {"clients": clients, "requests": len(records), "errors": sum(not r["ok"] for r in records), "wall_s": wall,
            "tokens": tokens, "throughput_tok_s": tokens / wall if wall else None,
            "p50_s": statistics.median(lat) if lat else None, "p95_s": percentile(lat, 0.95),
            "valid": sum(bool(r.get("valid")) for r in records), "peak_rss_mb": rss_mb() if peak_reset else None, "records": records}


def prefix_check(gen: Any, max_new_tokens: int) -> dict[str, Any]:
    """The same system prompt and tools, two questions: prefill seconds of each (the second reuses)."""
    from constrained_spec.tools import tool_call_schema, tool_prompt

    out = []
    for question in QUESTIONS:
        messages, tools = tool_prompt(gen.tokenizer, [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
                                      TOOLS, "required")
        schema = tool_call_schema(TOOLS, "required")
        t0 = time.perf_counter()
        result = gen.run(messages, schema, tools=tools, schema_in_prompt=False, max_new_tokens=max_new_tokens)
        out.append({"question": question, "prompt_tokens": result.prompt_tokens, "prefill_s": result.stats.prefill_seconds,
                    "latency_s": time.perf_counter() - t0, "text": result.text})
    ratio = out[1]["prefill_s"] / out[0]["prefill_s"] if out[0]["prefill_s"] else None
    return {"requests": out, "second_over_first_prefill": ratio}


def run_peer(gen: Any, model: str, items: Sequence[Any], clients: Sequence[int], max_new_tokens: int, threads: int) -> dict[str, Any]:
    """llama-server on the target's GGUF, one server per client count (``-np`` = clients), the same prompt ids."""
    from benchmarks.llama_server_peer import LlamaServer
    from benchmarks.llama_server_peer import run_clients as peer_clients
    from constrained_spec.models.store.fetch import gguf_path

    jobs = [(item.id, gen.prompt_ids(item.prompt, gen.compile(item.schema).spec), item.schema) for item in items]
    out: dict[str, Any] = {"settings": []}
    for c in clients:
        server = LlamaServer(str(gguf_path(model)), parallel=c, threads=threads, ctx_per_slot=2048)
        try:
            peer_clients(server, jobs[:1], 1, 8)  # warm-up, as ours
            row = peer_clients(server, jobs, c, max_new_tokens)
            row.update(load_s=server.load_s, peak_rss_mb=server.peak_rss_mb(), command=" ".join(server.command))
        finally:
            server.close()
        out["settings"].append(row)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.concurrency", description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", default="1,8", help="comma list of concurrent client counts (default 1,8)")
    p.add_argument("--prompts", type=int, default=8,
                   help="requests sent in each setting (default 8: the benchmark prompts; more repeat them in order)")
    p.add_argument("--device", default="auto", help="where the models load (auto: CUDA when present)")
    p.add_argument("--max-new-tokens", type=int, default=320)
    p.add_argument("--model", default=None)
    p.add_argument("--draft", default=None)
    p.add_argument("--threads", type=int, default=None, help="torch threads, which llama.cpp's decodes use too (default: torch's)")
    p.add_argument("--runtime", default="auto", choices=("auto", "torch", "llamacpp"), help="the models' runtime (default auto)")
    p.add_argument("--no-serial", action="store_true", help="skip the one-at-a-time baseline")
    p.add_argument("--workload", default="default", choices=("default", "heldout"),
                   help="the prompts: the tuned benchmark workload (default) or the held-out one, never tuned on")
    p.add_argument("--peer", default=None, choices=("llama-server",),
                   help="also run llama.cpp's llama-server -np <clients> on the same GGUF, prompt ids and schemas")
    p.add_argument("--no-prefix-check", action="store_true", help="skip the prefix-cache check")
    p.add_argument("--out", default=None, help="output folder (default results/concurrency-<UTC timestamp>)")
    args = p.parse_args(list(argv) if argv is not None else None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from constrained_spec.api import Generator
    from constrained_spec.config import DEFAULT_DRAFT, DEFAULT_TARGET

    if args.threads:
        torch.set_num_threads(args.threads)
    clients = [int(c) for c in args.clients.split(",") if c.strip()]
    if args.workload == "heldout":
        from benchmarks.heldout import load_workload as load_heldout

        base = load_heldout(None)
    else:
        base = load_workload(None)
    items = [base[i % len(base)] for i in range(args.prompts)]
    model, draft = args.model or DEFAULT_TARGET, args.draft or DEFAULT_DRAFT
    t0 = time.perf_counter()
    serial = Generator(model, draft, progress=False, max_new_tokens=args.max_new_tokens, device=args.device, runtime=args.runtime)
    load_s = time.perf_counter() - t0
    rss_loaded = rss_mb()
    batched = Generator(model, draft, progress=False, max_new_tokens=args.max_new_tokens, max_batch_size=max(max(clients), 2),
                        device=args.device, runtime=args.runtime)
    assert batched.batch is not None
    cache_mb = sum(getattr(m, "cache_bytes", 0) for m in batched.batch.models.values()) / 2**20  # llama.cpp: inside its context
    for gen in (serial, batched):  # warm-up: first-call costs (thread pools, kernels) out of the figures
        gen.run("Say hi.", {"type": "string", "maxLength": 4}, max_new_tokens=8)
    results: dict[str, Any] = {"model": model, "draft": draft, "runtime": type(serial.target).__name__, "threads": torch.get_num_threads(), "load_s": load_s,
                               "rss_after_load_mb": rss_loaded, "batch_cache_mb": cache_mb, "max_batch_size": batched.batch.slots,
                               "max_new_tokens": args.max_new_tokens, "settings": []}
    results["argv"] = list(argv) if argv is not None else sys.argv[1:]
    results["workload"] = args.workload
    for c in clients:
        row: dict[str, Any] = {"clients": c}
        if not args.no_serial:
            row["serial"] = run_clients(serial, items, c, args.max_new_tokens)
            print(f"serial  {c} clients: {row['serial']['throughput_tok_s']:.2f} tok/s, p50 {row['serial']['p50_s']:.1f} s", flush=True)
        metrics_before = batched.batch.metrics.snapshot()
        row["batched"] = run_clients(batched, items, c, args.max_new_tokens)
        after = batched.batch.metrics.snapshot()
        row["batched"]["rows_per_forward"] = {n: after["rows_per_forward"].get(n, 0) - metrics_before["rows_per_forward"].get(n, 0)
                                              for n in after["rows_per_forward"]}
        for key in ("forward_seconds", "prefill_seconds", "prefill_tokens", "rounds"):
            row["batched"][key] = after[key] - metrics_before[key]
        print(f"batched {c} clients: {row['batched']['throughput_tok_s']:.2f} tok/s, p50 {row['batched']['p50_s']:.1f} s", flush=True)
        if "serial" in row:
            s, b = row["serial"], row["batched"]
            row["throughput_ratio"] = b["throughput_tok_s"] / s["throughput_tok_s"] if s["throughput_tok_s"] else None
            row["p50_ratio"] = s["p50_s"] / b["p50_s"] if b["p50_s"] else None
            same = {r["id"]: r["token_ids"] for r in s["records"]}
            row["greedy_identical"] = sum(same.get(r["id"]) == r["token_ids"] for r in b["records"])
        results["settings"].append(row)
    results["peak_rss_mb"] = rss_mb()
    if args.peer == "llama-server":
        results["peer"] = run_peer(serial, model, items, clients, args.max_new_tokens, torch.get_num_threads())
        for row, peer in zip(results["settings"], results["peer"]["settings"]):
            row["peer"] = peer
            print(f"llama-server -np {peer['clients']}: {peer['throughput_tok_s']:.2f} tok/s, p50 {peer['p50_s']:.1f} s", flush=True)
    if not args.no_prefix_check:
        fresh = Generator(model, draft, progress=False, max_new_tokens=args.max_new_tokens, max_batch_size=2, device=args.device,
                          runtime=args.runtime)
        results["prefix_cache"] = prefix_check(fresh, 64)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else ROOT / "results" / f"concurrency-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    for row in results["settings"]:
        for side in ("serial", "batched", "peer"):
            for r in row.get(side, {}).get("records", []):
                r.pop("token_ids", None)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    table = markdown(results)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    print(f"wrote {out}")
    return 0


def markdown(results: dict[str, Any]) -> str:
    lines = [f"Concurrency: {results['model']} + {results['draft']}, {results.get('runtime', '?')}, {results['threads']} threads, greedy, "
             f"max_batch_size {results['max_batch_size']}, max_new_tokens {results['max_new_tokens']}", "",
             "| clients | serial tok/s | batched tok/s | x | serial p50 s | batched p50 s | p50 x | serial p95 s | batched p95 s | errors | greedy identical |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in results["settings"]:
        s, b = row.get("serial", {}), row["batched"]

        def f(v: Any, fmt: str = "{:.2f}") -> str:
            return "–" if v is None else fmt.format(v)

        lines.append(f"| {row['clients']} | {f(s.get('throughput_tok_s'))} | {f(b['throughput_tok_s'])} | {f(row.get('throughput_ratio'))} | "
                     f"{f(s.get('p50_s'), '{:.1f}')} | {f(b['p50_s'], '{:.1f}')} | {f(row.get('p50_ratio'))} | {f(s.get('p95_s'), '{:.1f}')} | "
                     f"{f(b['p95_s'], '{:.1f}')} | {s.get('errors', 0) + b['errors']} | {row.get('greedy_identical', '–')}/{b['requests']} |")
    if "peer" in results:
        lines += ["", "Side by side (the same run, prompt ids and schemas):", "",
                  "| clients | | tok/s | p50 s | p95 s | valid | peak RSS MB |", "|---|---|---|---|---|---|---|"]
        for row in results["settings"]:
            peer = row.get("peer")
            if peer is None:
                continue
            for name, side in (("ours, one at a time", row.get("serial")), ("ours, rows", row["batched"]),
                               (f"llama-server -np {peer['clients']}", peer)):
                if side:
                    rss = side.get("peak_rss_mb")
                    lines.append(f"| {row['clients']} | {name} | {side['throughput_tok_s']:.2f} | {side['p50_s']:.1f} | {side['p95_s']:.1f} | "
                                 f"{side.get('valid', '–')} | {'–' if rss is None else f'{rss:.0f}'} |")
            b = row["batched"]
            lines.append(f"| {row['clients']} | rows ÷ llama-server | {b['throughput_tok_s'] / peer['throughput_tok_s']:.2f}x | | | | |")
        lines.append("(ours: one process holding both generators, its peak RSS reset before each side's run: each side's "
                     "figure counts the other's resident pages too; llama-server: its process's peak)")
    for row in results["settings"]:
        b = row["batched"]
        if "forward_seconds" in b:
            lines.append(f"Rows, {row['clients']} clients: {b['rounds']} rounds, forwards {b['forward_seconds']:.1f} s, prompt pieces "
                         f"{b['prefill_seconds']:.1f} s ({b['prefill_tokens']} tokens), rows per forward {b['rows_per_forward']}")
    pc = results.get("prefix_cache")
    if pc is not None:
        first, second = pc["requests"]
        lines += ["", f"Prefix cache: same system prompt + tools, two questions: prefill {first['prefill_s']:.2f} s "
                      f"({first['prompt_tokens']} prompt tokens), then {second['prefill_s']:.2f} s ({second['prompt_tokens']}): "
                      f"{100 * (pc['second_over_first_prefill'] or 0):.0f}% of the first"]
    lines.append(f"Memory: RSS after loading {results['rss_after_load_mb']:.0f} MB, peak {results['peak_rss_mb']:.0f} MB; "
                 f"batch caches preallocated {results['batch_cache_mb']:.0f} MB ({results['max_batch_size']} slots)")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
