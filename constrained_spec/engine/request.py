"""One builder for a decode: a request alone, or a row of the continuous batch.

A :class:`RequestBuilder` (one per ``Generator``) turns a :class:`DecodeRequest` into a run of the
decode loop (:class:`~constrained_spec.engine.loop.SpeculativeDecoder`) and owns what every path
shares: the request's proposers, the inputs of the draft plan (``engine.draft_plan``; with this
host's measured costs where :meth:`RequestBuilder.calibrate_plan` ran, ``engine.plan_costs``), the
adaptive draft-length state and its calibration. A request alone runs on the models themselves, one at a
time (:attr:`RequestBuilder.lock`); a batch row takes a slot of the
:class:`~constrained_spec.engine.batching.BatchCoordinator` and runs the same loop over the slot's
row views, its verify joining the other rows'. An SMC request's particles are rows of the batch
when there is one and it has as many slots (``engine.smc_rows``: the request waits until it holds
that many), else they run one after another on the models themselves.
A budget overrun raises :class:`~constrained_spec.errors.TokenBudgetExceeded` carrying the partial
output (``token_ids``, ``prompt_tokens``), from the loop itself.

Adaptive k (``DecodeConfig.adaptive``) on batch rows: rows decode on their own threads at once, so
each decodes with its own copy of the shared draft-length state, taken when it starts, and hands its
learnt state back when it ends (the last to end wins): no state is touched by two threads. A row's
cost curves time its own calls, its share of each batched forward (waits included), and its block
grows within the cap the batch's load sets (``BatchCoordinator.draft_cap``). The rule reads only
proposals and past verifies, so rows stay exact whatever lengths it picks.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import threading
import time
from typing import TYPE_CHECKING, Callable

from constrained_spec.config import DecodeConfig
from constrained_spec.engine.decode_request import DecodeRequest
from constrained_spec.engine.draft_length import AdaptiveDraftLength
from constrained_spec.engine.draft_plan import default_gain
from constrained_spec.engine.live_costs import LiveCosts, learned_costs
from constrained_spec.engine.loop import Drafting, SpeculativeDecoder, Verifier
from constrained_spec.engine.plan_costs import HostCosts, gain_per_token
from constrained_spec.engine.prefill import on_cpu
from constrained_spec.engine.proposers import GrammarStringProposer, GrammarStrings, PromptLookupProposer, PromptText, Proposer
from constrained_spec.engine.stats import DecodeResult
from constrained_spec.grammar.vocab import TokenVocabulary
from constrained_spec.lru import LRUCache
from constrained_spec.models.protocol import SequenceModel
from constrained_spec.sampling import make_generator

if TYPE_CHECKING:
    from constrained_spec.engine.batching import BatchCoordinator
    from constrained_spec.engine.smc import SMCResult

__all__ = ["DecodeRequest", "RequestBuilder"]

#: grammar-string tables a builder keeps (LRU), one per constraint
STRINGS_CACHE_SIZE = 64


class RequestBuilder:
    """Builds and runs the decode of a request on ``target`` (and ``draft``), or as a row of
    ``batch``; ``max_k``: the cap of the adaptive draft length (``num_draft_tokens``)."""

    def __init__(self, target: SequenceModel, draft: SequenceModel | None, verifier: Verifier, vocab: TokenVocabulary,
                 encode: Callable[[str], list[int]], *, max_k: int, batch: BatchCoordinator | None = None) -> None:
        self.target, self.draft, self.verifier, self.batch = target, draft, verifier, batch
        self.vocab, self.encode = vocab, encode
        #: adaptive k's state, learnt across requests (costs and keep rates)
        self.draft_length = AdaptiveDraftLength(max_k=max(max_k, 1))
        #: one request at a time on the models themselves (not batch rows)
        self.lock = threading.Lock()
        self._state_lock = threading.Lock()  # batch rows take and return copies of ``draft_length``
        self._strings: LRUCache[str, GrammarStrings] = LRUCache(STRINGS_CACHE_SIZE)
        self._prompt_text = PromptText(vocab, encode)  # one request at a time, under ``lock``
        #: this host's forward costs for the draft plan (:meth:`calibrate_plan`); None: the constants
        self.plan_costs: HostCosts | None = None
        #: learns those costs from the forwards requests alone run (``engine.live_costs``)
        self.live_costs: LiveCosts | None = None

    # -- what a request uses -----------------------------------------------------------------
    def proposers(self, request: DecodeRequest, shared_text: bool) -> list[Proposer]:
        """The free proposers ``request.config`` names, in order; ``shared_text``: prompt lookup
        uses the builder's text index (a request under :attr:`lock`), else one of its own."""
        config = request.config
        sources = config.sources(self.draft is not None)
        out: list[Proposer] = []
        if "grammar" in sources:
            out.append(GrammarStringProposer(self._strings.get_or_make(request.grammar_key, lambda: GrammarStrings(self.encode, self.vocab))))
        if "lookup" in sources:
            out.append(PromptLookupProposer(self._prompt_text if shared_text else PromptText(self.vocab, self.encode), config.lookup_min_ngram))
        return out

    def uses_draft(self, config: DecodeConfig) -> bool:
        """Whether a request with ``config`` may use the draft model (the plan may still leave it out)."""
        return "draft" in config.sources(self.draft is not None)

    def _decoder(self, request: DecodeRequest, target: SequenceModel, draft: SequenceModel | None, verifier: Verifier,
                 draft_length: AdaptiveDraftLength | None, shared_text: bool, draft_cap: Callable[[int], int] | None = None,
                 ) -> SpeculativeDecoder:
        config = request.config
        plan_auto = draft is not None and config.draft_plan == "auto"
        costs = self.plan_costs if config.calibrate_plan else None
        learn = self.live_costs.observe if costs is not None and self.live_costs is not None and draft_cap is None else None
        drafting = Drafting(self.proposers(request, shared_text), draft_length, draft_cap,
                            output_bound=request.output_bound if plan_auto else None, on_forward=learn,
                            draft_gain=default_gain(request.kind) if costs is None else gain_per_token(costs, request.kind))
        if costs is not None:
            drafting = dataclasses.replace(drafting, draft_prefill_cost=costs.draft_prefill_per_token, plan_source=costs.describe(),
                                           verify_cost=costs.verify_cost)
        return SpeculativeDecoder(target, draft, request.new_matcher(), request.policy, config, max_new_tokens=request.max_new_tokens,
                                  verifier=verifier, generator=make_generator(request.policy.seed), hooks=request.hooks,
                                  drafting=drafting)

    # -- runs ---------------------------------------------------------------------------------
    def decode(self, request: DecodeRequest) -> DecodeResult:
        """Run ``request``: alone on the models, or as a row of the batch when there is one."""
        config = request.config
        if self.batch is None:
            with self.lock:
                draft = self.draft if self.uses_draft(config) else None
                decoder = self._decoder(request, self.target, draft, self.verifier,
                                        self.draft_length if config.adaptive else None, shared_text=True)
                try:
                    return decoder.run(request.prompt_ids)
                finally:
                    if self.live_costs is not None and decoder.on_forward is not None:
                        self.plan_costs = self.live_costs.settle()
        batch, state = self.batch, None
        slot = batch.acquire()
        try:
            state = self._take_state() if config.adaptive else None  # the state as the rows before this one left it
            draft = batch.rows("draft", slot) if self.uses_draft(config) else None
            decoder = self._decoder(request, batch.rows("target", slot), draft, batch.verifier(self.verifier), state,
                                    shared_text=False, draft_cap=batch.draft_cap)
            return decoder.run(request.prompt_ids)
        finally:
            batch.release(slot)
            if state is not None:
                self._return_state(state)

    def decode_smc(self, request: DecodeRequest, particles: int, ess_threshold: float) -> SMCResult:
        """Run ``request`` by SMC (``engine.smc``): as ``particles`` rows of the batch where there is
        one with that many slots, else on the models, one request at a time; the hooks'
        ``on_tokens`` gets the returned sample once, at the end (a particle's tokens may be dropped)."""
        from constrained_spec.engine.smc import SMCOptions, decode_smc

        config, hooks = request.config, request.hooks
        on_tokens = hooks.on_tokens if hooks is not None else None
        quiet = dataclasses.replace(request, hooks=dataclasses.replace(hooks, on_tokens=None)) if hooks is not None else request
        options = SMCOptions(particles, ess_threshold)
        if self.batch is not None and particles <= self.batch.slots:
            from constrained_spec.engine.smc_rows import ParticleRows

            batch = self.batch
            drafting = Drafting((), self._take_state() if config.adaptive else None)
            with ParticleRows(batch, particles, self.uses_draft(config)) as rows:
                target, draft = rows.fresh()
                result = decode_smc(quiet, target, draft, batch.verifier(self.verifier), options, drafting, rows=rows,
                                    proposers=lambda: self.proposers(request, shared_text=False))
        else:
            with self.lock:
                drafting = Drafting(self.proposers(request, self.batch is None), self.draft_length if config.adaptive else None)
                result = decode_smc(quiet, self.target, self.draft if self.uses_draft(config) else None, self.verifier,
                                    options, drafting)
        if on_tokens is not None and result.token_ids:
            on_tokens(list(result.token_ids))
        return result

    # -- adaptive k's state ----------------------------------------------------------------------
    def _take_state(self) -> AdaptiveDraftLength:
        """A batch row's own copy of the shared draft-length state."""
        with self._state_lock:
            return copy.deepcopy(self.draft_length)

    def _return_state(self, state: AdaptiveDraftLength) -> None:
        """A batch row's learnt state becomes the shared one (the object stays the same)."""
        with self._state_lock:
            self.draft_length.target, self.draft_length.draft, self.draft_length.keep = state.target, state.draft, state.keep

    def calibrate_plan(self, context_ids: list[int], cache_dir: str | os.PathLike[str] | None = None) -> HostCosts | None:
        """Take this host's forward costs for the draft plan (``engine.plan_costs``): read from the
        cache, else measured on ``context_ids`` and cached (a few seconds for the default pair), then
        learnt from the forwards of each request alone (``engine.live_costs``);
        what is measured also warms adaptive k's cost curves. Only for a draft model on the CPU
        (elsewhere the plan keeps the draft, no figures needed)."""
        if self.draft is None or not on_cpu(self.target, self.draft):
            return None
        with self.lock:
            live, seen = learned_costs(self.target, self.draft, context_ids, cache_dir)
        self._observe_costs(seen)
        self.live_costs, self.plan_costs = live, live.current
        return live.current

    def _observe_costs(self, seen: list[tuple[str, int, float]]) -> None:
        """Timed forwards (model, tokens fed, seconds) join adaptive k's cost curves."""
        rule = self.draft_length
        with self._state_lock:
            for name, n, seconds in seen:
                (rule.target if name == "target" else rule.draft).observe(n, seconds)

    def calibrate(self, context_ids: list[int], repeats: int = 2) -> None:
        """Measure target forward cost by tokens fed (1..max_k+1) and one draft forward, for adaptive
        k: an optional warm start (13-16 s for the default pair on 2 CPU cores, one thread); without it the rule
        learns the costs from the forwards of the first request."""
        context = list(context_ids)
        rule = self.draft_length
        seen: list[tuple[str, int, float]] = []
        with self.lock:
            for name, model, sizes in (("target", self.target, range(1, rule.max_k + 2)), ("draft", self.draft, [1])):
                if model is None:
                    continue
                model.reset()
                model.extend(context[:-1] or context)
                base = model.length
                for _ in range(repeats):
                    for n in sizes:
                        t0 = time.perf_counter()
                        model.extend((context * n)[:n])
                        seen.append((name, n, time.perf_counter() - t0))
                        model.crop(base)
                model.reset()
        self._observe_costs(seen)
