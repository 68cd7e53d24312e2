"""The draft plan's costs learnt from the forwards decoding runs anyway (``engine.plan_costs``).

The once-only measurement at load (:func:`plan_costs.measure_costs`) times a dozen forwards in
whatever load the host has then; a draft forward timed while a neighbour ran reads 1.5x the target
and would be kept for good. Here every request alone on the models (not batch rows: their timings
are shares of a batched forward) reports the forwards it times anyway: each verify (target, tokens
fed), each draft proposal (draft, one token) and the draft's prefill when it ran alone (per token).
(A draft forward measured alone is kept apart: a proposal costs more, its forward catching up on
accepted tokens, masking and sampling, and the plan prefers what decoding paid.) Each (model,
tokens fed) keeps a :class:`LowEnvelope`: the 25th percentile of its last
:data:`WINDOW` timings, and the lowest such figure seen (the *floor*). Load only ever slows a forward,
so a spike sits above the quantile and a run that starts under load moves the floor down as soon as
the host is quiet: a figure taken under load is never kept as the truth. A floor that
:data:`RAISE_AFTER` timings in a row (four windows) exceed by :data:`RAISE_FACTOR` (the host really
got slower) is replaced by the window's quantile.

The first load on a host still measures (:func:`learned_costs`, the same forwards as before); its
timings only seed the floors, which any quieter forward lowers. Decoding does not time every figure
(a plan that leaves the draft out never runs a draft forward; a verify seldom feeds one token), so
a figure seeded under load could stay. Hence a measurement is trusted only once later ones, taken
after requests (:func:`plan_costs.measure_costs`, one repeat: the 32-token prefills and 5 forwards),
have put each figure within :data:`CONFIRM` of its floor (one they put lower lowers the floor and
needs confirming in turn; one they put higher, a spike, tells nothing); until then each request is
followed by one (at most :data:`MAX_PROBES` per process). A measurement whose own one-token target
forwards ran slower than decoding's floor for them (by more than :data:`CONFIRM`) was taken on a
busier host and confirms nothing (it may still lower a floor). Where the target's floors that decoding timed fall by
:data:`REMEASURE_FACTOR` (median) since the last measurement, the host was busier then, and the
measurement is no longer trusted; nor is it on a later day than the floors were last written (UTC): a
figure decoding never times (the draft's, while the plan leaves the draft out) would otherwise keep
whatever a busy afternoon confirmed, and the plan never try the draft again.

The floors are in seconds and kept per host, runtime, threads and models (``models.cost_cache``, one
file per key, ``what`` = :data:`WHAT`), so the next process starts from them and measures nothing at
load. The plan reads ratios to a one-token target forward (:meth:`LiveCosts.costs`); where size 1
was never timed (a verify nearly always feeds drafts) the target's curve is a least-squares line
over the sizes it has. The plan's figures change only where one of them moves by more than
:data:`PLAN_TOLERANCE` (:meth:`LiveCosts.settle`), so once the floors settle the plan decides the same
way, and a seed gives the same sample, request after request and run after run.
"""

from __future__ import annotations

import datetime
import math
import os
import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from constrained_spec.engine import plan_costs
from constrained_spec.engine.plan_costs import CONTEXT_TOKENS, SIZES, HostCosts
from constrained_spec.models.cost_cache import cost_key, read_costs, write_costs
from constrained_spec.models.protocol import SequenceModel

__all__ = ["CONFIRM", "MAX_PROBES", "MIN_SAMPLES", "PLAN_TOLERANCE", "QUANTILE", "RAISE_AFTER", "RAISE_FACTOR", "REMEASURE_FACTOR", "WHAT", "WINDOW", "LiveCosts", "LowEnvelope",
           "learned_costs"]

#: the timings a probe or the load-time measurement gives: (model, tokens fed, seconds)
Timings = list[tuple[str, int, float]]

#: timings a window keeps per (model, tokens fed)
WINDOW = 16
#: the window's quantile that stands for the quiet cost (below it: the quiet forwards; above: spikes)
QUANTILE = 0.25
#: timings a window needs before its quantile counts
MIN_SAMPLES = 4
#: :data:`RAISE_AFTER` timings in a row above the floor by this factor replace it (the host got slower for good)
RAISE_FACTOR = 2.0
#: see :data:`RAISE_FACTOR`: four windows, so that a few minutes of a busy neighbour do not
RAISE_AFTER = 4 * WINDOW
#: the target's floors decoding timed fell this far since the last measurement: measure again
REMEASURE_FACTOR = 1.3
#: a later measurement within this share of a floor confirms it
CONFIRM = 0.15
#: measurements after requests, at most, per process
MAX_PROBES = 4
#: the plan's figures move only where one changes by more than this share
PLAN_TOLERANCE = 0.1
#: a prefill shorter than this tells little of the per-token cost (fixed overheads): not learnt
MIN_PREFILL_TOKENS = 16
#: verifies of more tokens than this are not kept (a long catch-up after free proposals)
MAX_TOKENS = 64
#: the cache's name for these figures (a change of method starts over)
WHAT = "draft-plan-live-1"


def _quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between order statistics)."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(math.floor(at))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


@dataclass
class LowEnvelope:
    """A forward's quiet cost in seconds: the lowest windowed low quantile seen (see the module text)."""

    floor: float | None = None
    count: int = 0
    window: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    #: timings in a row above :data:`RAISE_FACTOR` times the floor
    above: int = 0

    def observe(self, seconds: float) -> bool:
        """One timing; whether the floor moved."""
        if not (math.isfinite(seconds) and seconds > 0):
            return False
        self.window.append(seconds)
        self.count += 1
        if len(self.window) < MIN_SAMPLES:
            return False
        self.above = self.above + 1 if self.floor is not None and seconds > RAISE_FACTOR * self.floor else 0
        live = _quantile(list(self.window), QUANTILE)
        if self.floor is None or live < self.floor or self.above >= RAISE_AFTER:
            self.floor, self.above = live, 0
            return True
        return False

    def seed(self, seconds: float) -> bool:
        """A figure measured apart from decoding (at load, or a probe): the floor where lower (or unset)."""
        if not (math.isfinite(seconds) and seconds > 0) or (self.floor is not None and seconds >= self.floor):
            return False
        self.floor = seconds
        return True


class LiveCosts:
    """One pair's forward costs on this host, learnt from timed forwards (see the module text).

    ``key``: its ``models.cost_cache`` key (None: not persisted); ``probe``: measures the forwards
    again (:func:`plan_costs.measure_costs` on the calibration context), for :meth:`settle`."""

    def __init__(self, key: dict[str, Any] | None, cache_dir: str | os.PathLike[str] | None = None,
                 probe: Callable[[], Timings] | None = None) -> None:
        self.key, self.cache_dir, self.probe = key, cache_dir, probe
        self.envelopes: dict[tuple[str, int], LowEnvelope] = {}
        self.dirty = False
        #: the figures the plan uses now (:meth:`settle`)
        self.current: HostCosts | None = None
        #: the floors after the last measurement (or load), and the keys decoding timed since
        self._reference: dict[tuple[str, int], float] = {}
        self._timed: set[tuple[str, int]] = set()
        #: measurements run again by :meth:`settle`
        self.probes = 0
        #: whether a second measurement agreed with every floor (see the module text), and those it agreed with
        self.confirmed = False
        self._agreed: set[tuple[str, int]] = set()

    # -- learning ----------------------------------------------------------------------------------
    def observe(self, model: str, tokens: int, seconds: float) -> None:
        """A timed forward of decoding: ``model`` "target" (a verify of ``tokens`` fed), "draft" (a
        proposal) or "draft_prefill" (a prefill of ``tokens`` alone)."""
        key = self._key(model, tokens)
        if key is not None:
            envelope = self.envelopes.setdefault(key, LowEnvelope())
            self.dirty |= envelope.observe(seconds / max(tokens, 1) if model == "draft_prefill" else seconds)
            self._timed.add(key)

    def seed(self, timings: Timings) -> None:
        """Timings measured apart from decoding (at load, a probe): each lowers its floor where lower.
        A measured draft forward (the forward alone) is kept apart from decoding's (a proposal: its
        forward, catching up on accepted tokens, masking and sampling), which the plan prefers."""
        for model, tokens, seconds in timings:
            key = self._key("draft_measured" if model == "draft" else model, tokens)
            if key is not None:
                envelope = self.envelopes.setdefault(key, LowEnvelope())
                envelope.count += 1
                self.dirty |= envelope.seed(seconds / max(tokens, 1) if model == "draft_prefill" else seconds)

    @staticmethod
    def _key(model: str, tokens: int) -> tuple[str, int] | None:
        if model == "draft_prefill":
            return ("draft_prefill", 0) if tokens >= MIN_PREFILL_TOKENS else None
        if model in ("draft", "draft_measured"):
            return (model, 1)
        if model == "target" and 1 <= tokens <= MAX_TOKENS:
            return ("target", tokens)
        return None

    def floors(self, model: str) -> dict[int, float]:
        """The floors learnt for ``model`` by tokens fed (seconds; a prefill's per token, key 0)."""
        return {n: e.floor for (m, n), e in self.envelopes.items() if m == model and e.floor is not None}

    # -- the plan's figures ------------------------------------------------------------------------
    def unit(self) -> float | None:
        """Seconds of a one-token target forward: its floor (at most any other size's), else the
        least-squares line over the sizes timed at 1 (within [the lowest floor / its size, the
        lowest floor]); None before two sizes."""
        floors = self.floors("target")
        if 1 in floors:
            return min(floors.values())  # a forward of one token costs no more than one of more
        line = _line(floors)
        if line is None:
            return None
        first = min(floors)
        return min(max(line(1), floors[first] / first), floors[first])

    def costs(self) -> HostCosts | None:
        """The learnt figures as the plan reads them, relative to a one-token target forward (a draft
        forward: decoding's proposals where it timed any, else the measured forward); None until a
        target forward's cost, a second size of it and a draft forward's are known."""
        unit, floors = self.unit(), self.floors("target")
        draft = self.floors("draft").get(1) or self.floors("draft_measured").get(1)
        line = _line(floors)
        if unit is None or draft is None or line is None:
            return None
        verify = {n: max(floors[n] if n in floors else line(n), unit) / unit for n in SIZES}
        verify[1] = 1.0
        prefill = self.floors("draft_prefill").get(0)
        prefill_per_token = prefill / unit if prefill is not None else draft / (4 * unit)  # unmeasured: a prefill reads tokens together
        return HostCosts(verify, draft / unit, prefill_per_token, _today() + ", learnt from decoding")

    def stale(self) -> bool:
        """Whether the target's floors decoding timed fell by :data:`REMEASURE_FACTOR` (median) since
        the last measurement (a size it did not time: the line through those it did): the figures
        decoding cannot time may be a busier host's."""
        reference = {n: floor for (m, n), floor in self._reference.items() if m == "target"}
        line = _line(reference)
        falls = []
        for key, envelope in self.envelopes.items():
            if key[0] != "target" or key not in self._timed or envelope.floor is None:
                continue
            before = reference.get(key[1]) if key[1] in reference else line(key[1]) if line is not None else None
            if before is not None:
                falls.append(before / envelope.floor)
        return bool(falls) and statistics.median(falls) >= REMEASURE_FACTOR

    def _confirm(self, timings: Timings) -> None:
        """A second measurement: a figure it puts within :data:`CONFIRM` of the floor is confirmed;
        one it puts lower lowers the floor, which then needs confirming; one it puts higher (a spike)
        tells nothing. :attr:`confirmed` once every figure it measures is."""
        measured = set()
        quiet = self._quiet(timings)
        for model, tokens, seconds in timings:
            key = self._key("draft_measured" if model == "draft" else model, tokens)
            if key is None:
                continue
            measured.add(key)
            envelope = self.envelopes.setdefault(key, LowEnvelope())
            value = seconds / max(tokens, 1) if model == "draft_prefill" else seconds
            floor = envelope.floor
            if floor is not None and (1 - CONFIRM) * floor <= value <= (1 + CONFIRM) * floor:
                if quiet:
                    self._agreed.add(key)
            elif floor is None or value < floor:
                self._agreed.discard(key)
            envelope.count += 1
            self.dirty |= envelope.seed(value)
        self.confirmed = quiet and measured <= self._agreed

    def _quiet(self, timings: Timings) -> bool:
        """Whether a measurement ran on a host as quiet as decoding has seen: the median of its one-token target
        forwards within :data:`CONFIRM` of that forward's floor (no floor or no such forward: taken as quiet)."""
        envelope = self.envelopes.get(("target", 1))
        ones = [seconds for model, tokens, seconds in timings if (model, tokens) == ("target", 1)]
        if envelope is None or envelope.floor is None or not ones:
            return True
        return statistics.median(ones) <= (1 + CONFIRM) * envelope.floor

    def mark_measured(self) -> None:
        """The floors as they stand are the reference :meth:`stale` compares with."""
        self._reference = {k: e.floor for k, e in self.envelopes.items() if e.floor is not None}
        self._timed.clear()

    def settle(self, measure: bool = True) -> HostCosts | None:
        """After a request: measures again (``measure`` and a probe given) while the floors are not
        confirmed or :meth:`stale`; writes floors that moved to the cache; returns the figures the
        plan uses from now on: the learnt ones where any moved by more than :data:`PLAN_TOLERANCE`
        from :attr:`current`, else :attr:`current`."""
        if measure and self.probe is not None and self.probes < MAX_PROBES and (not self.confirmed or self.stale()):
            if self.confirmed:  # stale: every figure needs confirming again
                self.confirmed, self._agreed = False, set()
            self.probes += 1
            self._confirm(self.probe())
            self.mark_measured()
            self.dirty = True
        if self.dirty:
            self.save()
        new = self.costs()
        if new is not None and (self.current is None or _moved(self.current, new)):
            self.current = new
        return self.current

    # -- the cache ---------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The floors (seconds) and their counts, and whether they are confirmed, as JSON holds them."""
        return {"floors": [[m, n, e.floor, e.count] for (m, n), e in sorted(self.envelopes.items()) if e.floor is not None],
                "confirmed": self.confirmed}

    def save(self) -> None:
        """Write the floors to the cache (a cache that cannot be written keeps them in memory)."""
        if self.key is not None:
            write_costs(self.key, self.to_dict(), _today(), self.cache_dir)
        self.dirty = False

    @classmethod
    def load(cls, key: dict[str, Any] | None, cache_dir: str | os.PathLike[str] | None = None,
             probe: Callable[[], Timings] | None = None) -> "LiveCosts":
        """The floors cached for ``key`` (none where the file is absent or unusable)."""
        live = cls(key, cache_dir, probe)
        cached = read_costs(key, cache_dir) if key is not None else None
        rows = cached[0].get("floors") if cached is not None else None
        for row in rows if isinstance(rows, list) else []:
            try:
                model, tokens, floor, count = str(row[0]), int(row[1]), float(row[2]), int(row[3])
            except (TypeError, ValueError, IndexError):
                continue
            if (model, tokens) == cls._key(model, tokens or MIN_PREFILL_TOKENS) and math.isfinite(floor) and floor > 0:
                live.envelopes[(model, tokens)] = LowEnvelope(floor=floor, count=count)
        # a confirmation holds for the day the floors were written (see the module text)
        live.confirmed = bool(cached[0].get("confirmed")) and cached[1] == _today() if cached is not None else False
        live.mark_measured()
        live.settle(measure=False)
        return live


def learned_costs(target: SequenceModel, draft: SequenceModel, context: list[int], cache_dir: str | os.PathLike[str] | None = None,
                  clock: Callable[[], float] = time.perf_counter) -> tuple[LiveCosts, Timings]:
    """This pair's learnt costs on this host (``models.cost_cache``); where none are cached yet, the
    forwards of :func:`plan_costs.measure_costs` on ``context`` seed them (and are returned, for
    adaptive k; [] where read). Decoding then feeds :meth:`LiveCosts.observe`."""
    context = list(context[:CONTEXT_TOKENS]) or [0]

    def measure(repeats: int) -> Timings:
        costs, seen = plan_costs.measure_costs(target, draft, context, repeats, clock=clock)
        unit = statistics.median(s for m, n, s in seen if (m, n) == ("target", 1))
        return [*seen, ("draft_prefill", len(context), costs.draft_prefill_per_token * len(context) * unit)]

    live = LiveCosts.load(cost_key(target, draft, WHAT), cache_dir, lambda: measure(1))
    if live.current is not None:
        return live, []
    seen = measure(2)
    live.seed(seen)
    live.mark_measured()
    live.dirty = True
    live.settle(measure=False)
    return live, [t for t in seen if t[0] != "draft_prefill"]


def _line(floors: dict[int, float]) -> Callable[[float], float] | None:
    """The least-squares line through ``floors`` (tokens -> seconds, slope >= 0); None under two sizes."""
    sizes = sorted(floors)
    if len(sizes) < 2:
        return None
    mean_n = sum(sizes) / len(sizes)
    mean_s = sum(floors[n] for n in sizes) / len(sizes)
    slope = max(0.0, sum((n - mean_n) * (floors[n] - mean_s) for n in sizes) / sum((n - mean_n) ** 2 for n in sizes))
    return lambda n: mean_s + slope * (n - mean_n)


def _moved(old: HostCosts, new: HostCosts) -> bool:
    """Whether any figure the plan reads moved by more than :data:`PLAN_TOLERANCE`."""
    pairs = [(old.verify_cost(n), new.verify_cost(n)) for n in SIZES]
    pairs += [(old.draft_forward, new.draft_forward), (old.draft_prefill_per_token, new.draft_prefill_per_token)]
    return any(abs(b - a) > PLAN_TOLERANCE * abs(a) for a, b in pairs)


def _today() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
