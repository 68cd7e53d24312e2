"""Cost of one cached forward in fp32, fp16w / int8w (fp16 / int8 weights packed for fbgemm) and
bf16, per model.

For each model and dtype: a ~200-token prompt is prefilled once into a DynamicCache; then a forward
of ``n`` new tokens on top of that cache is timed (the cache is cropped back after each run), for
each ``n`` in ``--new``. It also checks how far the logits of one ``n``-token forward are from
``n`` single-token forwards (the numerical effect that can make greedy speculative output part
from greedy target-only output) and prints the figures that ``dtype="auto"`` is based on.

    python benchmarks/dtype_probe.py                      # both Qwen models, n = 1 and 5
    python benchmarks/dtype_probe.py --new 1 2 3 5 9 --repeats 7
    python benchmarks/dtype_probe.py --models smollm2-135m
    python benchmarks/dtype_probe.py --threads 1           # on a busy machine: see below
    python benchmarks/dtype_probe.py --models qwen2.5-coder-0.5b --dtypes fp16w int8w --threads 1

Wall times are only meaningful on a quiet machine. On a shared 2-core box with a load average of
5-7, torch's default 2 threads spin and wait on each other and a forward takes 3-7x longer than
with ``--threads 1``; the CPU-time column [..] and ``--threads 1`` runs stay comparable. The dtypes
are timed in alternation so that load changes hit all alike.

Needs the converted models (``constrained-spec fetch-models``; it converts them if missing).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from constrained_spec.models.store.sources import DEFAULT_PAIR  # noqa: E402
from constrained_spec.models.torch.convert import META_FILE, converted_dir, ensure_converted  # noqa: E402
from constrained_spec.models.torch.dtypes import PACKED_TAGS, auto_dtype, torch_dtype_of  # noqa: E402

PROMPT = (
    "You are a careful assistant that answers with one JSON object and nothing else.\n"
    "Schema: an object with the keys name (string), age (integer, 0 to 150), email (string), "
    "tags (array of at most five short strings), address (object with street, city, zip and "
    "country), and active (boolean). Use the data below; leave out nothing, invent nothing.\n\n"
    "Record 17 of the customer export, as typed by the clerk: Ada Lovelace, born 1815, age given "
    "as 36 at the time of the letter, writes from 12 St James's Square, London, SW1Y 4JH, England. "
    "Mail goes to ada@analytical.example. Tags from the CRM: mathematics, poetry of science, "
    "engines, notes. Her account is active and was last touched by the migration script in March.\n"
    "Another note from the clerk: the city field once held the string 'Londn' in an older import; "
    "that was a typo and has been corrected since, so do not copy it. Zip codes are strings here.\n\n"
    'Answer: {"name": "Ada Lovelace", "age": 36, "email": "ada@analytical.example", "tags": ['
)


def _load(name: str, dtype: str, cache_dir: str | None):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = converted_dir(name, "fp32", cache_dir)
    if not (folder / META_FILE).is_file():
        folder = ensure_converted(name, cache_dir, "fp32")
    torch_dtype = torch_dtype_of(dtype)  # fp16w / int8w load fp32, then pack
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, local_files_only=True).eval()
    if dtype in PACKED_TAGS:
        from constrained_spec.models.torch.packed_linear import pack_linears

        pack_linears(model, weights=PACKED_TAGS[dtype])
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return model, tok, time.perf_counter() - t0


class _Slot:
    """One model in one dtype with a prefilled cache of the context, ready for timed forwards."""

    @torch.inference_mode()
    def __init__(self, model, ids: torch.Tensor, n_max: int) -> None:
        from transformers import DynamicCache

        self.model = model
        self.extra = ids[:, -n_max:]
        self.cache = DynamicCache(config=model.config)
        model(ids[:, :-n_max], cache=self.cache, use_cache=True)
        self.base = self.cache.get_seq_length()

    @torch.inference_mode()
    def forward_ms(self, n: int) -> tuple[float, float]:
        """Wall and CPU (all threads of this process) milliseconds of one forward of n tokens."""
        c0, t0 = time.process_time(), time.perf_counter()
        self.model(self.extra[:, :n], cache=self.cache, use_cache=True)
        dt = ((time.perf_counter() - t0) * 1000, (time.process_time() - c0) * 1000)
        self.cache.crop(-n)  # this transformers version takes a negative count of tokens to drop
        assert self.cache.get_seq_length() == self.base
        return dt

    @torch.inference_mode()
    def block_vs_single(self) -> dict:
        """One forward of all extra tokens against one-token forwards at the same positions."""
        n = self.extra.shape[1]
        block = self.model(self.extra, cache=self.cache, use_cache=True).logits[0].float()
        self.cache.crop(-n)
        single = []
        for i in range(n):
            out = self.model(self.extra[:, i : i + 1], cache=self.cache, use_cache=True)
            single.append(out.logits[0, -1].float())
        self.cache.crop(-n)
        single_t = torch.stack(single)
        return {
            "n": n,
            "max_abs_logit_diff": (block - single_t).abs().max().item(),
            "argmax_agree": int((block.argmax(-1) == single_t.argmax(-1)).sum().item()),
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_PAIR))
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "fp16w", "bf16"],
                    choices=["fp32", "fp16w", "int8w", "bf16"])
    ap.add_argument("--new", nargs="+", type=int, default=[1, 5], help="new tokens per forward")
    ap.add_argument("--context", type=int, default=200, help="tokens of context in the cache")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    caps = {k: getattr(torch.cpu, f"_is_{k}_supported")() for k in ("avx512", "avx512_bf16", "amx_tile")}
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, cpu capability "
        f"{torch.backends.cpu.get_cpu_capability()}, {caps}, cpus {os.cpu_count()}, "
        f"load average {os.getloadavg()[0]:.2f} (other processes skew the figures)"
    )
    print(
        f"context {args.context} tokens; ms per forward: wall median (wall min) [CPU median], "
        f"{args.repeats} runs, dtypes timed in alternation\n"
    )
    rows = []
    for name in args.models:
        # All dtypes of one model are loaded together and timed in alternation, so that a change in
        # the machine's load (other processes) hits them alike.
        slots, loads = {}, {}
        for dtype in args.dtypes:
            model, tok, loads[dtype] = _load(name, dtype, args.cache_dir)
            ids = tok(PROMPT * 4, return_tensors="pt").input_ids[:, : args.context + max(args.new)]
            if ids.shape[1] < args.context + max(args.new):
                raise SystemExit("prompt too short for --context")
            slots[dtype] = _Slot(model, ids, max(args.new))
        times = {d: {n: [] for n in args.new} for d in args.dtypes}
        cpu = {d: {n: [] for n in args.new} for d in args.dtypes}
        for rep in range(args.repeats + 2):  # the first two rounds warm up
            for dtype, slot in slots.items():
                for n in args.new:
                    wall, cpu_ms = slot.forward_ms(n)
                    if rep >= 2:
                        times[dtype][n].append(wall)
                        cpu[dtype][n].append(cpu_ms)
        for dtype, slot in slots.items():
            diff = slot.block_vs_single()
            cells = "  ".join(
                f"n={n}: {statistics.median(v):7.1f} ({min(v):6.1f}) [{statistics.median(cpu[dtype][n]):7.1f}]"
                for n, v in times[dtype].items()
            )
            print(
                f"{name:20s} {dtype:5s} load {loads[dtype]:5.1f}s  {cells}   "
                f"{diff['n']}-token vs 1-token logits: max|d| {diff['max_abs_logit_diff']:.2e}, "
                f"argmax agree {diff['argmax_agree']}/{diff['n']}",
                flush=True,
            )
            rows.append((
                name, dtype,
                {n: statistics.median(v) for n, v in times[dtype].items()},
                {n: statistics.median(v) for n, v in cpu[dtype].items()},
            ))
        print(f"{'':26s} load average now {os.getloadavg()[0]:.2f}", flush=True)
        del slots, slot, model
        gc.collect()
    print()
    for name in args.models:
        med = {d: (t, c) for (m, d, t, c) in rows if m == name}
        base = "fp32" if "fp32" in med else "fp16w"
        for other in ("fp16w", "int8w", "bf16"):
            if other != base and {base, other} <= med.keys():
                ratio = "  ".join(
                    f"n={n}: wall {med[other][0][n] / med[base][0][n]:.2f}x, "
                    f"CPU {med[other][1][n] / med[base][1][n]:.2f}x"
                    for n in args.new
                )
                print(f"{name:20s} {other}/{base}  {ratio}")
        if len(args.new) > 1 and med:
            for d, (t, _) in med.items():
                lo, hi = min(args.new), max(args.new)
                print(f"{name:20s} {d}: a {hi}-token forward costs {t[hi] / t[lo]:.2f}x a {lo}-token one")
    print(f"\ndtype='auto' picks: draft {auto_dtype('draft')}, target {auto_dtype('target')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
