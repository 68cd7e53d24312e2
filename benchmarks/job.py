"""A job of many documents with one schema: our CLI's job against llama-server and against one CLI call per document.

Run from the repository root with llama-cpp-python installed (``make install-llamacpp``), the default pair
fetched and llama-server built (``scripts/build_llama_server.sh``)::

    python benchmarks/job.py --docs 20 --out results/job

Arms, run one after another on the same 20 e-mails of ``benchmarks/job_docs.py`` (written before any run,
never tuned on) and the one schema ``schemas/job/support_ticket.json``, greedy, llama.cpp on the same GGUF:

* ``ours:job``: ``constrained-spec generate --runtime llamacpp --input docs.jsonl --output out.jsonl`` (one
  process; its default mode: target + draft plan + grammar strings and prompt lookup);
* ``ours:job-rows``: the same with ``--batch-size B`` (``--rows B``; 0 leaves the arm out);
* ``ours:per-doc``: ``constrained-spec generate --runtime llamacpp --prompt TEXT`` once per document (a new
  process each time, as a shell loop would run it; prompt states on disk shared between calls);
* ``peer:llama-server``: llama.cpp's server on the target GGUF, ``/completion`` with the same prompt token ids
  (chat template and schema hint as our CLI builds them), its ``json_schema``, ``cache_prompt`` on, target-only,
  ``-np P`` with P clients for each P of ``--peer-slots`` (default 1,4).

Every wall time counts from the start of the command (ours: process start; the peer: server start) to the
last value, so model loads are in; the peer's is also given without its load. Each of our arms gets a cache
folder of its own whose models, compiled automata and host costs link to the user's cache but whose prompt
states start empty (the user's cache is never written). Figures per arm: wall s, × the peer's best wall,
values valid (jsonschema) and fields exact against the e-mails' known answers.
Output: ``results.json`` and ``summary.md`` in ``--out`` (default ``results/job-<UTC stamp>``, git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CLI = [sys.executable, "-m", "constrained_spec.cli"]


def judge(values: Sequence[Any], items: Sequence[Any], schema: Any) -> dict[str, int]:
    """Valid values (jsonschema) and exact fields of ``values`` (None: no value) against the items' answers."""
    import jsonschema
    from bench import field_match

    valid = fields = 0
    for value, item in zip(values, items):
        if value is None:
            continue
        try:
            jsonschema.validate(value, schema)
            valid += 1
        except jsonschema.ValidationError:
            pass
        fields += field_match(json.dumps(value), item.expected)[0]
    return {"valid": valid, "fields": fields, "fields_total": sum(len(i.expected) for i in items)}


def scratch_cache(user_cache: Path, into: Path) -> Path:
    """A cache folder in ``into`` linking to ``user_cache``'s entries but its prompt states (``prompt_cache.scratch_cache``)."""
    from prompt_cache import scratch_cache as linked_cache

    into.mkdir(parents=True, exist_ok=True)
    return linked_cache(user_cache, into)


def run_ours_job(jsonl: Path, schema_file: Path, cache: Path, out: Path, rows: int) -> dict[str, Any]:
    """``generate --input`` in a new process; wall from its start to its exit, the values in input order."""
    cmd = [*CLI, "generate", "--runtime", "llamacpp", "--schema", str(schema_file), "--input", str(jsonl),
           "--output", str(out), "--cache-dir", str(cache)]
    if rows > 1:
        cmd += ["--batch-size", str(rows)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {"wall_s": wall, "command": " ".join(cmd[2:]), "values": [r.get("value") for r in records],
            "errors": sum("error" in r for r in records)}


def run_ours_per_doc(items: Sequence[Any], schema_file: Path, cache: Path) -> dict[str, Any]:
    """``generate --prompt`` once per document, each in a new process; wall over all of them."""
    values: list[Any] = []
    walls: list[float] = []
    errors = 0
    t0 = time.perf_counter()
    for item in items:
        cmd = [*CLI, "generate", "--runtime", "llamacpp", "--schema", str(schema_file), "--prompt", item.prompt,
               "--cache-dir", str(cache)]
        t1 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        walls.append(time.perf_counter() - t1)
        try:
            values.append(json.loads(proc.stdout) if proc.returncode == 0 else None)
        except ValueError:
            values.append(None)
        errors += proc.returncode != 0
    return {"wall_s": time.perf_counter() - t0, "per_call_s": walls, "values": values, "errors": errors,
            "command": "generate --runtime llamacpp --schema S --prompt TEXT (once per document)"}


def run_peer(items: Sequence[Any], prompt_ids: Sequence[list[int]], schema: Any, gguf: str, slots: int, threads: int,
             max_new_tokens: int) -> dict[str, Any]:
    """llama-server ``-np slots`` with ``slots`` clients; wall from the server's start to the last answer."""
    from llama_server_peer import LlamaServer
    from llama_server_peer import run_clients as peer_clients

    t0 = time.perf_counter()
    server = LlamaServer(gguf, parallel=slots, threads=threads, ctx_per_slot=2048)
    try:
        jobs = [(item.id, ids, schema) for item, ids in zip(items, prompt_ids)]
        row = peer_clients(server, jobs, slots, max_new_tokens, cache_prompt=True)
        wall = time.perf_counter() - t0
    finally:
        server.close()
    by_id = {r["id"]: r for r in row["records"]}
    values = []
    for item in items:
        try:
            values.append(json.loads(by_id[item.id]["text"]))
        except (KeyError, ValueError):
            values.append(None)
    return {"wall_s": wall, "wall_without_load_s": row["wall_s"], "load_s": server.load_s, "values": values,
            "errors": row["errors"], "tokens": row["tokens"], "command": " ".join(server.command)}


def build_prompt_ids(items: Sequence[Any], schema: Any) -> list[list[int]]:
    """The prompt token ids our CLI decodes from (chat template, schema hint), from a target-only Generator."""
    from constrained_spec.api import Generator

    gen = Generator(draft=None, runtime="llamacpp", progress=False)
    spec = gen.compile(schema).spec
    ids = [list(gen.prompt_ids(item.prompt, spec)) for item in items]
    del gen
    return ids


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/job.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=20, help="the first N e-mails (default all 20)")
    p.add_argument("--rows", type=int, default=0, help="also run the job with --batch-size ROWS (default 0: not)")
    p.add_argument("--peer-slots", default="1,4", help="llama-server -np settings, one run each (default 1,4)")
    p.add_argument("--arms", default="job,rows,per-doc,peer", help="which arms to run (default all)")
    p.add_argument("--threads", type=int, default=2, help="llama-server's threads (ours: its default)")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--out", default=None)
    args = p.parse_args(list(argv) if argv is not None else None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from job_docs import SCHEMA_PATH, load_workload

    from constrained_spec.config import DEFAULT_TARGET
    from constrained_spec.models.store.fetch import gguf_path
    from constrained_spec.paths import cache_root

    items = load_workload(args.docs)
    schema = items[0].schema
    arms = set(args.arms.split(","))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else ROOT / "results" / f"job-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    user_cache = cache_root()
    results: dict[str, Any] = {"date": stamp, "docs": len(items), "argv": list(argv) if argv is not None else sys.argv[1:],
                               "arms": {}}
    if "peer" in arms:
        ids = build_prompt_ids(items, schema)
        results["prompt_tokens"] = [len(i) for i in ids]
        for slots in (int(s) for s in args.peer_slots.split(",") if s.strip()):
            name = f"peer:llama-server-np{slots}"
            arm = run_peer(items, ids, schema, str(gguf_path(DEFAULT_TARGET)), slots, args.threads, args.max_new_tokens)
            results["arms"][name] = arm
            print(f"{name:22s} wall {arm['wall_s']:7.1f} s ({arm['wall_without_load_s']:.1f} s without its load)", flush=True)
            (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))  # kept if a later arm fails
    with tempfile.TemporaryDirectory(prefix="job-bench-") as tmp:
        work = Path(tmp)
        jsonl = work / "docs.jsonl"
        jsonl.write_text("".join(json.dumps({"id": i.id, "prompt": i.prompt}) + "\n" for i in items))
        ours = [("job", "ours:job", 1)] + ([("rows", f"ours:job-rows{args.rows}", args.rows)] if args.rows > 1 else [])
        for key, name, rows in ours:
            if key in arms:
                arm = run_ours_job(jsonl, SCHEMA_PATH, scratch_cache(user_cache, work / f"cache-{key}"), work / f"{key}.jsonl", rows)
                results["arms"][name] = arm
                print(f"{name:22s} wall {arm['wall_s']:7.1f} s", flush=True)
                (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
        if "per-doc" in arms:
            arm = run_ours_per_doc(items, SCHEMA_PATH, scratch_cache(user_cache, work / "cache-per-doc"))
            results["arms"]["ours:per-doc"] = arm
            print(f"{'ours:per-doc':22s} wall {arm['wall_s']:7.1f} s", flush=True)
    for arm in results["arms"].values():
        arm.update(judge(arm["values"], items, schema))
    peers = [a["wall_s"] for n, a in results["arms"].items() if n.startswith("peer:")]
    results["peer_best_wall_s"] = min(peers) if peers else None
    (out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False))
    table = markdown(results)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    print(f"wrote {out}")
    return 0


def markdown(results: dict[str, Any]) -> str:
    """The arms as a table: wall, × the peer's best wall, valid, fields exact."""
    best = results.get("peer_best_wall_s")
    lines = [f"Job of {results['docs']} documents, one schema ({results['date']} UTC)", "",
             "| arm | wall s | × best llama-server wall | valid | fields exact |", "|---|---|---|---|---|"]
    for name, arm in results["arms"].items():
        ratio = f"{best / arm['wall_s']:.2f}" if best else "-"
        lines.append(f"| {name} | {arm['wall_s']:.1f} | {ratio} | {arm['valid']}/{results['docs']} | "
                     f"{arm['fields']}/{arm['fields_total']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
