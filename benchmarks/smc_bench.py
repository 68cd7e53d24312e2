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
  returned samples per second of wall time (the user's view).

    python benchmarks/smc_bench.py --particles 1,4,8 --runs 200 --k 0,3 --out results/smc.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from collections import Counter
from pathlib import Path

import torch
from scipy.stats import chisquare

from constrained_spec.config import DecodeConfig
from constrained_spec.engine.loop import SpeculativeDecoder
from constrained_spec.engine.smc import SMCDecoder, SMCOptions
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler, AutomatonMatcher
from constrained_spec.grammar.vocab import TokenVocabulary
from constrained_spec.sampling import SamplingPolicy, verify

VOCAB = TokenVocabulary(tokens={0: b"a", 1: b"b", 2: b"c", 3: b"ab", 4: b"ba", 5: b"bc", 6: b"ca", 7: b"abc", 8: b"cc"},
                        eos_token_ids=(9,), size=10)
STRINGS = ("ab", "cac", "bb", "c")
PROMPT = [0, 1]


class HashModel:
    """Logits a pure function of the prefix (hash-seeded), memoised; ``fork()`` copies the tokens."""

    device = torch.device("cpu")
    vocab_size = 10
    _memo: dict = {}

    def __init__(self, seed: int, scale: float) -> None:
        self.seed, self.scale = seed, scale
        self.tokens: list[int] = []

    @property
    def length(self) -> int:
        return len(self.tokens)

    def logits(self, prefix: list[int]) -> torch.Tensor:
        key = (self.seed, self.scale, tuple(prefix))
        if key not in self._memo:
            digest = hashlib.sha256(f"{self.seed}|{list(prefix)}".encode()).digest()
            g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
            self._memo[key] = torch.randn(10, generator=g, dtype=torch.float64).float() * self.scale
        return self._memo[key]

    def extend(self, tokens: list[int]) -> torch.Tensor:
        rows = []
        for t in tokens:
            self.tokens.append(t)
            rows.append(self.logits(self.tokens))
        return torch.stack(rows)

    def prefill(self, tokens: list[int]) -> None:
        self.extend(tokens)

    def crop(self, length: int) -> None:
        del self.tokens[length:]

    def reset(self) -> None:
        self.tokens = []

    def fork(self) -> "HashModel":
        clone = HashModel(self.seed, self.scale)
        clone.tokens = list(self.tokens)
        return clone


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


def chi2(counts: Counter, probs: dict) -> float:
    n = sum(counts.values())
    obs, exp, po, pe = [], [], 0, 0.0
    for y, p in probs.items():
        if p * n >= 5:
            obs.append(counts.get(y, 0))
            exp.append(p * n)
        else:
            po += counts.get(y, 0)
            pe += p * n
    if pe > 0:
        obs.append(po)
        exp.append(pe)
    s = sum(obs) / sum(exp)
    return float(chisquare(obs, [e * s for e in exp]).pvalue) if len(obs) > 1 else 1.0


def run(particles: int, k: int, runs: int, temperature: float, seed: int, scale: float) -> dict:
    cond, local, z = exact(temperature, seed, scale)
    automaton = AutomatonCompiler(VOCAB, disk_cache=False, compile_timeout=None).compile("|".join(STRINGS))
    policy = SamplingPolicy(temperature=temperature)
    gen = torch.Generator().manual_seed(1000 * particles + k)
    config = DecodeConfig(num_draft_tokens=k, draft_plan="always")

    def build(t, d, matcher, verifier):  # type: ignore[no-untyped-def]
        return SpeculativeDecoder(t, d, matcher, policy, config, max_new_tokens=16, verifier=verifier, generator=gen)

    counts: Counter = Counter()
    blended: Counter = Counter()
    zs, work, out = [], 0, 0
    start = time.perf_counter()
    for _ in range(runs):
        target, draft = HashModel(seed, scale), (HashModel(22, 2.0) if k else None)
        smc = SMCDecoder(build, target, draft, lambda: AutomatonMatcher(automaton), policy, verify, options=SMCOptions(particles),
                         max_new_tokens=16, generator=gen)
        result = smc.run(PROMPT)
        counts[tuple(result.token_ids)] += 1
        for p in result.particles:
            blended[tuple(p.token_ids)] += p.weight / runs
        zs.append(math.exp(result.log_z))
        work += result.stats.generated_tokens
        out += len(result.token_ids)
    wall = time.perf_counter() - start
    mean = sum(zs) / runs
    se = math.sqrt(sum((v - mean) ** 2 for v in zs) / max(runs - 1, 1) / runs)
    tv = 0.5 * sum(abs(blended.get(y, 0.0) - cond[y]) for y in cond)
    tv_samples = 0.5 * sum(abs(counts.get(y, 0) / runs - cond[y]) for y in cond)
    return {"particles": particles, "k": k, "temperature": temperature, "runs": runs,
            "local_tv": round(0.5 * sum(abs(cond[y] - local[y]) for y in cond), 4), "tv": round(tv, 4),
            "tv_samples": round(tv_samples, 4), "chi2_p": round(chi2(counts, cond), 4),
            "z_ratio": round(mean / z, 4), "z_ratio_se": round(se / z, 4), "tok_s": round(work / wall, 1),
            "out_tok_s": round(out / wall, 1), "seconds_per_request": round(wall / runs, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--particles", default="1,4,8")
    parser.add_argument("--k", default="0,3", help="draft lengths (0: target only)")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--temperatures", default="1.0")
    parser.add_argument("--seed", type=int, default=13, help="the synthetic target's seed")
    parser.add_argument("--scale", type=float, default=1.5, help="the synthetic target's logit scale")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for temperature in map(float, args.temperatures.split(",")):
        for k in map(int, args.k.split(",")):
            for n in map(int, args.particles.split(",")):
                row = run(n, k, args.runs, temperature, args.seed, args.scale)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
