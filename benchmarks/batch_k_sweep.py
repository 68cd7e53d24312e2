"""Draft length under load: 8 concurrent clients through one batch, with the per-row draft length
capped at 1, 2, 3, 5 or left to ``engine.draft_length.batch_draft_length`` (the default).

``python benchmarks/batch_k_sweep.py [--threads N]`` loads the default pair once with
``max_batch_size=8``; the first setting's run also prefills the prompts (cold), the later ones find
them in the prefix cache, so they compare decoding under load. Prints tok/s, p50 latency and wall
seconds per setting.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.concurrency import run_clients  # noqa: E402
from benchmarks.workload import load_workload  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/batch_k_sweep.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--caps", default="model,1,2,3,5,model", help="settings in order: a cap, or 'model' (the default rule)")
    args = p.parse_args(argv)
    import torch

    import constrained_spec.engine.draft_length as draft_length
    from constrained_spec.api import Generator

    if args.threads:
        torch.set_num_threads(args.threads)
    items = load_workload(args.clients)
    gen = Generator(progress=False, max_batch_size=args.clients, max_new_tokens=320)
    gen.run("Say hi.", {"type": "string", "maxLength": 4}, max_new_tokens=8)
    rule = draft_length.batch_draft_length
    for cap in args.caps.split(","):
        draft_length.batch_draft_length = rule if cap == "model" else (lambda rows, k, c=int(cap): min(k, c))
        r = run_clients(gen, items, args.clients, 320)
        print(f"cap {cap}: {r['throughput_tok_s']:.2f} tok/s, p50 {r['p50_s']:.1f} s, wall {r['wall_s']:.1f} s", flush=True)
    draft_length.batch_draft_length = rule
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
