"""SMC side by side with genlm-control: TV to the exact P(y | L) and wall time, by particle count.

The enumerable case of ``benchmarks/smc_bench.py`` (the tests' hash-seeded model over the 10-token
vocabulary a, b, c, ab, ba, bc, ca, abc, cc, EOS; the language ab | cac | bb | c; the prompt [0, 1];
T = 1), sampled by

- ``ours``: :class:`~constrained_spec.engine.smc.SMCDecoder`, target only (``k`` = 0) and with the
  hash draft (``--k``), particles one after another (the bench's ``alone`` path);
- genlm-control (``genlm.control``) over the same logits: :class:`HashPotential` below (a
  ``Potential`` whose ``logw_next`` is the softmax of the same logits, the tokens byte strings,
  EOS genlm's ``EOS``) and ``BoolFSA.from_regex`` of the language coerced to those tokens:

  - ``genlm-direct``: ``DirectTokenSampler(lm * fsa)``: the locally constrained proposal, weight
    the allowed mass (the same algorithm as ours at ``k`` = 0);
  - ``genlm-critic``: ``DirectTokenSampler(lm)`` with the FSA as the SMC's critic (twist):
    unconstrained proposal, particles outside L get weight 0;
  - ``genlm-awrs``: ``AWRS(lm, fsa)``: adaptive weighted rejection sampling, the sampler its
    docs recommend for a boolean constraint.

  All with ``ess_threshold`` 0.5 and systematic resampling (ours' settings).

Per sampler and N: ``tv`` is the total variation between P(y | L) and the mean over runs of each
run's particle distribution (normalised weights: the law of a sample drawn by weight), with a
bootstrap standard error over runs (``tv_se``); ``tv_samples`` from one sample per run drawn by
weight; ``z_ratio`` the mean Z estimate over the exact Z; ``ms_per_request`` wall milliseconds.
Runs under a Python with genlm-control (its own virtualenv; this checkout's package is imported from here):

    /work/venv-genlm/bin/python benchmarks/smc_genlm_compare.py --runs 1000 --out results/smc_genlm.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
# benchmarks/coverage.py would shadow the coverage package (numba, under genlm-control, imports it)
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))
from benchmarks.smc_bench import DRAFT_SEED, PROMPT, STRINGS, VOCAB, HashModel, exact  # noqa: E402
from constrained_spec.config import DecodeConfig  # noqa: E402
from constrained_spec.engine.loop import SpeculativeDecoder  # noqa: E402
from constrained_spec.engine.smc import SMCDecoder, SMCOptions  # noqa: E402
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler, AutomatonMatcher  # noqa: E402
from constrained_spec.sampling import SamplingPolicy, verify  # noqa: E402

EOS_ID = VOCAB.eos_token_ids[0]
Seq = tuple[int, ...]


def tv_of(dist: dict, cond: dict) -> float:
    return 0.5 * sum(abs(dist.get(y, 0.0) - cond.get(y, 0.0)) for y in set(dist) | set(cond))


def summarise(name: str, n: int, runs: list[dict], samples: list[Seq], zs: list[float], wall: float,
              cond: dict, z: float, rng: np.random.Generator) -> dict:
    """One table row from per-run particle distributions (``runs``), returned samples, Z estimates."""
    r = len(runs)
    keys = sorted(cond)
    mat = np.array([[d.get(y, 0.0) for y in keys] for d in runs])  # runs x outcomes (mass off L counts as missing)
    target = np.array([cond[y] for y in keys])

    def tv_rows(rows: np.ndarray) -> float:
        mean = mat[rows].mean(0)
        return 0.5 * (float(np.abs(mean - target).sum()) + max(0.0, 1.0 - float(mean.sum())))

    boots = [tv_rows(rng.integers(0, r, r)) for _ in range(200)]
    counts = Counter(samples)
    mean_z = sum(zs) / r
    return {"sampler": name, "particles": n, "runs": r, "tv": round(tv_rows(np.arange(r)), 4),
            "tv_se": round(float(np.std(boots)), 4),
            "tv_samples": round(tv_of({y: c / r for y, c in counts.items()}, cond), 4),
            "z_ratio": round(mean_z / z, 4), "ms_per_request": round(1000 * wall / r, 2)}


def run_ours(n: int, k: int, runs: int, seed: int, scale: float) -> tuple[list[dict], list[Seq], list[float], float]:
    automaton = AutomatonCompiler(VOCAB, disk_cache=False, compile_timeout=None).compile("|".join(STRINGS))
    policy = SamplingPolicy(temperature=1.0)
    gen = torch.Generator().manual_seed(7919 * n + k)
    config = DecodeConfig(num_draft_tokens=k, draft_plan="always")

    def build(t, d, matcher, verifier, generator):  # type: ignore[no-untyped-def]
        return SpeculativeDecoder(t, d, matcher, policy, config, max_new_tokens=16, verifier=verifier, generator=generator)

    dists, samples, zs = [], [], []
    start = time.perf_counter()
    for _ in range(runs):
        target, draft = HashModel(seed, scale), (HashModel(DRAFT_SEED, 2.0) if k else None)
        smc = SMCDecoder(build, target, draft, lambda: AutomatonMatcher(automaton), policy, verify,
                         options=SMCOptions(n), max_new_tokens=16, generator=gen)
        result = smc.run(PROMPT)
        dist: dict = {}
        for p in result.particles:
            dist[tuple(p.token_ids)] = dist.get(tuple(p.token_ids), 0.0) + p.weight
        dists.append(dist)
        samples.append(tuple(result.token_ids))
        zs.append(math.exp(result.log_z))
    return dists, samples, zs, time.perf_counter() - start


def genlm_samplers(seed: int, scale: float, cond: dict) -> dict[str, Callable[[], object]]:
    """The genlm-control samplers over the synthetic logits, by name (built lazily: genlm imports
    slowly), after checking the adapter: genlm-control's own potential contract on a few contexts,
    and that the product potential's normalised complete weights are ``cond`` (the same target)."""
    from genlm.control import AWRS, SMC, BoolFSA, Potential
    from genlm.control.sampler import DirectTokenSampler

    ids = {tok: i for i, tok in VOCAB.tokens.items()}

    class HashPotential(Potential):
        """The synthetic model as a genlm-control potential: the next-token log probabilities of
        ``HashModel(seed, scale)`` after ``PROMPT``, over the byte-string tokens and EOS (last)."""

        def __init__(self) -> None:
            super().__init__([VOCAB.tokens[i] for i in range(EOS_ID)])
            self.model = HashModel(seed, scale)

        def _logp(self, context: list) -> np.ndarray:
            logits = self.model.logits(PROMPT + [ids[t] for t in context]).double()
            return torch.log_softmax(logits, -1).numpy()

        async def logw_next(self, context):  # type: ignore[no-untyped-def]
            return self.make_lazy_weights(self._logp(context))

        async def prefix(self, context):  # type: ignore[no-untyped-def]
            return float(sum(self._logp(context[:i])[ids[t]] for i, t in enumerate(context)))

        async def complete(self, context):  # type: ignore[no-untyped-def]
            return await self.prefix(context) + float(self._logp(context)[EOS_ID])

    lm = HashPotential()
    fsa = BoolFSA.from_regex("|".join(STRINGS)).coerce(lm, f=b"".join, prune=False)
    product = lm * fsa

    async def check() -> None:
        await lm.assert_contract([[], [b"a"], [b"c", b"a"], [b"abc", b"cc"]])
        joint = {y: math.exp(await product.complete([VOCAB.tokens[t] for t in y])) for y in cond}
        total = sum(joint.values())
        assert all(abs(joint[y] / total - cond[y]) < 1e-9 for y in cond), "genlm-control's target is not P(y | L)"

    asyncio.run(check())
    return {
        "genlm-direct": lambda: SMC(DirectTokenSampler(product)),
        "genlm-critic": lambda: SMC(DirectTokenSampler(lm), critic=fsa),
        "genlm-awrs": lambda: SMC(AWRS(lm, fsa, seed=seed)),
    }


def run_genlm(make: Callable[[], object], n: int, runs: int, lookup: dict) -> tuple[list[dict], list[Seq], list[float], float]:
    sampler = make()
    pick = np.random.default_rng(n)

    async def go() -> tuple[list[dict], list[Seq], list[float], float]:
        dists, samples, zs = [], [], []
        start = time.perf_counter()
        for _ in range(runs):
            seqs = await sampler(n_particles=n, ess_threshold=0.5, max_tokens=16,  # type: ignore[operator]
                                 resampling_method="systematic")
            dist: dict = {}
            names = []
            for ctx, w in zip(seqs.contexts, seqs.normalized_weights):
                y = tuple(lookup[t] for t in ctx if t in lookup)  # EOS dropped
                names.append(y)
                dist[y] = dist.get(y, 0.0) + float(w)
            dists.append(dist)
            weights = np.asarray(seqs.normalized_weights, dtype=float)
            samples.append(names[int(pick.choice(len(names), p=weights / weights.sum()))] if weights.sum() > 0 else ())
            zs.append(math.exp(seqs.log_ml))
        return dists, samples, zs, time.perf_counter() - start

    return asyncio.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--particles", default="1,2,4,8,16,32")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--k", default="0,3", help="our draft lengths (0: target only)")
    parser.add_argument("--samplers", default="ours,genlm-direct,genlm-critic,genlm-awrs")
    parser.add_argument("--seed", type=int, default=13, help="the synthetic target's seed")
    parser.add_argument("--scale", type=float, default=1.5, help="the synthetic target's logit scale")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here (an ignored folder: results/)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cond, local, z = exact(1.0, args.seed, args.scale)
    print(f"exact P(y | L): {len(cond)} token sequences, Z = {z:.4f}, local masking TV = {tv_of(local, cond):.4f}", flush=True)
    names = args.samplers.split(",")
    samplers = genlm_samplers(args.seed, args.scale, cond) if any(s.startswith("genlm") for s in names) else {}
    lookup = {tok: i for i, tok in VOCAB.tokens.items()}
    rng = np.random.default_rng(0)
    rows = []
    for n in map(int, args.particles.split(",")):
        for name in names:
            variants = [(f"ours k={k}", lambda k=k: run_ours(n, k, args.runs, args.seed, args.scale)) for k in map(int, args.k.split(","))] \
                if name == "ours" else [(name, lambda name=name: run_genlm(samplers[name], n, args.runs, lookup))]
            for label, go in variants:
                torch.manual_seed(n)  # genlm-control draws tokens from the global torch generator
                np.random.seed(n)  # and resamples with numpy's
                dists, samples, zs, wall = go()
                row = summarise(label, n, dists, samples, zs, wall, cond, z, rng)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print("\ntv ± bootstrap se, ms per request")
    print(f"{'sampler':<14}" + "".join(f"{'N=' + str(n):>20}" for n in map(int, args.particles.split(","))))
    for label in dict.fromkeys(r["sampler"] for r in rows):
        cells = [f"{r['tv']:.3f}±{r['tv_se']:.3f} {r['ms_per_request']:.0f}ms" for r in rows if r["sampler"] == label]
        print(f"{label:<14}" + "".join(f"{c:>20}" for c in cells))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        versions = {}
        for pkg in ("genlm-control", "genlm-backend", "torch", "transformers"):
            try:
                from importlib.metadata import version

                versions[pkg] = version(pkg)
            except Exception:  # noqa: BLE001 - a missing package is reported as absent
                versions[pkg] = None
        Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d", time.gmtime()), "args": vars(args),
                                              "versions": versions, "exact_z": z, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
