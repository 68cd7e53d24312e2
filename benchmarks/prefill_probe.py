"""Prefill seconds by prefill weights and split, for the default pair (the ``prefill_dtype`` lever).

For each model (target fp16w, draft int8w: the CPU defaults), each setting (``same``: the decode
weights; ``bf16`` / ``fp32``: a twin of the linear weights in that dtype, ``models.torch.prefill_twin``)
and each split (0: one forward), it times ``HFModel.prefill`` of 100 / 500 / 1000 prompt tokens
(real text: the held-out workload's prompts, tokenized and repeated), settings in alternation,
and reports the median. It also reports how far the bf16 twin's keys/values and next-token logits
are from the decode model's own prefill on the longest prompt (max abs difference, argmax kept).

    python benchmarks/prefill_probe.py --threads 1 --out results/prefill-probe.json
    python benchmarks/prefill_probe.py --models target --settings same bf16 --splits 0 128 --lengths 500

Wall times mean something only on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from constrained_spec.models.store.sources import DEFAULT_DRAFT, DEFAULT_TARGET  # noqa: E402
from constrained_spec.models.torch.hf import HFModel  # noqa: E402
from constrained_spec.models.torch.prefill_twin import attach_prefill  # noqa: E402
from constrained_spec.models.torch.resolve import resolve_model  # noqa: E402


def _prompt_ids(tokenizer, n: int) -> list[int]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import heldout

    text = "\n\n".join(p.prompt for p in heldout.load_workload())
    ids = tokenizer.encode(text, add_special_tokens=False)
    while len(ids) < n:
        ids = ids + ids
    return ids[:n]


def _time(model: HFModel, ids: list[int]) -> float:
    model.reset()
    start = time.perf_counter()
    model.prefill(ids)
    return time.perf_counter() - start


def _numerics(model: HFModel, ids: list[int], dtype: str) -> dict:
    """Keys/values and next-token logits after the decode weights' prefill vs the twin's."""
    out = {}
    caches, logits = [], []
    for setting in ("same", dtype):
        attach_prefill(model, setting)
        model.reset()
        model.prefill(ids[:-1])
        logits.append(model.extend(ids[-1:])[0])
        caches.append([(layer.keys.clone(), layer.values.clone()) for layer in model._cache.layers])
    kv = max(max((a[0] - b[0]).abs().max().item(), (a[1] - b[1]).abs().max().item()) for a, b in zip(*caches))
    scale = max(max(a[0].abs().max().item(), a[1].abs().max().item()) for a in caches[0])
    out["kv_max_abs_diff"] = kv
    out["kv_max_abs"] = scale
    out["logit_max_abs_diff"] = (logits[0] - logits[1]).abs().max().item()
    out["argmax_same"] = int(logits[0].argmax()) == int(logits[1].argmax())
    attach_prefill(model, "same")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["target", "draft"], choices=["target", "draft"])
    p.add_argument("--settings", nargs="+", default=["same", "bf16"], choices=["same", "bf16", "fp32"])
    p.add_argument("--splits", nargs="+", type=int, default=[0, 128])
    p.add_argument("--lengths", nargs="+", type=int, default=[100, 500, 1000])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    report: dict = {"threads": args.threads, "rows": [], "numerics": {}}
    for role in args.models:
        name = DEFAULT_TARGET if role == "target" else DEFAULT_DRAFT
        raw, tok = resolve_model(name, dtype="auto", progress=False, role=role, device="cpu")
        model = HFModel(raw)
        ids = _prompt_ids(tok, max(args.lengths))
        with torch.inference_mode():
            model.prefill(ids[:16])  # warm up the kernels
        for dtype in [s for s in args.settings if s != "same"]:
            report["numerics"][f"{role}-{dtype}"] = _numerics(model, ids, dtype)
            print(f"[probe] {role} {dtype} numerics: {report['numerics'][f'{role}-{dtype}']}", flush=True)
        for n in args.lengths:
            for split in args.splits:
                if split and split >= n:
                    continue
                times: dict[str, list[float]] = {s: [] for s in args.settings}
                for _ in range(args.repeats):
                    for setting in args.settings:  # alternated, so load changes hit all alike
                        twin = attach_prefill(model, setting, split)
                        times[setting].append(_time(model, ids[:n]))
                for setting, ts in times.items():
                    row = {"model": role, "tokens": n, "setting": setting, "split": split,
                           "seconds": statistics.median(ts), "all": ts}
                    report["rows"].append(row)
                    print(f"[probe] {role} n={n} {setting} split={split}: {row['seconds']:.2f} s {ts}", flush=True)
        report[f"{role}_twin_bytes"] = {s: attach_prefill(model, s) for s in args.settings}
        attach_prefill(model, "same")
        del model, raw, twin
    print("\n| model | tokens | setting | split | prefill s |\n|---|---|---|---|---|")
    for r in report["rows"]:
        print(f"| {r['model']} | {r['tokens']} | {r['setting']} | {r['split'] or 'one forward'} | {r['seconds']:.2f} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
