"""Adaptive draft length, decided position by position: propose one more token while it pays.

Adding position i+1 to a draft block adds, in expectation, P(every proposal up to i+1 is kept)
tokens: the token after the kept prefix comes from the verify anyway. Its cost is a draft forward
(none for a forced token, a grammar string or a prompt lookup) plus the extra verify row, whose
cost is measured per number of tokens fed (on a CPU it is flat for a few rows and then steps: 7
rows take a second pass of the int8/fp16 kernels here). A kept token is worth the target forward
that would otherwise produce it. So the block grows while

    P(kept so far) * P(next kept) * cost(target forward of 1 token) >= cost(next position),

up to a cap. P(next kept) comes from measured keep rates: per proposal source, and for a
draft-model token per bin of the draft's own probability for it (a confident draft is right far
more often). Before a model forward the token is not known yet, so the previous model token's
confidence stands in for it (confidence comes in runs).

Why not a bandit over k per step (the first version here): its per-k rates needed many steps per
arm and context, mixed blocks of model and zero-cost proposals, and it lost to the best fixed k on
the 8-prompt bench (1.82-1.93x against 1.98-2.13x). Valuing a token at the measured seconds per
token instead of a target forward (the ratio-maximising rule) starved the draft in structure,
where zero-cost proposals make tokens cheap on average: it stopped calling the draft at all.

Costs are learnt from the forwards decoding runs anyway: before the first measurement a verify of a
few rows is taken as flat and a draft forward as ``draft_prior`` of a target forward, so the first
request drafts at once instead of paying for a calibration (``Generator.calibrate`` can still
measure them ahead of time).

The rule reads only the proposals and past verifies, so whatever length it picks, the verify is
exact (``tests/engine/test_distribution.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from constrained_spec.engine.rates import RunningRate, expected_tokens


@dataclass
class CostCurve:
    """Seconds of a forward by number of tokens fed, as exponential moving averages."""

    decay: float = 0.7
    seconds: dict[int, float] = field(default_factory=dict)

    def observe(self, tokens: int, seconds: float) -> None:
        old = self.seconds.get(tokens)
        self.seconds[tokens] = seconds if old is None else self.decay * old + (1 - self.decay) * seconds

    def __call__(self, tokens: int) -> float:
        if tokens in self.seconds:
            return self.seconds[tokens]
        if not self.seconds:
            return 1.0  # no data yet: flat (a forward of a few tokens costs about one of one token)
        known = sorted(self.seconds)
        lower = [n for n in known if n < tokens]
        upper = [n for n in known if n > tokens]
        if lower and upper:
            a, b = lower[-1], upper[0]
            t = (tokens - a) / (b - a)
            return self.seconds[a] * (1 - t) + self.seconds[b] * t
        nearest = lower[-1] if lower else upper[0]
        return self.seconds[nearest]


@dataclass
class KeepRates:
    """How often a proposed token is kept, by source; a draft-model token also by the draft's
    probability for it, in ``bins`` bins. Counts with a prior worth ``prior_weight`` tokens; all of
    them fade with every verify, so a source the rule stopped using drifts back to its prior and is
    tried again (else one bad stretch of text would shut the draft out for good)."""

    bins: int = 10
    decay: float = 0.98
    prior_weight: float = 2.0
    priors: dict[str, float] = field(default_factory=lambda: {"model": 0.7, "grammar": 0.9, "lookup": 0.6, "forced": 1.0})
    _rates: dict[tuple[str, int], RunningRate] = field(default_factory=dict)

    def _key(self, source: str, confidence: float | None) -> tuple[str, int]:
        if source != "model" or confidence is None:
            return (source, -1)
        return (source, min(int(confidence * self.bins), self.bins - 1))

    def _prior(self, key: tuple[str, int]) -> float:
        source, b = key
        return (b + 0.5) / self.bins if b >= 0 else self.priors.get(source, 0.5)

    def running(self, source: str, confidence: float | None = None) -> RunningRate:
        """The counts behind :meth:`rate` (created at the prior)."""
        return self._running(self._key(source, confidence))

    def _running(self, key: tuple[str, int]) -> RunningRate:
        if key not in self._rates:
            self._rates[key] = RunningRate(prior=self._prior(key), weight=self.prior_weight)
        return self._rates[key]

    def rate(self, source: str, confidence: float | None = None) -> float:
        """Estimated probability that a token from ``source`` (drafted with this confidence) is kept."""
        return self.running(source, confidence).value

    def fade(self) -> None:
        """One verify went by: every count loses a share ``1 - decay``."""
        for counts in self._rates.values():
            counts.fade(self.decay)

    def observe(self, source: str, confidence: float | None, kept: bool) -> None:
        """One judged proposal from ``source``: counted in its bin and in the source's overall rate."""
        for key in {self._key(source, confidence), self._key(source, None)}:
            self._running(key).observe(float(kept), 1.0)


@dataclass
class AdaptiveDraftLength:
    """Grows each draft block while one more position is worth its cost (see the module text);
    ``max_k`` caps it. One instance learns across requests (costs and keep rates)."""

    max_k: int = 8
    target: CostCurve = field(default_factory=CostCurve)  # seconds of a target forward by tokens fed
    draft: CostCurve = field(default_factory=CostCurve)  # seconds of a one-token draft forward (key 1)
    keep: KeepRates = field(default_factory=KeepRates)
    #: a draft forward as a share of a one-token target forward, until one is measured: the int8w
    #: 0.5B draft against the fp16w 1.5B target costs 0.27 here, about their parameter ratio
    draft_prior: float = 0.3

    def token_value(self) -> float:
        """Seconds a kept token saves: the target forward that would otherwise produce it (1.0
        before any forward is measured: then only ratios matter)."""
        return self.target(1)

    def draft_cost(self) -> float:
        """Seconds of one draft forward: measured, else ``draft_prior`` of a target forward."""
        return self.draft(1) if self.draft.seconds else self.draft_prior * self.token_value()

    def worth_proposing(self, kept_so_far: float, source: str, confidence: float | None, fed: int) -> bool:
        """Whether one more position from ``source`` pays, given P(all proposals so far are kept)
        and the ``fed`` tokens the verify takes already (pending + proposed)."""
        gain = kept_so_far * self.keep.rate(source, confidence) * self.token_value()
        cost = max(0.0, self.target(fed + 1) - self.target(fed))
        if source == "model":
            cost += self.draft_cost()
        return gain >= cost

    def observe_block(self, sources: list[str], confidences: list[float | None], accepted: int) -> None:
        """After a verify: the kept prefix and the first rejection teach keep rates; proposals
        after the rejection were never judged and teach nothing."""
        self.keep.fade()
        for i in range(min(accepted + 1, len(sources))):
            self.keep.observe(sources[i], confidences[i], i < accepted)

    @property
    def calibrated(self) -> bool:
        """Whether forward costs have been measured (by :meth:`Generator.calibrate` or by decoding)."""
        return len(self.target.seconds) > 1 and bool(self.draft.seconds)


def batch_draft_length(rows: int, k_max: int, keep_rate: float = 0.7, flat_tokens: int = 6, draft_share: float = 0.15) -> int:
    """The draft length cap for a row when ``rows`` rows share each forward.

    A verify of n tokens costs about one forward while n stays within the ``flat_tokens`` a forward
    reads its weights for (fbgemm here; on a GPU the tensor-core tile), and grows in proportion
    past it. Per step the batch feeds ``rows * (k + 1)`` tokens and expects
    ``rows * (1 - a^(k+1)) / (1 - a)`` back (a: the keep rate); a draft position also costs
    ``draft_share`` of a target forward (a 0.5B draft costs about 0.3 of the 1.5B target, and about
    half the positions of a JSON answer come from free proposals: grammar strings, prompt lookup).
    The k in ``[1, k_max]`` with the most expected tokens per cost unit wins; one row keeps
    ``k_max`` (the single-sequence loop's own tuned length).
    """
    if rows <= 1 or k_max <= 1:
        return k_max
    a = min(max(keep_rate, 0.0), 0.99)
    best_k, best = 1, -1.0
    for k in range(1, k_max + 1):
        tokens = rows * (k + 1)
        verify = max(1.0, tokens / flat_tokens)
        cost = verify + k * max(1.0, rows / flat_tokens) * draft_share
        gain = rows * expected_tokens([a] * k)
        if gain / cost > best:
            best_k, best = k, gain / cost
    return best_k
