"""The llama.cpp runtime against the torch runtime and against llama.cpp's own constrained decoding.

Run from the repository root with llama-cpp-python installed (``make install-llamacpp``) and the
default pair fetched::

    python benchmarks/llamacpp_bench.py --workload heldout --threads 2 --out results/llamacpp-bench
    python benchmarks/llamacpp_bench.py --load-only            # load time and memory per runtime only

Modes, interleaved per prompt (every mode runs a prompt before the next prompt starts, so the drift of
a shared machine hits all alike), greedy, the same prompt token ids (``Generator.prompt_ids``: chat
template and schema hint) for every mode:

* ``torch:target`` / ``torch:default``: this project on the torch runtime (packed fp16w target, int8w
  draft), target-only and its default mode (grammar strings + prompt lookup, draft by the draft plan);
* ``llamacpp:target`` / ``llamacpp:default`` / ``llamacpp:draft``: the same on the llama.cpp runtime
  (the GGUF as stored), plus the draft forced (``draft_plan="always"``);
* ``peer:llama.cpp``: llama-cpp-python's high-level ``Llama`` on the same target GGUF with
  ``LlamaGrammar.from_json_schema`` (the binding's json_schema grammar), target-only, greedy. Its Python
  converter writes a grammar llama.cpp cannot parse for ``tool_choice`` and the process then ends (2026-12-05);
* ``peer:llama-server``: llama.cpp's ``llama-server`` (``scripts/build_llama_server.sh``) on the same GGUF,
  ``-np 1``, ``/completion`` with the prompt ids and its C++ ``json_schema`` converter, greedy, its default
  ``cache_prompt`` (a prompt starting as the previous one reuses that part, as a user's server would).

Figures per mode: end-to-end latency per request (prompt build to value), decode tokens/s
(generated tokens per second after the prompt's prefill; for the peer, from its first streamed token
to its last), × ours-default end to end (median of per-prompt ratios), valid (jsonschema), greedy =
target-only of the same runtime. ``--load-only`` (also run first by default) loads each runtime's
pair in a fresh process twice and reports load seconds and peak RSS (``ru_maxrss``).
Output: ``results.json`` and ``table.md`` in ``--out`` (``results/`` is git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MODES = ("torch:target", "torch:default", "llamacpp:target", "llamacpp:default", "llamacpp:draft", "peer:llama.cpp",
         "peer:llama-server")


def _rss_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def load_probe(runtime: str, threads: int) -> dict[str, Any]:
    """In this (fresh) process: load the default pair on ``runtime`` and run one short request; seconds and peak RSS."""
    import torch

    torch.set_num_threads(threads)
    from constrained_spec.api import Generator

    t0 = time.perf_counter()
    gen = Generator(runtime=runtime, progress=False)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    gen.run("Answer yes.", {"type": "string", "enum": ["yes", "no"]})
    first = time.perf_counter() - t0
    return {"runtime": runtime, "load_s": round(load, 2), "first_request_s": round(first, 2), "peak_rss_gb": round(_rss_gb(), 2),
            "target": type(gen.target).__name__, "draft": type(gen.draft).__name__}


def run_load_probes(threads: int, runtimes: list[str]) -> list[dict[str, Any]]:
    """Each runtime's load probe in fresh processes, twice (the second load finds files in the page cache)."""
    out = []
    for attempt in (1, 2):
        for runtime in runtimes:
            proc = subprocess.run([sys.executable, __file__, "--probe", runtime, "--threads", str(threads)], capture_output=True,
                                  text=True, cwd=ROOT)
            if proc.returncode != 0:
                out.append({"runtime": runtime, "attempt": attempt, "error": proc.stderr.strip()[-800:]})
                continue
            rec = json.loads(proc.stdout.strip().splitlines()[-1])
            rec["attempt"] = attempt
            out.append(rec)
            print(json.dumps(rec), flush=True)
    return out


class LlamaCppPeer:
    """llama.cpp's own constrained decoding: ``Llama`` + ``LlamaGrammar.from_json_schema``, greedy."""

    def __init__(self, path: str, threads: int, n_ctx: int = 8192) -> None:
        from llama_cpp import Llama

        t0 = time.perf_counter()
        self.llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=n_ctx, n_batch=256, verbose=False)
        self.load_s = time.perf_counter() - t0
        self._grammars: dict[str, Any] = {}

    def generate(self, key: str, schema: Any, prompt_ids: list[int], max_new_tokens: int) -> dict[str, Any]:
        from llama_cpp import LlamaGrammar

        t0 = time.perf_counter()
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = self._grammars[key] = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
        self.llm.reset()  # no prefix reuse across requests (ours keeps none either)
        first = last = None
        text, n = [], 0
        for chunk in self.llm.create_completion(prompt=prompt_ids, max_tokens=max_new_tokens, temperature=0.0, grammar=grammar,
                                                stream=True):
            now = time.perf_counter()
            first = now if first is None else first
            last = now
            text.append(chunk["choices"][0]["text"])
            n += 1
        latency = time.perf_counter() - t0
        decode = (last - first) if first is not None and last is not None else 0.0
        return {"text": "".join(text), "tokens": n, "latency_s": latency, "prefill_s": (first or t0) - t0,
                "tok_s": (n - 1) / decode if n > 1 and decode > 0 else 0.0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="heldout", choices=("heldout", "default"))
    p.add_argument("--prompts", type=int, default=None, help="the first N prompts (default: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--modes", default=",".join(m for m in MODES if m != "peer:llama.cpp"))
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--out", default=None)
    p.add_argument("--load-only", action="store_true")
    p.add_argument("--no-load", action="store_true", help="skip the load probes")
    p.add_argument("--probe", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.probe:
        print(json.dumps(load_probe(args.probe, args.threads)))
        return
    out = Path(args.out or f"results/llamacpp-bench-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}")
    out.mkdir(parents=True, exist_ok=True)
    modes = [m for m in args.modes.split(",") if m]
    results: dict[str, Any] = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "threads": args.threads,
                                        "workload": args.workload, "modes": modes, "argv": sys.argv[1:]}}
    if not args.no_load:
        results["load"] = run_load_probes(args.threads, sorted({m.split(":")[0] for m in modes if not m.startswith("peer")}))
    if args.load_only:
        (out / "results.json").write_text(json.dumps(results, indent=1))
        return

    import jsonschema
    import torch

    torch.set_num_threads(args.threads)
    from constrained_spec.api import Generator
    from constrained_spec.models.store.fetch import gguf_path

    if args.workload == "heldout":
        from heldout import load_workload
    else:
        from workload import load_workload
    workload = load_workload(args.prompts)
    gens: dict[str, Any] = {}
    for runtime in ("torch", "llamacpp"):
        if any(m.startswith(runtime + ":") for m in modes):
            t0 = time.perf_counter()
            gens[runtime] = Generator(runtime=runtime, progress=False)
            gens[runtime + ":alone"] = Generator(runtime=runtime, draft=None, progress=False)
            results["meta"][f"load_s_{runtime}_in_bench"] = round(time.perf_counter() - t0, 2)
    peer = LlamaCppPeer(str(gguf_path("qwen2.5-coder-1.5b")), args.threads) if "peer:llama.cpp" in modes else None
    server = None
    if "peer:llama-server" in modes:
        from llama_server_peer import LlamaServer

        server = LlamaServer(str(gguf_path("qwen2.5-coder-1.5b")), parallel=1, threads=args.threads, ctx_per_slot=8192)
        results["meta"]["llama_server"] = " ".join(server.command)
    records: list[dict[str, Any]] = []
    with open(out / "records.jsonl", "w") as log:
        for item in workload:
            any_gen = next(iter(gens.values()), None)
            if any_gen is None:
                raise SystemExit("the peer needs a Generator of ours for the prompt ids: add a mode of ours")
            ids = any_gen.prompt_ids(item.prompt, any_gen.compile(item.schema).spec)
            for mode in modes:
                rec: dict[str, Any] = {"prompt": item.id, "mode": mode, "prompt_tokens": len(ids)}
                try:
                    if mode == "peer:llama.cpp":
                        assert peer is not None
                        r = peer.generate(item.schema_name, item.schema, ids, args.max_new_tokens)
                        rec.update(latency_s=r["latency_s"], prefill_s=r["prefill_s"], tok_s=r["tok_s"], tokens=r["tokens"],
                                   text=r["text"], token_ids=None)
                    elif mode == "peer:llama-server":
                        assert server is not None
                        t0 = time.perf_counter()
                        r = server.complete(ids, item.schema, args.max_new_tokens, cache_prompt=True)
                        latency = time.perf_counter() - t0
                        decode = latency - r["prefill_s"]
                        rec.update(latency_s=latency, prefill_s=r["prefill_s"], tok_s=r["tokens"] / decode if decode > 0 else 0.0,
                                   tokens=r["tokens"], text=r["text"], token_ids=None, prompt_tokens_computed=r["prompt_tokens"])
                    else:
                        runtime, kind = mode.split(":")
                        gen = gens[runtime + ":alone"] if kind == "target" else gens[runtime]
                        options: dict[str, Any] = {"draft_plan": "always"} if kind == "draft" else {}
                        t0 = time.perf_counter()
                        res = gen.run(item.prompt, item.schema, max_new_tokens=args.max_new_tokens, **options)
                        latency = time.perf_counter() - t0
                        rec.update(latency_s=latency, prefill_s=res.stats.prefill_seconds, tok_s=res.stats.tokens_per_second,
                                   tokens=len(res.token_ids), text=res.text, token_ids=res.token_ids,
                                   target_forwards=res.stats.target_forwards, draft_forwards=res.stats.draft_forwards,
                                   draft_plan=getattr(res.stats, "draft_plan_reason", None))
                    try:
                        jsonschema.validate(json.loads(rec["text"]), item.schema)
                        rec["valid"] = True
                    except Exception:  # noqa: BLE001
                        rec["valid"] = False
                except Exception as exc:  # noqa: BLE001
                    rec.update(error=f"{type(exc).__name__}: {exc}"[:300], valid=False)
                records.append(rec)
                log.write(json.dumps(rec) + "\n")
                log.flush()
                print(f"{item.id:24s} {mode:18s} {rec.get('latency_s', 0):7.2f}s {rec.get('tok_s', 0):6.2f} tok/s "
                      f"{rec.get('tokens', 0):4d} tok valid={rec.get('valid')}", flush=True)
    if server is not None:
        server.close()
    results["records"] = records
    results["summary"] = summarize(records, modes)
    results["meta"]["loadavg_at_end"] = os.getloadavg()
    (out / "results.json").write_text(json.dumps(results, indent=1))
    table = render(results)
    (out / "table.md").write_text(table)
    print(table)


def summarize(records: list[dict[str, Any]], modes: list[str]) -> dict[str, Any]:
    by = {(r["prompt"], r["mode"]): r for r in records}
    prompts = list(dict.fromkeys(r["prompt"] for r in records))
    ref = "llamacpp:default" if "llamacpp:default" in modes else modes[0]
    out: dict[str, Any] = {"reference": ref}
    for mode in modes:
        rs = [by[(pr, mode)] for pr in prompts if (pr, mode) in by and "error" not in by[(pr, mode)]]
        ratios = [by[(pr, ref)]["latency_s"] / by[(pr, mode)]["latency_s"] for pr in prompts
                  if (pr, mode) in by and (pr, ref) in by and "error" not in by[(pr, mode)] and "error" not in by[(pr, ref)]]
        runtime = mode.split(":")[0]
        same = [by[(pr, mode)]["token_ids"] == by[(pr, runtime + ":target")]["token_ids"] for pr in prompts
                if (pr, mode) in by and (pr, runtime + ":target") in by and by[(pr, mode)].get("token_ids") is not None]
        out[mode] = {
            "runs": len(rs), "errors": sum(1 for pr in prompts if "error" in by.get((pr, mode), {})),
            "latency_p50_s": round(statistics.median(r["latency_s"] for r in rs), 2) if rs else None,
            "latency_sum_s": round(sum(r["latency_s"] for r in rs), 1) if rs else None,
            "tok_s_p50": round(statistics.median(r["tok_s"] for r in rs), 2) if rs else None,
            "tokens_sum": sum(r["tokens"] for r in rs),
            "x_ref_e2e_p50": round(statistics.median(ratios), 3) if ratios else None,
            "x_ref_e2e_geo": round(statistics.geometric_mean(ratios), 3) if ratios else None,
            "valid": f"{sum(r['valid'] for r in rs)}/{len(rs)}",
            "greedy_eq_target": f"{sum(same)}/{len(same)}" if same else "-",
        }
        if mode.startswith("peer:"):  # the reference's speed-up over this peer, prompt by prompt (peer latency / ours)
            out[mode]["ref_speedup_per_prompt"] = {pr: round(by[(pr, mode)]["latency_s"] / by[(pr, ref)]["latency_s"], 3)
                                                   for pr in prompts if (pr, mode) in by and (pr, ref) in by
                                                   and "error" not in by[(pr, mode)] and "error" not in by[(pr, ref)]}
    return out


def render(results: dict[str, Any]) -> str:
    s = results["summary"]
    lines = [f"{results['meta']['date']}, {results['meta']['workload']} workload, greedy, {results['meta']['threads']} threads, "
             f"one interleaved run (load average at end {results['meta'].get('loadavg_at_end')})", "",
             f"| mode | latency p50 s | total s | × {s['reference']} e2e (p50 / geo) | decode tok/s p50 | tokens | valid | greedy = target |",
             "|---|---|---|---|---|---|---|---|"]
    for mode, v in s.items():
        if mode == "reference":
            continue
        lines.append(f"| {mode} | {v['latency_p50_s']} | {v['latency_sum_s']} | {v['x_ref_e2e_p50']} / {v['x_ref_e2e_geo']} | "
                     f"{v['tok_s_p50']} | {v['tokens_sum']} | {v['valid']} | {v['greedy_eq_target']} |")
    for mode, v in s.items():
        per = v.get("ref_speedup_per_prompt") if isinstance(v, dict) else None
        if per:
            lines += ["", f"{s['reference']} speed-up over {mode} end to end, per prompt (its latency / ours): median "
                      f"{statistics.median(per.values()):.2f}x, lowest {min(per.values()):.2f}x", "",
                      " ".join(f"{pr} {x:.2f}x;" for pr, x in per.items())]
    for rec in results.get("load", []):
        lines.append("")
        lines.append(f"load probe: {json.dumps(rec)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
