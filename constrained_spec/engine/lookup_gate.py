"""Whether a prompt-lookup plan is worth proposing where the draft model could propose instead.

Lookup tokens cost nothing to propose, but a wrong one ends the block: in text that repeats its
own structure with new values (nested JSON, SQL, a grammar's output) lookup finds an earlier
occurrence whose continuation is wrong most of the time, and a block it leads yields about one
token where the draft model's block yields three or four. The gate compares the two blocks' expected
tokens per cost, both measured on this request:

* the lookup's keep rate, one per kind of plan (token n-grams, bytes), is scored on every plan it made, whether or not the plan was used: a
  plan made at block position d, where the verify kept the first d drafted tokens, is compared
  with the tokens the verify committed from there (a counterfactual that costs no forward; under
  greedy decoding it is exactly what the verify would have kept);
* the draft model's keep rate from its real proposals, up to each block's first rejection;
* a draft forward's cost as a share of a verify: a constant, not the request's timings, so that
  the choice, and with it a seeded sample, depends on tokens alone and a seed reproduces its
  sample. The default pair measures 0.14-0.19 on this CPU (one thread: a draft forward 38-51 ms,
  a verify of up to 6 rows 267-302 ms, the CFG workload on 2026-12-01).

A block of ``m`` positions led by ``L`` lookup tokens (then model tokens) is expected to give
``1 + sum_j prod_{i<j} rate_i`` tokens for ``1 + (m - L) * r`` cost units (r: draft forward /
verify); the model's block ``1 + sum_j a_m^j`` for ``1 + m * r``. Lookup goes ahead where its
ratio is not below the model's. A rate's counts fade each time it is scored, so the rates follow
the text (lookup is good inside a copied value and bad in the structure around it) but keep their
evidence while a source goes unscored. The choice reads only past
verifies and the drafted prefix, so the verify stays exact whatever it decides.

Without a draft model (none loaded, or the draft plan left it out) the choice is lookup or the target alone,
where a verify of more tokens costs more (``verify_cost``: this host's measured curve, fixed for the request,
``engine.plan_costs``): on a CPU's batch-invariant kernels a block of two costs about 1.6 one-token forwards, so
lookup that is right less than about 60% of the time slows decoding down (free text: the continuation an n-gram
finds in the prompt is mostly wrong). :meth:`LookupGate.alone_length` keeps the plan's first ``m`` tokens with the
most expected tokens per cost, none where the target alone gives more; scored the same way, a plan passed over
still teaches the rate, so lookup comes back where the text starts copying. With no cost curve (a GPU, or
costs not measured) a verify of a few tokens is taken as flat and every plan goes ahead, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from constrained_spec.engine.rates import RunningRate, expected_tokens

__all__ = ["LookupGate", "first_run"]


def first_run(plan: list[int], actual: list[int]) -> tuple[int, int]:
    """(kept, judged) of ``plan`` against the tokens that were committed: kept up to the first
    mismatch, which is judged too; plan tokens past the committed ones are not judged."""
    kept = 0
    for proposed, committed in zip(plan, actual):
        if proposed != committed:
            return kept, kept + 1
        kept += 1
    return kept, kept


@dataclass
class LookupGate:
    """Per request: lookup or draft model, by expected tokens per cost (see the module text)."""

    #: lookup starts below the break-even (about 0.5 against the model's prior): scoring costs no
    #: forward, so a lookup that is right proves it within a plan or two, and one that is wrong
    #: never costs a block (with 0.6 the first wrong plan of a SQL query cost two verifies)
    lookup_prior: float = 0.4
    #: a keep rate per kind of lookup plan (``Proposal.kind``: token n-grams or bytes,
    #: which find their matches in different places). Measured: on the tuned workload the split
    #: changed no decision (the same verifies and lookup counts as one shared rate, inventory-extract
    #: included, where the gate keeps out a lookup that was right 23 times of 33 without it)
    lookup: dict[str, RunningRate] = field(default_factory=dict)
    model: RunningRate = field(default_factory=lambda: RunningRate(prior=0.7))
    #: a draft forward as a share of a verify (see the module text)
    draft_share: float = 0.15
    #: the share of its counts a rate keeps each time it is scored: a memory of about 50 judged
    #: tokens (0.9 followed bursts: on nested JSON lookup is right for a run of keys and wrong on
    #: the values after them, and a short memory let it lead again after every run of keys)
    decay: float = 0.98
    #: a verify of n tokens in one-token forwards (this host's measured curve), for the choice without a draft
    #: model (:meth:`alone_length`); None: none known, lookup is never held back there
    verify_cost: Callable[[float], float] | None = None
    #: the lookup plans of the current block, (position, kind, tokens), scored once the verify has committed
    shadows: list[tuple[int, str, list[int]]] = field(default_factory=list)

    def record(self, position: int, kind: str, plan: list[int]) -> None:
        """Keep a plan made at block ``position`` for scoring, unless an earlier plan of this block
        still reaches past it: after a plan is passed over, the next positions find the same
        continuation shifted by a token, and scoring each copy would count its first miss again
        (a run of r right tokens would score r/(r+2) instead of r/(r+1))."""
        if any(start < position < start + len(earlier) for start, _, earlier in self.shadows):
            return
        self.shadows.append((position, kind, plan))

    def lookup_rate(self, kind: str = "lookup") -> RunningRate:
        """The keep rate of lookup plans of this kind."""
        if kind not in self.lookup:
            self.lookup[kind] = RunningRate(prior=self.lookup_prior)
        return self.lookup[kind]

    def worth_it(self, plan_length: int, room: int, kind: str = "lookup") -> bool:
        """Whether a lookup plan of ``plan_length`` tokens should lead the next ``room`` positions."""
        if room <= 0:
            return True
        r = self.draft_share
        lookup_tokens = min(plan_length, room)
        a_l, a_m = self.lookup_rate(kind).value, self.model.value
        with_lookup = expected_tokens([a_l] * lookup_tokens + [a_m] * (room - lookup_tokens)) / (1.0 + (room - lookup_tokens) * r)
        with_model = expected_tokens([a_m] * room) / (1.0 + room * r)
        return with_lookup >= with_model

    def alone_length(self, plan_length: int, room: int, fed: int, kind: str = "lookup") -> int:
        """Without a draft model: how many of a lookup plan's first tokens (up to ``room``) to verify beside the
        ``fed`` tokens the verify takes anyway: the count with the most expected tokens per cost of the verify,
        0 where the verify of ``fed`` alone (one token) gives more; the whole plan where no cost curve is known."""
        n = min(plan_length, room)
        if self.verify_cost is None or n <= 0:
            return max(n, 0)
        rate = self.lookup_rate(kind).value
        best, best_ratio = 0, 1.0 / self.verify_cost(fed)
        for m in range(1, n + 1):
            ratio = expected_tokens([rate] * m) / self.verify_cost(fed + m)
            if ratio > best_ratio:
                best, best_ratio = m, ratio
        return best

    def observe(self, sources: list[str], accepted: int, committed: list[int]) -> None:
        """After a verify: the block's sources and kept count, and the tokens it committed (the
        kept prefix and the verify's own token)."""
        scored = [(position, kind, plan) for position, kind, plan in self.shadows if position <= accepted]
        self.shadows = []
        for kind in {kind for _, kind, _ in scored}:
            self.lookup_rate(kind).fade(self.decay)
        for position, kind, plan in scored:
            self.lookup_rate(kind).observe(*first_run(plan, committed[position:]))
        judged = [i for i in range(min(accepted + 1, len(sources))) if sources[i] == "model"]
        if judged:
            self.model.fade(self.decay)
            for i in judged:
                self.model.observe(int(i < accepted), 1)
