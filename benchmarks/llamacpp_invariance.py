"""Block vs one-token logits and the cost of batch invariance, on the real default target GGUF (llama.cpp runtime).

For each held-out prompt (``benchmarks/heldout.py``, never tuned on): the prompt is prefilled, then the
target's own greedy continuation is decoded one token at a time (those are the reference logits, at
``--positions`` positions in all); then the same continuation is fed in blocks of 2, 6 and 16, alone
and as row 0 of a ``LlamaCppRows`` whose other rows (other prompts) run in the same forwards. Printed per
setting: max |Δlogit| against the one-token logits, positions bitwise equal, argmax agreement, largest
total variation (T = 1). Settings: ``invariant`` (the patched build's batch-invariant weights) and
``default`` (the binding's default paths, flash attention off: the runtime before the patch).

Then the costs, per setting, medians of ``--repeats``: prefill tokens/s of a fresh ~400-token prompt
(``prefill``), one one-token forward, one 6-token verify (ms), with ``--threads`` threads.

    python benchmarks/llamacpp_invariance.py --threads 2 --out results/llamacpp-invariance
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402


def compare(ref: torch.Tensor, got: torch.Tensor) -> dict[str, float]:
    diff = (ref - got).abs()
    tv = 0.5 * (ref.softmax(-1) - got.softmax(-1)).abs().sum(-1)
    return {"max_abs": float(diff.max()), "max_logit": float(ref.abs().max()), "bitwise": int((diff.amax(-1) == 0).sum()),
            "positions": int(ref.shape[0]), "argmax_equal": int((ref.argmax(-1) == got.argmax(-1)).sum()), "max_tv": float(tv.max())}


def greedy_reference(weights: Any, prompt: list[int], n: int) -> tuple[list[int], torch.Tensor]:
    """The greedy continuation of ``prompt`` decoded one token at a time, and its logits [n, V]."""
    m = weights.sequence_model()
    m.prefill(prompt[:-1])
    tokens, rows, last = [], [], prompt[-1]
    for _ in range(n):
        logits = m.extend([last])[0]
        rows.append(logits)
        last = int(logits.argmax())
        tokens.append(last)
    return tokens, torch.stack(rows)


def sequence_blocks(weights: Any, prompt: list[int], cont: list[int], n: int) -> torch.Tensor:
    """Logits at the positions of ``greedy_reference`` with ``[prompt[-1]] + cont[:-1]`` fed in blocks of ``n``."""
    m = weights.sequence_model()
    m.prefill(prompt[:-1])
    feed = [prompt[-1]] + cont[:-1]
    return torch.cat([m.extend(feed[i : i + n]) for i in range(0, len(feed), n)])


def row_blocks(weights: Any, prompts: list[list[int]], conts: list[list[int]], n: int) -> torch.Tensor:
    """Row 0's logits when every prompt is a row and all rows feed their continuation in blocks of ``n`` together."""
    from constrained_spec.models.llamacpp.model import LlamaCppRows

    width = max(len(p) + len(c) for p, c in zip(prompts, conts)) + 1
    rows = LlamaCppRows(weights, slots=len(prompts), max_length=width)
    rows.forward([SimpleNamespace(slot=s, start=0, tokens=p[:-1], head="none") for s, p in enumerate(prompts)])
    feeds = [[p[-1]] + c[:-1] for p, c in zip(prompts, conts)]
    got = []
    for i in range(0, len(feeds[0]), n):
        calls = [SimpleNamespace(slot=s, start=len(prompts[s]) - 1 + i, tokens=f[i : i + n], head="all") for s, f in enumerate(feeds) if f[i : i + n]]
        got.append(rows.forward(calls)[0])
    return torch.cat(got)


def costs(weights: Any, prompt: list[int], repeats: int) -> dict[str, float]:
    prefill, one, six = [], [], []
    for _ in range(repeats):
        m = weights.sequence_model()
        start = time.perf_counter()
        m.prefill(prompt)
        prefill.append(len(prompt) / (time.perf_counter() - start))
        for times, block in ((one, prompt[:1]), (six, prompt[:6])):
            start = time.perf_counter()
            m.extend(block)
            times.append(1000 * (time.perf_counter() - start))
            m.crop(len(prompt))
    return {"prefill_tok_s": statistics.median(prefill), "one_token_ms": statistics.median(one), "verify6_ms": statistics.median(six)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--prompts", type=int, default=2, help="held-out prompts (each a row in the rows check)")
    ap.add_argument("--positions", type=int, default=50, help="positions in all (split over the prompts)")
    ap.add_argument("--blocks", type=int, nargs="+", default=[2, 6, 16])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--settings", nargs="+", default=["invariant", "default"])
    ap.add_argument("--no-costs", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from heldout import load_workload

    from constrained_spec.api import Generator
    from constrained_spec.models.llamacpp.model import LlamaCppWeights, load_llamacpp

    _, tokenizer = load_llamacpp(args.model, progress=False, n_ctx=2048)
    path = _.path
    del _
    gen = Generator(path, None, runtime="llamacpp", tokenizer=tokenizer, progress=False)
    items = load_workload(args.prompts)
    prompts = [gen.prompt_ids(it.prompt, gen.compile(it.schema).spec) for it in items]
    del gen
    per = -(-args.positions // len(prompts))
    long_prompt = (prompts[0] * 3)[:400]
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "model": args.model, "threads": args.threads,
                              "prompt_tokens": [len(p) for p in prompts], "positions": per * len(prompts), "settings": {}}
    print(f"# {args.model}, prompts of {[len(p) for p in prompts]} tokens, {per} positions each, {args.threads} threads", flush=True)
    for setting in args.settings:
        invariant = setting == "invariant"
        weights = LlamaCppWeights(path, threads=args.threads, n_ctx=2048, batch_invariant=invariant, flash_attn=invariant)
        refs = [greedy_reference(weights, p, per) for p in prompts]
        conts = [c for c, _ in refs]
        ref_all = torch.cat([r for _, r in refs])
        rows_out: list[dict[str, Any]] = []
        for n in args.blocks:
            alone = torch.cat([sequence_blocks(weights, p, c, n) for p, c in zip(prompts, conts)])
            rows_out.append({"mode": "alone", "block": n, **compare(ref_all, alone)})
            as_row = row_blocks(weights, prompts, conts, n)
            rows_out.append({"mode": f"row beside {len(prompts) - 1}", "block": n, **compare(refs[0][1], as_row)})
        for r in rows_out:
            print(f"{setting:9} {r['mode']:13} block {r['block']:2}: max|Δ| {r['max_abs']:.3g} (logits to {r['max_logit']:.1f}), bitwise "
                  f"{r['bitwise']}/{r['positions']}, argmax {r['argmax_equal']}/{r['positions']}, max TV {r['max_tv']:.3g}", flush=True)
        entry: dict[str, Any] = {"logits": rows_out}
        if not args.no_costs:
            entry["costs"] = costs(weights, long_prompt, args.repeats)
            c = entry["costs"]
            print(f"{setting:9} costs: prefill {c['prefill_tok_s']:.1f} tok/s ({len(long_prompt)} tokens), one-token forward "
                  f"{c['one_token_ms']:.0f} ms, 6-token verify {c['verify6_ms']:.0f} ms", flush=True)
        report["settings"][setting] = entry
        del weights
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
