"""Adaptive draft length: pick k per step from measured acceptance and measured forward costs.

Expected tokens from a block of k proposals with per-token acceptance a is (1 - a^(k+1)) / (1 - a)
(the kept prefix plus the correction or bonus token); its cost is the draft forwards it needs plus
one target forward over k+1 tokens, whose cost is measured per length (on CPUs it is far from
linear: flat to 3 tokens in fp32 here, then a step). k maximises expected tokens per second.

That formula assumes each token is kept independently with the same probability. Real acceptance
comes in runs (a confident draft is right for several tokens; zero-cost grammar strings are
nearly always kept), and blocks end early on their own after an unsure draft token, so the
formula undervalues long blocks. Each k therefore also keeps its *measured* tokens and seconds per
step; the formula's prediction counts as one step of prior, and a small optimism bonus for
rarely tried k keeps every k measured now and then. With enough steps, the choice follows what
each k really delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def expected_tokens(acceptance: float, k: int) -> float:
    """Expected tokens committed by one verify of k proposals (kept prefix + next token)."""
    a = min(max(acceptance, 0.0), 0.999999)
    return (1 - a ** (k + 1)) / (1 - a)


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
            return float(tokens)  # no data: proportional (only relative values matter before data)
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
class AdaptiveDraftLength:
    """Chooses k in [0, max_k] maximising expected tokens per second; learns online."""

    max_k: int = 8
    acceptance: float = 0.9  # prior; JSON under a grammar mask is mostly predictable (0.92-0.96 seen)
    model_share: float = 1.0  # share of proposed positions that needed a draft-model forward
    decay: float = 0.8
    target: CostCurve = field(default_factory=CostCurve)
    draft: CostCurve = field(default_factory=CostCurve)
    arm_decay: float = 0.95  # per step, for every k: about the last 20 steps count
    optimism: float = 0.3  # bonus factor 1 + optimism / sqrt(1 + steps measured at k)
    explore_every: int = 4  # after this many k = 0 steps, try the best k > 0 once (acceptance goes stale)
    # decayed [tokens, seconds, steps] per (context, k); a context is a kind of text (free string, structure)
    _arms: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    _idle: int = 0

    def observe_block(self, proposed: int, model_proposed: int, accept_probs: list[float]) -> None:
        """After a verify: the acceptance probabilities of the positions up to the first rejection."""
        for p in accept_probs:
            self.acceptance = self.decay * self.acceptance + (1 - self.decay) * float(p)
        if proposed:
            self.model_share = self.decay * self.model_share + (1 - self.decay) * (model_proposed / proposed)

    def predicted(self, k: int) -> tuple[float, float]:
        """The formula's expected tokens and seconds of one step with k proposals."""
        seconds = self.model_share * k * self.draft(1) + self.target(k + 1)
        return expected_tokens(self.acceptance, k), seconds

    def observe_step(self, k: int, tokens: int, seconds: float, context: str = "") -> None:
        """What one draft-verify step with (at most) k proposals committed, and what it cost.

        Every k's measurements fade with each step, not only the chosen one's: the best k depends
        on the text (a long free-form string wants short blocks, JSON structure long ones), so a k
        measured in other text must return to the prior and be tried again.
        """
        for (ctx, _), sums in self._arms.items():
            if ctx == context:
                sums[:] = [x * self.arm_decay for x in sums]
        sums = self._arms.setdefault((context, k), [0.0, 0.0, 0.0])
        sums[0] += tokens
        sums[1] += seconds
        sums[2] += 1

    def rate(self, k: int, context: str = "") -> float:
        """Tokens per second for steps of k proposals in ``context``: measured, with the formula as one step of prior."""
        tokens, seconds = self.predicted(k)
        measured_tokens, measured_seconds, _ = self._arms.get((context, k), (0.0, 0.0, 0.0))
        return (measured_tokens + tokens) / max(measured_seconds + seconds, 1e-9)

    def _score(self, k: int, context: str = "") -> float:
        steps = self._arms.get((context, k), (0.0, 0.0, 0.0))[2]
        return self.rate(k, context) * (1 + self.optimism / (1 + steps) ** 0.5)

    def choose(self, limit: int | None = None, context: str = "") -> int:
        """The k with the best predicted rate; a periodic k > 0 probe keeps the acceptance estimate fresh."""
        top = self.max_k if limit is None else min(self.max_k, limit)
        if top <= 0:
            return 0
        score = lambda k: self._score(k, context)  # noqa: E731
        best = max(range(top + 1), key=score)
        if best == 0:
            self._idle += 1
            if self._idle >= self.explore_every:
                self._idle = 0
                best = max(range(1, top + 1), key=score)
        else:
            self._idle = 0
        return best

    @property
    def calibrated(self) -> bool:
        return len(self.target.seconds) > 1 and bool(self.draft.seconds)
