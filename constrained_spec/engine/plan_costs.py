"""The draft plan's figures from costs measured where it runs (``engine.draft_plan``).

Whether the draft model pays is the host's, the runtime's and the output's: a verify of 6 tokens
costs 1.98x a one-token target forward with fp16w torch on the AVX512 host where the plan's
constants were measured (``draft_plan.DRAFT_GAIN_PER_TOKEN``), about 1.4x on an AVX2 one, and
llama.cpp's Q4_K grows about linearly (5 tokens 4.2x one). So right after a load
(:func:`calibrated_costs`) a few forwards after a fixed 32-token context are timed
(:func:`measure_costs`, medians of 2), each figure relative to a one-token target forward:

- ``verify[n]``: an n-token target forward, n in :data:`SIZES` (what the model below reads);
- ``draft_forward``: a one-token draft forward, through the head the loop uses;
- ``draft_prefill_per_token``: the draft's prefill of the context, per token.

They are cached on disk per host, models, runtime and threads (``models.cost_cache``): a second load
reads them and times nothing, so a seed gives the same sample run after run on that host. A
``Generator`` no longer keeps them as measured: ``engine.live_costs`` seeds its figures with these
timings and corrects them from the forwards decoding runs (a measurement under load is not kept);
:func:`calibrated_costs` stays the once-only path.

What the draft wins cannot be measured at load: it depends on the output. :data:`PRIORS` holds the
project's measurements per kind of output (the default pair, k = 5, two threads, the tuned JSON
workload greedy and at T = 0.7, ``docs/results/2026-12-02-tuned-draft-gain``; the Lark workload
greedy, ``docs/results/2026-12-02-cfg-draft-gain``): target forwards per token and tokens fed per
verify with the free proposers alone (grammar strings, prompt lookup) and with the draft too, and
draft forwards per token. Acceptance is the pair's and the text's, not the host's, so these carry
over; the costs are the host's. The draft's gain per generated token, in one-token target forwards:

    free_forwards * verify(free_fed) - draft_target_forwards * verify(draft_fed) - draft_forwards * draft_forward

With the AVX512 host's costs (verify linear to 1.98x at 6 tokens, a draft forward a third of a
target's) it gives -0.04 for JSON (measured there: -0.001 to -0.088 by threads and temperature; the
constant is 0) and 0.23 for Lark (measured 0.40: the model leaves out the per-step mask and sampling
work the draft's longer blocks also save). A modelled loss under :data:`GAIN_NOISE` counts as none,
as the constant did: ties go to the draft where its prefill is hidden. Another pair than the default
keeps these priors (its own acceptance is unmeasured); ``DecodeConfig.draft_gain_per_token`` wins
over all of this.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

from constrained_spec.models.cost_cache import cost_key, read_costs, write_costs
from constrained_spec.models.protocol import SequenceModel, restricted_head

__all__ = ["CALIBRATION_TEXT", "GAIN_NOISE", "PRIORS", "SIZES", "HostCosts", "OutputPrior", "calibrated_costs", "gain_per_token", "measure_costs",
           "time_draft"]

logger = logging.getLogger("constrained_spec")

#: the draft length the priors were measured at (a draft block then feeds up to PRIOR_K + 1 tokens)
PRIOR_K = 5
#: tokens fed per timed target forward: 1 (the unit), 2 (a verify of free proposals: 2.3-2.5 fed on
#: average, where a CPU's kernels step first), PRIOR_K + 1 (a draft block); between them, linear
SIZES = (1, 2, PRIOR_K + 1)
#: the fixed context the forwards run after (tokens)
CONTEXT_TOKENS = 32
#: the text whose tokens make that context (any text serves: a forward's cost does not depend on the ids)
CALIBRATION_TEXT = " ".join(["The quick brown fox jumps over the lazy dog, and the dog sleeps on."] * 6)
#: the measurement's name in the cache key (a change of method re-measures)
WHAT = "draft-plan-costs-2"
#: a modelled gain in (-GAIN_NOISE, 0) counts as 0 (see the module text)
GAIN_NOISE = 0.1


@dataclass(frozen=True)
class OutputPrior:
    """What the proposers give for a kind of output, measured for the default pair (k = 5):
    target forwards per generated token and tokens fed per verify with the free proposers alone
    (``free_forwards``, ``free_fed``) and with the draft model too (``draft_target_forwards``,
    ``draft_fed``), and draft forwards per generated token (``draft_forwards``)."""

    free_forwards: float
    free_fed: float
    draft_target_forwards: float
    draft_fed: float
    draft_forwards: float


#: per kind of output (``DecodeRequest.kind``); JSON Schema's serves Pydantic and regex outputs too.
#: JSON: greedy and T = 0.7 averaged (0.485 / 0.510 forwards per token at 2.54 / 2.51 fed; 0.263 /
#: 0.264 at 5.50 / 5.38 fed with 0.629 / 0.542 draft forwards); Lark: greedy (0.764 at 2.26; 0.239
#: at 5.80 with 0.789 draft forwards)
PRIORS = {
    "json": OutputPrior(free_forwards=0.50, free_fed=2.5, draft_target_forwards=0.263, draft_fed=5.45, draft_forwards=0.59),
    "lark": OutputPrior(free_forwards=0.764, free_fed=2.26, draft_target_forwards=0.239, draft_fed=5.8, draft_forwards=0.789),
}


@dataclass(frozen=True)
class HostCosts:
    """Forward costs on this host, in one-token target forwards: ``verify`` (tokens fed -> cost;
    1 -> 1.0), ``draft_forward``, ``draft_prefill_per_token``; ``measured``: the UTC date."""

    verify: dict[int, float]
    draft_forward: float
    draft_prefill_per_token: float
    measured: str = ""

    def verify_cost(self, tokens: float) -> float:
        """A forward of ``tokens`` (fractional: a mean), linear between the measured sizes and
        along the last two past them."""
        known = sorted(self.verify)
        if tokens <= known[0]:
            return self.verify[known[0]]
        for a, b in zip(known, known[1:]):
            if tokens <= b:
                return self.verify[a] + (self.verify[b] - self.verify[a]) * (tokens - a) / (b - a)
        a, b = known[-2], known[-1]
        return self.verify[b] + (self.verify[b] - self.verify[a]) * (tokens - b) / (b - a)

    def describe(self) -> str:
        """The figures in words (``DecodeStats.draft_plan_reason``)."""
        n = max(self.verify)
        return (f"measured on this host {self.measured}: verify {n} = {self.verify[n]:.2f}x one, "
                f"draft = {self.draft_forward:.2f}x target, draft prefill {self.draft_prefill_per_token:.3f}/token")

    def to_dict(self) -> dict[str, Any]:
        """The figures as JSON can hold them."""
        return {"verify": {str(n): v for n, v in sorted(self.verify.items())}, "draft_forward": self.draft_forward,
                "draft_prefill_per_token": self.draft_prefill_per_token}

    @classmethod
    def from_dict(cls, data: dict[str, Any], measured: str) -> "HostCosts | None":
        """The figures back; None where any is missing, not finite or not positive, or a size of :data:`SIZES` is absent."""
        try:
            verify = {int(n): float(v) for n, v in data["verify"].items()}
            costs = cls(verify, float(data["draft_forward"]), float(data["draft_prefill_per_token"]), measured)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        figures = [*verify.values(), costs.draft_forward, costs.draft_prefill_per_token]
        if not set(SIZES) <= verify.keys() or not all(math.isfinite(f) and f > 0 for f in figures):
            return None
        return costs


def gain_per_token(costs: HostCosts, kind: str) -> float:
    """The draft's modelled gain per generated token for this kind of output on these costs, in
    one-token target forwards (see the module text); a loss under :data:`GAIN_NOISE` is 0."""
    prior = PRIORS["lark" if kind == "lark" else "json"]
    without = prior.free_forwards * costs.verify_cost(prior.free_fed)
    with_draft = prior.draft_target_forwards * costs.verify_cost(prior.draft_fed) + prior.draft_forwards * costs.draft_forward
    gain = without - with_draft
    return 0.0 if -GAIN_NOISE < gain < 0 else gain


def _timed(call: Callable[[], Any], clock: Callable[[], float] = time.perf_counter) -> float:
    start = clock()
    call()
    return clock() - start


def time_draft(draft: SequenceModel, context: list[int], repeats: int = 2, clock: Callable[[], float] = time.perf_counter,
               ) -> tuple[float, list[float]]:
    """The draft's prefill of ``context`` (seconds, once) and ``repeats`` one-token forwards after it
    through the head the loop uses (after one untimed); the draft's cache is emptied after."""
    context = list(context) or [0]
    head = restricted_head(draft)
    one: Callable[[list[int]], Any] = head.extend_prefix_head if head is not None and head.head_prefix > 0 else draft.extend
    draft.reset()
    prefill = _timed(lambda: draft.prefill(context), clock)
    base = draft.length
    forwards = []
    for i in range(repeats + 1):
        seconds = _timed(lambda: one(context[:1]), clock)
        draft.crop(base)
        if i:  # the first is untimed
            forwards.append(seconds)
    draft.reset()
    return prefill, forwards


def measure_costs(target: SequenceModel, draft: SequenceModel, context: list[int], repeats: int = 2,
                  clock: Callable[[], float] = time.perf_counter) -> tuple[HostCosts, list[tuple[str, int, float]]]:
    """Time target forwards of :data:`SIZES` tokens and one-token draft forwards after ``context``
    (medians over ``repeats``, after one untimed forward each), and the draft's prefill of it
    (once); both caches are emptied after. Also returns every timing as (model, tokens, seconds),
    for adaptive k. About 14 one-token target forwards in all: on a real pair's CPU host a forward
    is 0.1-2 s, so this is kept to the fewest forwards that give the figures. ``clock``: seconds
    (tests pass a synthetic one)."""
    context = list(context) or [0]
    seen: list[tuple[str, int, float]] = []
    target.reset()
    target.prefill(context)
    base = target.length
    target.extend(context[:1])  # untimed: the first forward sets up
    target.crop(base)
    for _ in range(repeats):
        for n in SIZES:
            seen.append(("target", n, _timed(lambda: target.extend((context * n)[:n]), clock)))
            target.crop(base)
    target.reset()
    prefill, forwards = time_draft(draft, context, repeats, clock)
    seen += [("draft", 1, seconds) for seconds in forwards]
    median = {n: statistics.median(s for name, m, s in seen if name == "target" and m == n) for n in SIZES}
    unit = max(median[1], 1e-9)
    draft_one = statistics.median(s for name, _, s in seen if name == "draft")
    costs = HostCosts({n: median[n] / unit for n in SIZES}, max(draft_one, 1e-9) / unit, max(prefill, 1e-9) / (len(context) * unit),
                      datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"))
    return costs, seen


def calibrated_costs(target: SequenceModel, draft: SequenceModel, context: list[int], cache_dir: str | os.PathLike[str] | None = None,
                     clock: Callable[[], float] = time.perf_counter) -> tuple[HostCosts, list[tuple[str, int, float]]]:
    """This pair's costs on this host: read from the cache (``models.cost_cache``), else measured
    (:func:`measure_costs`) and cached; the timings measured ([] when read)."""
    key = cost_key(target, draft, WHAT)
    cached = read_costs(key, cache_dir)
    if cached is not None:
        costs = HostCosts.from_dict(*cached)
        if costs is not None:
            return costs, []
        logger.warning("the cached draft-plan costs are unusable; measuring them again")
    load = _load_average()
    costs, seen = measure_costs(target, draft, context[:CONTEXT_TOKENS], clock=clock)
    path = write_costs(key, {**costs.to_dict(), "load_average_1m": load}, costs.measured, cache_dir)
    if load is not None and load >= (os.cpu_count() or 1):
        logger.warning("the draft plan's costs were measured under load (1-minute load average %.1f on %d cores): %s; "
                       "delete %s to measure again", load, os.cpu_count() or 1, costs.describe(), path)
    return costs, seen


def _load_average() -> float | None:
    """The 1-minute load average where the system has one (kept beside the figures: a busy host skews them)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
