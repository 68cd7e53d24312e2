"""Our own cost per decode step on llama.cpp, against the target forward it wraps.

``python benchmarks/step_cost.py`` loads the default target GGUF on the llama.cpp runtime and, for
each of the first ``--prompts`` held-out prompts (never tuned on), decodes target-only (k = 0,
greedy; every step is one one-token forward, so each step's cost is the forward plus ours), timing
every ``llama_decode`` (a wrapper around the binding's function, nothing else changed).
It prints per prompt: steps, the forward's median ms, the step's median ms and ours = step − forward
(copying logits out, the grammar mask, sampling, the loop in Python) as ms and as a share of the
forward. Interleaved with nothing: run it on a quiet host. ``--out`` (default ``results/step-cost``)
gets the per-step timings as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


class TimedDecode:
    """Wraps the binding's ``llama_decode``: the token count and seconds of each call, appended to ``calls``."""

    def __init__(self, decode: Any) -> None:
        self.decode = decode
        self.calls: list[tuple[int, float]] = []

    def __call__(self, ctx: Any, batch: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.decode(ctx, batch)
        finally:
            self.calls.append((int(batch.n_tokens), time.perf_counter() - t0))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=3, help="held-out prompts (default 3)")
    p.add_argument("--max-new-tokens", type=int, default=400)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "results" / "step-cost"))
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from heldout import load_workload

    from constrained_spec.api import Generator
    from constrained_spec.errors import TokenBudgetExceeded

    gen = Generator(runtime="llamacpp", draft=None, progress=False, max_new_tokens=args.max_new_tokens)
    out: list[dict[str, Any]] = []
    target: Any = gen.target
    lib = target._ctx._lib  # the binding's module: the context calls lib.llama_decode at each forward
    for prompt in load_workload()[: args.prompts]:
        stamps: list[float] = []
        timed = TimedDecode(lib.llama_decode)
        lib.llama_decode = timed
        try:
            stats = gen.run(prompt.prompt, prompt.schema, num_draft_tokens=0, on_step=lambda: stamps.append(time.perf_counter())).stats
        except TokenBudgetExceeded as exc:  # the steps ran all the same: their costs count
            stats = exc.stats
        finally:
            lib.llama_decode = timed.decode
        steps = [b - a for a, b in zip(stamps, stamps[1:])]  # from one step's end to the next's: one whole step
        one_token = [s for n, s in timed.calls if n == 1]
        forward_ms = statistics.median(one_token) * 1e3
        step_ms = statistics.median(steps) * 1e3
        ours = step_ms - forward_ms
        row = {"prompt": prompt.id, "steps": len(steps), "tokens": stats.generated_tokens, "forward_ms": round(forward_ms, 2),
               "step_ms": round(step_ms, 2), "ours_ms": round(ours, 2), "ours_share": round(ours / forward_ms, 4),
               "mask_ms_per_step": round(stats.mask_seconds / max(1, stats.steps) * 1e3, 3),
               "sampling_ms_per_step": round(stats.sampling_seconds / max(1, stats.steps) * 1e3, 3)}
        out.append({**row, "forward_s": one_token, "step_s": steps})
        print(json.dumps(row), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "step-cost.json").write_text(json.dumps(out))
    shares = [r["ours_share"] for r in out]
    print(f"ours per step: {statistics.median(shares) * 100:.1f}% of a target forward (median over {len(out)} prompts; "
          f"{min(shares) * 100:.1f}-{max(shares) * 100:.1f}%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
