"""SMC alignment on the real pair: speed by particle count and the quality of what is returned.

On the default models (Qwen2.5-Coder 1.5B target, 0.5B draft) and prompts of the held-out
workload (``benchmarks/heldout.py``, never tuned on), each prompt is first prefilled once into the
batch's prefix cache (``prefill_s``, not counted again); then for every temperature and seed it runs

- ``local``: today's default (``alignment="local"``), one row;
- ``smc:N``: ``alignment="smc", particles=N`` as N rows of the batch, speculative (the Generator's
  default proposers);
- ``smc:N:target``: the same on a Generator without a draft model (target-only rows), where asked.

and records the user's wait (``wall_s``: the request's wall time, its prompt restored from the
prefix cache), the returned value's tokens, the target forwards, and the quality of the value:

- ``loglik``: the target's own log-likelihood of the returned tokens given the prompt,
  log P(y | prompt) at temperature 1 with no mask, from a plain forward of the target (a separate
  target-only Generator's model; the prompt's cache kept between its answers): what SMC aims to raise where local masking
  wanders into text the model finds unlikely;
- ``fields``: fields of the answer exactly equal to what the prompt states (the workload's
  ``expected``), where it states any;
- ``log_z``: SMC's estimate of log P(y in L | prompt) at the request's temperature.

Then it prints per mode and temperature the mean over prompts x seeds (and a per-prompt table).

    python benchmarks/smc_real.py --threads 1 --seeds 3 --out results/smc_real.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

if str(Path(__file__).resolve().parent) not in sys.path:  # the sibling workload modules, wherever this runs from
    sys.path.append(str(Path(__file__).resolve().parent))

from bench import field_match  # noqa: E402
from heldout import load_workload  # noqa: E402

from constrained_spec import Generator  # noqa: E402
from constrained_spec.errors import TokenBudgetExceeded  # noqa: E402

DEFAULT_PROMPTS = "yes_no-no,integer-extract,date-extract,tools-flight,tools-restaurant,bug-extract"


class PromptScorer:
    """log P(y | prompt) under the target at T = 1, unmasked, from plain forwards of a target-only
    Generator's model: the prompt once per prompt (its cache kept, its last row of logits too),
    then each answer from the prompt's cached length."""

    def __init__(self, scorer: Generator) -> None:
        self.model = scorer.target
        self.prompt: list[int] = []
        self.last_row: torch.Tensor | None = None

    def loglik(self, prompt_ids: list[int], token_ids: list[int]) -> float:
        """The sum of log p(token | prefix) over ``token_ids``."""
        if not token_ids:
            return 0.0
        if prompt_ids != self.prompt or self.last_row is None:
            self.model.reset()
            self.last_row = self.model.extend(list(prompt_ids))[-1].double()
            self.prompt = list(prompt_ids)
        self.model.crop(len(prompt_ids))
        rows = torch.cat([self.last_row[None], self.model.extend(list(token_ids[:-1])).double()]) if len(token_ids) > 1 \
            else self.last_row[None]
        logp = torch.log_softmax(rows, dim=-1)
        return float(logp[torch.arange(len(token_ids)), torch.tensor(token_ids)].sum())


def run_one(gen: Generator, scorer: PromptScorer, item: Any, compiled: Any, prompt_ids: list[int], mode: str,
            temperature: float, seed: int, max_new_tokens: int) -> dict[str, Any]:
    """One request of ``mode`` (``local`` or ``smc:N[:target]``); its record."""
    options: dict[str, Any] = dict(temperature=temperature, seed=seed, max_new_tokens=max_new_tokens)
    if mode.startswith("smc"):
        options.update(alignment="smc", particles=int(mode.split(":")[1]))
    start = time.perf_counter()
    record: dict[str, Any] = {"prompt": item.id, "mode": mode, "temperature": temperature, "seed": seed}
    try:
        result = gen.run(item.prompt, compiled, **options)
    except Exception as exc:  # a request that fails (every particle died, the token budget): recorded, not fatal
        record.update(error=f"{type(exc).__name__}: {exc}", wall_s=time.perf_counter() - start)
        return record
    record.update(wall_s=time.perf_counter() - start, tokens=len(result.token_ids), text=result.text,
                  target_forwards=result.stats.target_forwards,
                  loglik=scorer.loglik(prompt_ids, result.token_ids))
    record["loglik_per_token"] = record["loglik"] / max(1, len(result.token_ids))
    if item.expected:
        got, _ = field_match(result.text, item.expected)
        record.update(fields=got, fields_expected=len(item.expected))
    if result.smc is not None:
        record.update(log_z=result.smc.log_z, resamples=result.smc.resamples,
                      particle_states=[p.state for p in result.smc.particles])
    return record


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (temperature, mode): means over the prompts and seeds that ran without error."""
    rows = []
    keys = sorted({(r["temperature"], r["mode"]) for r in records}, key=lambda k: (-k[0], _mode_order(k[1])))
    for temperature, mode in keys:
        ok = [r for r in records if r["temperature"] == temperature and r["mode"] == mode and "error" not in r]
        errors = sum(1 for r in records if r["temperature"] == temperature and r["mode"] == mode and "error" in r)
        if not ok:
            rows.append(dict(temperature=temperature, mode=mode, runs=0, errors=errors))
            continue
        fields = [r for r in ok if "fields" in r]
        rows.append(dict(
            temperature=temperature, mode=mode, runs=len(ok), errors=errors,
            wall_p50=statistics.median(r["wall_s"] for r in ok), wall_mean=statistics.fmean(r["wall_s"] for r in ok),
            tokens=statistics.fmean(r["tokens"] for r in ok),
            out_tok_s=sum(r["tokens"] for r in ok) / sum(r["wall_s"] for r in ok),
            target_forwards=statistics.fmean(r["target_forwards"] for r in ok),
            loglik=statistics.fmean(r["loglik"] for r in ok),
            loglik_se=statistics.stdev(r["loglik"] for r in ok) / math.sqrt(len(ok)) if len(ok) > 1 else float("nan"),
            fields=(sum(r["fields"] for r in fields), sum(r["fields_expected"] for r in fields)),
            log_z=statistics.fmean(r["log_z"] for r in ok) if all("log_z" in r for r in ok) else None))
    return rows


def _mode_order(mode: str) -> tuple[int, int, int]:
    if mode == "local":
        return (0, 0, 0)
    parts = mode.split(":")
    return (1, int(parts[1]), int(len(parts) > 2))


def render(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> str:
    """The summary table, then the mean log-likelihood per prompt and mode."""
    out = ["| T | mode | runs | wait p50 s | wait mean s | tokens | out tok/s | target fwd | loglik (se) | fields | log Z |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not r["runs"]:
            out.append(f"| {r['temperature']} | {r['mode']} | 0 ({r['errors']} errors) | | | | | | | | |")
            continue
        logz = f"{r['log_z']:.2f}" if r["log_z"] is not None else ""
        err = f" ({r['errors']} errors)" if r["errors"] else ""
        out.append(f"| {r['temperature']} | {r['mode']} | {r['runs']}{err} | {r['wall_p50']:.1f} | {r['wall_mean']:.1f} | "
                   f"{r['tokens']:.1f} | {r['out_tok_s']:.2f} | {r['target_forwards']:.1f} | "
                   f"{r['loglik']:.2f} ({r['loglik_se']:.2f}) | {r['fields'][0]}/{r['fields'][1]} | {logz} |")
    out += ["", "mean loglik per prompt (T, prompt: mode = value):"]
    for temperature in sorted({r["temperature"] for r in records}, reverse=True):
        for prompt in dict.fromkeys(r["prompt"] for r in records):
            cells = []
            for mode in sorted({r["mode"] for r in records}, key=_mode_order):
                vals = [r["loglik"] for r in records if r["prompt"] == prompt and r["mode"] == mode
                        and r["temperature"] == temperature and "loglik" in r]
                if vals:
                    cells.append(f"{mode} {statistics.fmean(vals):.2f}")
            out.append(f"  T={temperature} {prompt}: " + ", ".join(cells))
    return "\n".join(out)


def main() -> None:
    """Run the sweep and print the tables; ``--out`` also keeps every record as JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", default=DEFAULT_PROMPTS, help="held-out prompt ids, comma-separated")
    p.add_argument("--particles", default="1,4,8", help="SMC particle counts (speculative rows)")
    p.add_argument("--target-only", default="8", help="particle counts also run without the draft model ('' for none)")
    p.add_argument("--temperatures", default="1.0,0.7")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--runtime", default="auto", help="the Generators' runtime (auto keeps torch for a batched Generator)")
    p.add_argument("--out", default=None)
    p.add_argument("--render", default=None, help="print the tables of a JSON an earlier run wrote, and stop")
    args = p.parse_args()
    if args.render:
        records = json.loads(Path(args.render).read_text())["records"]
        print(render(summarize(records), records))
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    particles = [int(x) for x in args.particles.split(",") if x]
    target_only = [int(x) for x in args.target_only.split(",") if x]
    temperatures = [float(x) for x in args.temperatures.split(",")]
    slots = max(particles + target_only + [2])
    t0 = time.perf_counter()
    gen = Generator(progress=False, max_batch_size=slots, max_new_tokens=args.max_new_tokens, runtime=args.runtime)
    alone = Generator(draft=None, progress=False, max_batch_size=slots, max_new_tokens=args.max_new_tokens,
                      runtime=args.runtime) if target_only else None
    scorer = PromptScorer(Generator(draft=None, progress=False, runtime="torch"))
    load_s = time.perf_counter() - t0
    items = {p.id: p for p in load_workload()}
    chosen = [items[i] for i in args.prompts.split(",")]
    modes = ["local"] + [f"smc:{n}" for n in particles] + [f"smc:{n}:target" for n in target_only]
    records: list[dict[str, Any]] = []
    prefill: dict[str, float] = {}
    for item in chosen:
        compiled = gen.compile(item.schema)
        prompt_ids = gen.prompt_ids(item.prompt, compiled.spec)
        for g in filter(None, (gen, alone)):  # warm each batch's prefix cache with the prompt
            start = time.perf_counter()
            try:
                g.run(item.prompt, compiled, max_new_tokens=1, temperature=0.0)
            except TokenBudgetExceeded:  # one token is not a whole value: the prefill is what counts here
                pass
            prefill[f"{item.id}{'' if g is gen else ':target'}"] = time.perf_counter() - start
        for temperature in temperatures:
            for seed in range(args.seeds):
                for mode in modes:
                    g = alone if mode.endswith(":target") else gen
                    assert g is not None
                    rec = run_one(g, scorer, item, compiled, prompt_ids, mode, temperature, seed, args.max_new_tokens)
                    rec["prompt_tokens"] = len(prompt_ids)
                    records.append(rec)
                    sys.stderr.write(f"{item.id} T={temperature} seed={seed} {mode}: "
                                     f"{rec.get('wall_s', 0):.1f} s loglik {rec.get('loglik', float('nan')):.2f} "
                                     f"{rec.get('error', '')}\n")
        if args.out:  # kept after each prompt: a run cut short still leaves its records (``--render``)
            save(args.out, vars(args), load_s, prefill, records)
    print(f"# SMC on the real pair, {datetime.now(timezone.utc):%Y-%m-%d} (threads {torch.get_num_threads()}, "
          f"load {load_s:.1f} s, runtime {args.runtime}; prompts prefilled once: "
          + ", ".join(f"{k} {v:.1f} s" for k, v in prefill.items()) + ")")
    print(render(summarize(records), records))


def save(path: str, args: dict[str, Any], load_s: float, prefill: dict[str, float], records: list[dict[str, Any]]) -> None:
    """The run so far as JSON."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(dict(args=args, load_s=load_s, prefill_s=prefill, summary=summarize(records),
                                          records=records), indent=1))

if __name__ == "__main__":
    main()
