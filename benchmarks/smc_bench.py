"""SMC alignment on an enumerable case: total variation to P(y | L) and speed by particle count.

A synthetic model (logits a hash of the prefix: a plain function, so P(y | L) is enumerated exactly
by walking the language's token sequences) over a 10-token vocabulary, the language a handful of
strings (the case of tests/engine/test_smc.py: local masking is 0.60 away from P(y | L) at T = 1).
For each particle count and draft length it runs ``--runs`` SMC requests and prints:

- ``tv``: total variation between P(y | L) and the returned sample's distribution, estimated from
  every run's particles and normalised weights (unbiased for it, far less noisy than the samples);
- ``tv_samples``: the same from the returned samples alone; ``chi2_p``: their chi-square p-value;
- ``z_ratio``: the mean of the Z estimates over the exact Z (1 is unbiased), with its standard error;
- ``tok_s``: tokens the particles committed per second (the work), ``out_tok_s``: tokens of the
  returned samples per second of wall time (the user's view);
- ``target_forwards``: the target's forwards per request (prefill left out), ``particle_steps``:
  the particles' engine steps per request (each verifies once).

``--paths alone,rows`` runs each row both ways: particles one after another (``alone``), and as
rows of a :class:`~constrained_spec.engine.batching.BatchCoordinator` (``rows``: a round's steps
share their forwards). The synthetic model costs the same per row either way, so its wall times
show the threads' overhead, and its forward counts what batching saves.

``--models tiny`` instead runs ``Generator.run(alignment="smc")`` on two tiny random Llamas (the
tests' ``tiny_llama``, GPT-2's vocabulary), alone (a Generator without a batch) and as rows (one
with ``max_batch_size`` = the largest N): wall seconds per request and target forwards.

    python benchmarks/smc_bench.py --particles 1,4,8 --runs 200 --k 0,3 --out results/smc.json
    python benchmarks/smc_bench.py --models tiny --particles 1,4,8 --runs 5 --k 0,3 --paths alone,rows
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from pathlib import Path

import torch

from constrained_spec.config import DecodeConfig
from constrained_spec.engine.batching import BatchCoordinator
from constrained_spec.engine.loop import SpeculativeDecoder
from constrained_spec.engine.smc import SMCDecoder, SMCOptions
from constrained_spec.engine.smc_rows import ParticleRows
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler, AutomatonMatcher
from constrained_spec.sampling import SamplingPolicy, verify

TESTS = Path(__file__).resolve().parent.parent / "tests"
if str(TESTS) not in sys.path:  # the tests' synthetic models, shared (run from anywhere in a clone)
    sys.path.insert(0, str(TESTS))
from synthetic import BatchedPrefixModel, ForkModel, chi2_pvalue, letters_vocab  # noqa: E402

VOCAB = letters_vocab()
STRINGS = ("ab", "cac", "bb", "c")
PROMPT = [0, 1]
DRAFT_SEED = 22


class HashModel(ForkModel):
    """The tests' memoised, forkable hash model over the 10-token vocabulary; ``extends`` counts
    the target's extend() calls alone (the forwards of particles run one after another)."""

    extends = 0

    def __init__(self, seed: int, scale: float) -> None:
        super().__init__(VOCAB.size, seed, scale)

    def extend(self, tokens: list[int]) -> torch.Tensor:
        if self.seed != DRAFT_SEED:
            HashModel.extends += 1
        return super().extend(tokens)


class HashRows(BatchedPrefixModel):
    """:class:`HashModel` logits over ``slots`` rows (the tests' RowBackend), counting the
    forwards that return logits (prompt prefills left out) in ``forwards``."""

    def __init__(self, model: HashModel, slots: int, max_length: int = 64) -> None:
        super().__init__(model, slots, max_length)
        self.forwards = 0

    def forward(self, calls: list) -> list:  # type: ignore[type-arg]
        self.forwards += any(c.head != "none" for c in calls)
        return super().forward(calls)


def exact(temperature: float, seed: int, scale: float) -> tuple[dict, dict, float]:
    """P(y | L), the local Q(y) and Z over token sequences, by walking the strings' prefixes."""
    model = HashModel(seed, scale)
    joint: dict = {}
    local: dict = {}

    def walk(text: str, seq: tuple, pj: float, pl: float) -> None:
        p = torch.softmax(model.logits(PROMPT + list(seq)).double() / temperature, -1)
        allowed = [t for t, raw in VOCAB.tokens.items() if any(s.startswith(text + raw.decode()) for s in STRINGS)]
        mass = sum(float(p[t]) for t in allowed) + (float(p[9]) if text in STRINGS else 0.0)
        if text in STRINGS:
            joint[seq], local[seq] = pj * float(p[9]), pl * float(p[9]) / mass
        for t in allowed:
            walk(text + VOCAB.tokens[t].decode(), seq + (t,), pj * float(p[t]), pl * float(p[t]) / mass)

    walk("", (), 1.0, 1.0)
    z = sum(joint.values())
    return {y: v / z for y, v in joint.items()}, local, z


def run(particles: int, k: int, runs: int, temperature: float, seed: int, scale: float, path: str = "alone") -> dict:
    cond, local, z = exact(temperature, seed, scale)
    automaton = AutomatonCompiler(VOCAB, disk_cache=False, compile_timeout=None).compile("|".join(STRINGS))
    policy = SamplingPolicy(temperature=temperature)
    gen = torch.Generator().manual_seed(1000 * particles + k)
    config = DecodeConfig(num_draft_tokens=k, draft_plan="always")

    def build(t, d, matcher, verifier, generator):  # type: ignore[no-untyped-def]
        return SpeculativeDecoder(t, d, matcher, policy, config, max_new_tokens=16, verifier=verifier, generator=generator)

    counts: Counter = Counter()
    blended: Counter = Counter()
    zs, work, out, steps = [], 0, 0, 0
    batch = None
    if path == "rows":
        models = {"target": HashRows(HashModel(seed, scale), particles)}
        if k:
            models["draft"] = HashRows(HashModel(DRAFT_SEED, 2.0), particles)
        batch = BatchCoordinator(models, prefix_cache_bytes=0)  # type: ignore[arg-type]
    before = HashModel.extends
    start = time.perf_counter()
    for _ in range(runs):
        new_matcher = lambda: AutomatonMatcher(automaton)  # noqa: E731
        if batch is not None:
            with ParticleRows(batch, particles, draft=bool(k)) as rows:
                target, draft = rows.fresh()
                smc = SMCDecoder(build, target, draft, new_matcher, policy, batch.verifier(verify), options=SMCOptions(particles),
                                 max_new_tokens=16, generator=gen)
                result = smc.on_rows(rows).run(PROMPT)
        else:
            target, draft = HashModel(seed, scale), (HashModel(DRAFT_SEED, 2.0) if k else None)
            smc = SMCDecoder(build, target, draft, new_matcher, policy, verify, options=SMCOptions(particles),
                             max_new_tokens=16, generator=gen)
            result = smc.run(PROMPT)
        steps += result.stats.steps
        counts[tuple(result.token_ids)] += 1
        for p in result.particles:
            blended[tuple(p.token_ids)] += p.weight / runs
        zs.append(math.exp(result.log_z))
        work += result.stats.generated_tokens
        out += len(result.token_ids)
    wall = time.perf_counter() - start
    forwards = batch.models["target"].forwards if batch is not None else HashModel.extends - before - runs  # type: ignore[attr-defined]
    mean = sum(zs) / runs
    se = math.sqrt(sum((v - mean) ** 2 for v in zs) / max(runs - 1, 1) / runs)
    tv = 0.5 * sum(abs(blended.get(y, 0.0) - cond[y]) for y in cond)
    tv_samples = 0.5 * sum(abs(counts.get(y, 0) / runs - cond[y]) for y in cond)
    return {"path": path, "particles": particles, "k": k, "temperature": temperature, "runs": runs,
            "local_tv": round(0.5 * sum(abs(cond[y] - local[y]) for y in cond), 4), "tv": round(tv, 4),
            "tv_samples": round(tv_samples, 4), "chi2_p": round(chi2_pvalue(counts, cond), 4),
            "z_ratio": round(mean / z, 4), "z_ratio_se": round(se / z, 4), "tok_s": round(work / wall, 1),
            "out_tok_s": round(out / wall, 1), "seconds_per_request": round(wall / runs, 4),
            "target_forwards": round(forwards / runs, 1), "particle_steps": round(steps / runs, 1)}


def run_tiny(particles: list[int], ks: list[int], runs: int, paths: list[str], temperature: float) -> list[dict]:
    """``Generator.run(alignment="smc")`` on two tiny random Llamas: per path, draft length and N,
    wall seconds per request (after one warm-up request) and target forwards per request."""
    from tiny_models import tiny_llama
    from transformers import AutoTokenizer

    from constrained_spec.api import Generator
    from constrained_spec.models.store.tokenizer_assets import ensure_vocab_tokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ensure_vocab_tokenizer("gpt-2")))
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0,
                                                                                                      "maximum": 120}},
              "required": ["name", "age"]}
    prompt = "Describe a person as JSON with a name and an age:"
    rows = []
    for path in paths:
        slots = max(particles) if path == "rows" else 1
        gen = Generator(tiny_llama(50257, seed=1), tiny_llama(50257, seed=2), tokenizer=tokenizer, progress=False, draft_plan="always",
                        max_batch_size=slots, batch_max_tokens=512)
        counter = {"n": 0}
        if gen.batch is not None:
            backend = gen.batch.models["target"]
            inner = backend.forward

            def counted(calls, inner=inner):  # type: ignore[no-untyped-def]
                counter["n"] += any(c.head != "none" for c in calls)
                return inner(calls)

            backend.forward = counted  # type: ignore[method-assign]
        for k in ks:
            for n in particles:
                options = dict(alignment="smc", particles=n, temperature=temperature, num_draft_tokens=k, max_new_tokens=40)
                gen.run(prompt, schema, seed=999, **options)  # warm-up
                counter["n"], forwards, steps, start = 0, 0, 0, time.perf_counter()
                for r in range(runs):
                    result = gen.run(prompt, schema, seed=r, **options)
                    forwards += result.stats.target_forwards if gen.batch is None else 0
                    steps += result.stats.steps
                wall = time.perf_counter() - start
                forwards = forwards if gen.batch is None else counter["n"]
                row = {"path": path, "particles": n, "k": k, "runs": runs, "seconds_per_request": round(wall / runs, 3),
                       "target_forwards": round(forwards / runs, 1), "particle_steps": round(steps / runs, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--particles", default="1,4,8")
    parser.add_argument("--k", default="0,3", help="draft lengths (0: target only)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--temperatures", default="1.0")
    parser.add_argument("--seed", type=int, default=13, help="the synthetic target's seed")
    parser.add_argument("--scale", type=float, default=1.5, help="the synthetic target's logit scale")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    parser.add_argument("--paths", default="alone", help="alone (particles in turn), rows (batch rows), or both")
    parser.add_argument("--models", default="synthetic", choices=["synthetic", "tiny"],
                        help="the enumerable synthetic case, or Generator.run on two tiny random Llamas (speed only)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    paths = args.paths.split(",")
    if args.models == "tiny":
        rows = run_tiny([int(n) for n in args.particles.split(",")], [int(k) for k in args.k.split(",")], args.runs, paths,
                        float(args.temperatures.split(",")[0]))
    for temperature in map(float, args.temperatures.split(",")) if args.models == "synthetic" else ():
        for k in map(int, args.k.split(",")):
            for n in map(int, args.particles.split(",")):
                for path in paths:
                    row = run(n, k, args.runs, temperature, args.seed, args.scale, path)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
