"""The decode loop: draft, verify, accept, roll back.

One step:

1. **forced** - if the grammar allows exactly one token, commit it without running either model
   (p = q = a point mass, so this is exact); it enters both caches with their next forward.
2. **draft** - the proposers (``engine.proposers``) propose up to k tokens, each with the q it was
   drawn from; the matcher advances along the drafted tokens and gives the mask of every position.
3. **verify** - the target runs its pending token(s) + the k drafted tokens in one forward; the
   acceptance math (``sampling.acceptance``) keeps a prefix and gives the correction or bonus token.
4. **accept / roll back** - both caches are cropped to the accepted prefix and the matcher rolled
   back to it; the next token is committed. Nothing from the rejected suffix survives.

``num_draft_tokens = 0`` is plain constrained decoding with the target alone: the baseline.
Every tensor the loop builds (q rows, masks, uniforms, policy parameters) is put on the device of
the model whose math uses it; uniforms are drawn on the CPU from the request's generator first, so
a seed gives the same sample on every device.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from constrained_spec.config import DecodeConfig
from constrained_spec.engine.block import DraftBlock, TimedMatcher
from constrained_spec.engine.draft_length import AdaptiveDraftLength
from constrained_spec.engine.draft_plan import DRAFT_GAIN_PER_TOKEN, DRAFT_PREFILL_PER_TOKEN, expected_new_tokens, plan_draft
from constrained_spec.engine.lookup_gate import LookupGate
from constrained_spec.engine.prefill import draft_prefill_length, on_cpu, overlap_pays, prefill_pair
from constrained_spec.engine.proposers import DraftContext, DraftModelProposer, Proposal, Proposer
from constrained_spec.engine.stats import DecodeHooks, DecodeResult, DecodeStats
from constrained_spec.errors import ConfigError, ConstrainedSpecError, GrammarError, TokenBudgetExceeded
from constrained_spec.grammar.matcher import GrammarMatcher
from constrained_spec.models.protocol import CacheIntrospection, SequenceModel
from constrained_spec.sampling import SamplingPolicy, VerifyResult, make_generator, pack_bitmask, unpack_bitmask, verify
from constrained_spec.sampling.smc_weights import filter_keep
from constrained_spec.sampling.verifier import takes_filters

Verifier = Callable[..., VerifyResult]


class InvariantError(ConstrainedSpecError):
    """A debug check found caches or grammar out of step with the committed tokens (a bug)."""


@dataclass(frozen=True)
class Drafting:
    """Who drafts a block and how long it is, beside the draft model itself (every field optional).

    ``proposers``: the free proposal sources (grammar strings, prompt lookup, ...), asked in order;
    the draft model, when there is one, proposes where none of them does. ``draft_length``: adaptive
    k's state (``config.num_draft_tokens`` is then the cap); None: fixed k. ``draft_cap``: k -> the
    draft length for this step (a batch lowers it as rows join: ``engine.batching``).
    ``output_bound``: the most bytes the grammar's language allows (None: unbounded or unknown), and
    ``draft_gain``: the draft's gain per token for this kind of output (``draft_plan.default_gain``,
    or modelled from this host's measured costs: ``engine.plan_costs``), ``draft_prefill_cost``: the
    draft's prefill per prompt token (None: ``draft_plan.DRAFT_PREFILL_PER_TOKEN``) and
    ``plan_source``: where those figures come from, in words; all for ``config.draft_plan``. ``verify_cost``: a
    verify of n tokens in one-token forwards on this host (``HostCosts.verify_cost``; None: unknown), for the
    lookup gate where no draft model proposes (``engine.lookup_gate``).
    ``allowed_mask``: matcher -> the tokens the draft's q may take (default: the grammar's; a test
    gives a draft that ignores the grammar). ``on_forward``: (model, tokens fed, seconds) of each
    forward the loop times anyway: "target" verifies, "draft" proposals, a "draft_prefill" that ran
    alone (``engine.live_costs`` learns the plan's costs from them).
    """

    proposers: Sequence[Proposer] = ()
    draft_length: AdaptiveDraftLength | None = None
    draft_cap: Callable[[int], int] | None = None
    output_bound: int | None = None
    draft_gain: float | None = None
    draft_prefill_cost: float | None = None
    plan_source: str = "constant"
    verify_cost: Callable[[float], float] | None = None
    allowed_mask: Callable[[GrammarMatcher], torch.Tensor] | None = None
    on_forward: Callable[[str, int, float], None] | None = None


@dataclass(frozen=True)
class StepRules:
    """How a step treats the grammar (:meth:`SpeculativeDecoder.step`'s ``rules``). The loop takes the
    defaults; SMC (``engine.smc``) steps its particles by :data:`WEIGHED_STEPS`, so that every committed
    token has the logits its weight is read off.

    ``forced_shortcut``: a grammar-forced token is committed without a forward, and drafted as a point mass
    (False: the grammar never reports a forced token to the step; every token is committed by a verify).
    ``cut_in_mask``: with top-k / top-p, the verify samples the cut of the whole vocabulary's distribution
    (``filter_keep``) intersected with the grammar mask, the cut itself then off (where the two share no token
    the grammar mask stays); the step's record keeps the grammar's own masks."""

    forced_shortcut: bool = True
    cut_in_mask: bool = False


#: the rules SMC's particles step by
WEIGHED_STEPS = StepRules(forced_shortcut=False, cut_in_mask=True)


@dataclass(frozen=True)
class StepRecord:
    """What one step committed (``tokens``, in order; EOS included once committed) and what it used: the
    verify's target logits [k + 1, V] and the grammar's bitmasks [k + 1, W] at the same positions (the
    block's positions, of which the first ``len(tokens)`` committed); both None for a forced token,
    committed without a forward."""

    tokens: list[int]
    logits: torch.Tensor | None = None
    masks: torch.Tensor | None = None


class SpeculativeDecoder:
    """Runs constrained (speculative) decoding for one request.

    ``target`` and ``draft`` share one vocabulary (checked by the caller); ``draft`` may be None.
    ``drafting``: the free proposers, the draft length's rule and cap, and the draft plan's inputs
    (:class:`Drafting`). ``generator``: the request's random stream (default: seeded by
    ``policy.seed``).
    """

    def __init__(
        self,
        target: SequenceModel,
        draft: SequenceModel | None,
        matcher: GrammarMatcher,
        policy: SamplingPolicy,
        config: DecodeConfig,
        *,
        max_new_tokens: int = 256,
        verifier: Verifier = verify,
        generator: torch.Generator | None = None,
        hooks: DecodeHooks | None = None,
        drafting: Drafting = Drafting(),
    ) -> None:
        if max_new_tokens < 1:
            raise ConfigError("max_new_tokens must be >= 1")
        self.config = config
        self.hooks = hooks or DecodeHooks()
        self.stats = DecodeStats()
        self.target = target
        self.device = torch.device(target.device)
        self.matcher = TimedMatcher(matcher, self.stats, self.hooks.on_grammar_call)
        self.policy = policy
        self.gen = generator or make_generator(policy.seed)
        self.params = policy.as_tensors(1, self.device)
        self.vocab_size = target.vocab_size
        self.draft = draft if config.num_draft_tokens > 0 else None
        self.free = list(drafting.proposers)
        self.model: DraftModelProposer | None = None
        if self.draft is not None:
            want_confidence = config.draft_confidence > 0 or drafting.draft_length is not None
            draft_device = torch.device(self.draft.device)
            self.model = DraftModelProposer(
                self.draft, policy.as_tensors(1, draft_device), lambda n: self._uniform(n, draft_device),
                restricted_head_max_rows=config.restricted_head_max_rows, restrict_head=config.restrict_head,
                want_confidence=want_confidence, allowed_mask=drafting.allowed_mask)
        #: lookup plans only where they beat the draft model's block, or without one the target alone at this
        #: host's verify costs (nothing to choose where neither is known)
        gated = config.lookup_gate and (self.model is not None or drafting.verify_cost is not None)
        self.lookup_gate = LookupGate(verify_cost=drafting.verify_cost) if gated else None
        self.k = config.num_draft_tokens if (self.model is not None or self.free) else 0
        self.max_new_tokens = max_new_tokens
        self.verifier = verifier
        # the fused verifier would read top-k / top-p off the device to choose its path (a host sync
        # per step); the policy says it here, once
        self.verify_options = {"filters": policy.top_k > 0 or policy.top_p < 1.0} if takes_filters(verifier) else {}
        self.draft_length = drafting.draft_length
        #: the draft length by load (batched decoding): k -> the cap to use this step
        self.draft_cap = drafting.draft_cap
        self.committed: list[int] = []  # prompt + accepted tokens
        self.prompt_len = 0
        self.draft_offset = 0  # committed tokens before the draft's cache (``draft_window``)
        self.output_bound = drafting.output_bound
        #: the draft's gain per token the plan weighs: the config's, else the caller's for this
        #: constraint's kind (``draft_plan.default_gain``), else the JSON Schema figure
        self.draft_gain = next(g for g in (config.draft_gain_per_token, drafting.draft_gain, DRAFT_GAIN_PER_TOKEN) if g is not None)
        self.draft_prefill_cost = DRAFT_PREFILL_PER_TOKEN if drafting.draft_prefill_cost is None else drafting.draft_prefill_cost
        #: where the plan's figures come from, for ``stats.draft_plan_reason``
        self.plan_source = drafting.plan_source
        self.on_forward = drafting.on_forward
        if config.draft_gain_per_token is not None:
            measured = drafting.plan_source if drafting.draft_prefill_cost is not None else ""
            self.plan_source = "; ".join(s for s in ("gain from DecodeConfig.draft_gain_per_token", measured) if s)

    # -- helpers ---------------------------------------------------------------------------
    def _uniform(self, n: int, device: torch.device) -> torch.Tensor:
        """n uniforms from the request's generator (CPU), on ``device`` (copied without a host sync)."""
        return torch.rand(n, generator=self.gen).to(device, non_blocking=True)

    def _leave_out_draft(self) -> None:
        """This request runs without the draft model: free proposers (if any) and the target."""
        self.draft, self.model = None, None
        if self.lookup_gate is not None and self.lookup_gate.verify_cost is None:
            self.lookup_gate = None  # lookup against the target alone needs the host's verify costs
        self.k = self.k if self.free else 0
        self.stats.draft_skipped = True

    @property
    def generated(self) -> list[int]:
        return self.committed[self.prompt_len :]

    def _commit(self, token: int) -> None:
        self.matcher.advance(token)
        self._record(token)

    def _record(self, token: int) -> None:
        """``token`` (already accepted by the matcher) joins the committed tokens."""
        self.committed.append(token)
        if not self.matcher.is_eos(token):
            self.stats.generated_tokens += 1

    # -- the algorithm ---------------------------------------------------------------------
    def run(self, prompt_ids: list[int]) -> DecodeResult:
        """Generate until EOS, a final state at the budget, or the budget runs out (error)."""
        start = time.perf_counter()
        self.start(prompt_ids)
        while not self.matcher.is_terminated():
            remaining = self.max_new_tokens - self.stats.generated_tokens
            if remaining <= 0:
                break
            record = self.step(remaining)
            if self.hooks.on_tokens is not None:
                new = [t for t in record.tokens if not self.matcher.is_eos(t)]
                if new:
                    self.hooks.on_tokens(new)
            if self.hooks.on_step is not None:
                self.hooks.on_step()
            if self.config.debug_checks:
                self.check_invariants()
        self.stats.wall_seconds = time.perf_counter() - start
        self._book_heads()
        tokens = [t for t in self.generated if not self.matcher.is_eos(t)]
        terminated = self.matcher.is_terminated()
        self.stats.stop_reason = "eos" if terminated else "max_new_tokens"
        if not (terminated or self.matcher.is_accepting()):
            raise TokenBudgetExceeded(self.max_new_tokens, self.matcher.vocab.decode(tokens), token_ids=tokens, prompt_tokens=self.prompt_len,
                                      stats=self.stats)
        return DecodeResult(token_ids=tokens, complete=True, stats=self.stats, eos_token_id=self._ended_with())

    def start(self, prompt_ids: list[int], plan: bool = True) -> None:
        """Take the prompt: the committed tokens, the draft's window, and the prefill of both caches. With
        ``plan``, the draft plan first (whether this request uses the draft model at all, and whether the
        draft's prefill overlaps the target's); without (SMC's particles), the draft is used and prefilled after
        the target."""
        if not prompt_ids:
            raise ConfigError("the prompt must hold at least one token")
        start = time.perf_counter()
        self.committed = list(prompt_ids)
        self.prompt_len = len(prompt_ids)
        window = self.config.draft_window
        self.draft_offset = max(0, len(prompt_ids) - 1 - window) if window else 0
        if self.model is not None:
            self.model.offset = self.draft_offset
        draft_tokens = draft_prefill_length(len(prompt_ids), self.draft_offset)
        overlap = plan and overlap_pays(self.target, self.draft, self.config.prefill_overlap, draft_tokens)
        if plan and self.model is not None and self.draft_cap is None:  # a batch row keeps its slot's draft rows in step
            expected = expected_new_tokens(self.max_new_tokens, self.output_bound)
            chosen = plan_draft(self.config.draft_plan, draft_tokens, expected, overlap, on_cpu(self.target, self.draft),
                                gain_per_token=self.draft_gain, prefill_per_token=self.draft_prefill_cost, source=self.plan_source)
            self.stats.draft_plan_reason = chosen.reason
            if not chosen.use_draft:
                self._leave_out_draft()
                overlap = False
        times = prefill_pair(self.target, self.draft, prompt_ids, self.draft_offset, overlap)
        self.stats.prefill_seconds = time.perf_counter() - start
        self.stats.draft_prefill_seconds = times.draft_seconds
        self.stats.prefill_overlapped = times.overlapped
        if plan and self.on_forward is not None and self.draft is not None and not times.overlapped:
            self.on_forward("draft_prefill", draft_tokens, times.draft_seconds)

    def fork(self, target: SequenceModel, draft: SequenceModel | None, matcher: GrammarMatcher,
             make: Callable[[SequenceModel, SequenceModel | None, GrammarMatcher], SpeculativeDecoder]) -> SpeculativeDecoder:
        """A decoder that continues from this one's state. ``target`` and ``draft``: forks of this one's caches
        (``models.protocol.fork_model`` alone; a slot's copied rows in a batch); ``matcher``: a fresh matcher of
        the same grammar, advanced here along this one's generated tokens (a replay); ``make`` builds the
        decoder over them (its policy, proposers and generator). It takes the committed tokens, the prompt, the
        draft's window, and copies of the lookup gate and the adaptive draft length."""
        for token in self.generated:
            matcher.advance(token)
        child = make(target, draft, matcher)
        child.committed = list(self.committed)
        child.prompt_len = self.prompt_len
        child.draft_offset = self.draft_offset
        if child.model is not None and self.model is not None:
            child.model.offset = self.model.offset
        child.lookup_gate = copy.deepcopy(self.lookup_gate)
        child.draft_length = copy.deepcopy(self.draft_length)
        return child

    def _ended_with(self) -> int | None:
        """The EOS id the generated tokens end with, None where they end otherwise."""
        last = self.generated[-1:]
        return last[0] if last and self.matcher.is_eos(last[0]) else None

    def step(self, remaining: int, rules: StepRules = StepRules()) -> StepRecord:
        """One forced token, or one draft-verify-accept-rollback round, by ``rules``; returns what it
        committed and the logits and grammar masks its verify used (:class:`StepRecord`)."""
        self.stats.steps += 1
        forced = self.matcher.forced_token() if rules.forced_shortcut else None
        if forced is not None:
            self._commit(forced)
            self.stats.forced_tokens += 1
            return StepRecord([forced])
        before = len(self.committed)
        k = self.k if self.draft_cap is None or self.k == 0 else self.draft_cap(self.k)
        block = self.propose(min(k, remaining - 1), rules)
        result, logits, masks = self.verify_block(block, rules)
        self.accept_and_rollback(block, result)
        return StepRecord(self.committed[before:], logits, masks)

    def _free_plan(self, ctx: DraftContext, room: int, fed: int) -> tuple[list[Proposal], str]:
        """The first non-empty plan of the free proposers, in order; a lookup plan only where the
        gate finds it worth more than the draft model's tokens for the ``room`` positions left, or,
        without a draft model, its first tokens that are worth more than the target alone (the
        verify takes ``fed`` tokens before them)."""
        for proposer in self.free:
            plan = proposer.propose(ctx)
            if not plan:
                continue
            gate = self.lookup_gate
            if proposer.source == "lookup" and gate is not None:
                kind = plan[0].kind or proposer.source
                gate.record(ctx.drafted, kind, [p.token for p in plan])  # scored against what the verify commits
                keep = len(plan) if self.model is not None else gate.alone_length(len(plan), room, fed, kind)
                if keep == 0 or (self.model is not None and not gate.worth_it(len(plan), room, kind)):
                    self.stats.lookup_gated += 1
                    continue
                plan = plan[:keep]
            return plan, proposer.source
        return [], ""

    def propose(self, k: int, rules: StepRules = StepRules()) -> DraftBlock:
        """Draft up to k tokens: a :class:`DraftBlock`; the matcher is left at the block's end.

        Per position: a grammar-forced single token, else the next token of a free proposer's plan
        (a point mass) where the grammar allows it, else a draw from the draft model's masked q.
        Which applies is a function of the drafted prefix only, so q is always the distribution
        the token was really drawn from (the argument is in ``engine.proposers``). The block ends
        early after a model token whose draft probability is below ``draft_confidence`` (it is
        likely to be rejected, and the forwards after it wasted); it still takes the free tokens
        that follow, which cost only a verify row each. With adaptive k (``draft_length``), the
        block also ends where one more position is not worth its cost. A proposal the grammar
        forbids (a proposer that ignores the grammar) ends the block: the verifier rejects it.
        ``rules.forced_shortcut`` off: no position is grammar-forced (forced strings still come as
        free proposers' point masses).
        """
        t0 = time.perf_counter()
        mask_before = self.stats.mask_seconds  # grammar work inside drafting is booked as mask time
        matcher, block = self.matcher, DraftBlock()
        block.masks.append(matcher.bitmask())
        plan: list[Proposal] = []
        plan_source = ""
        stop = False  # the draft was unsure of a token: no more model tokens in this block
        adaptive = self.draft_length
        fed = len(self.committed) - self.target.length  # tokens the verify takes before the drafts
        kept = 1.0  # estimated probability that every token drafted so far is kept
        last_confidence: float | None = None
        ctx = DraftContext(matcher, list(self.committed), 0)
        for _ in range(k):
            forced = matcher.forced_token() if rules.forced_shortcut else None
            if forced is not None:  # q is a point mass: no draft forward needed
                source = "forced"
            else:
                if not plan:
                    plan, plan_source = self._free_plan(ctx, k - len(block.tokens), fed + len(block.tokens))
                if plan and matcher.count_allowed([plan[0].token]) == 1:
                    source = plan_source
                elif self.model is not None and not stop:
                    plan, source = [], "model"
                else:
                    break  # nothing to propose, or no more model tokens after an unsure one
            expected_confidence = last_confidence if source == "model" else None
            if adaptive is not None and not adaptive.worth_proposing(kept, source, expected_confidence, fed + len(block.tokens)):
                self.stats.length_stops += 1
                break
            if forced is not None:
                proposal, plan = Proposal(forced), []
            elif source != "model":
                proposal = plan.pop(0)
            else:
                assert self.model is not None
                t_fwd = time.perf_counter()
                proposal = self.model.propose(ctx)[0]
                seconds = time.perf_counter() - t_fwd
                if adaptive is not None:
                    adaptive.draft.observe(1, seconds)
                if self.on_forward is not None:
                    self.on_forward("draft", 1, seconds)
                self.stats.draft_forwards += 1
                last_confidence = proposal.confidence
                c = self.config.draft_confidence
                if c > 0 and proposal.confidence is not None and proposal.confidence < c:
                    stop = True
            if adaptive is not None:
                kept *= adaptive.keep.rate(source, proposal.confidence)
            token = proposal.token
            block.tokens.append(token)
            block.q_rows.append(proposal.q)
            block.sources.append(source)
            block.confidences.append(proposal.confidence)
            ctx.ids.append(token)
            ctx.drafted += 1
            try:
                matcher.advance(token)
            except GrammarError:  # forbidden here: p = 0, a certain rejection; nothing after it
                block.masks.append(block.masks[-1])
                break
            block.masks.append(matcher.bitmask())
            if matcher.is_eos(token):
                break
            if source == "model" and stop:
                self.stats.confidence_stops += 1
        self.stats.drafted_tokens += len(block.tokens)
        self.stats.model_proposed += block.sources.count("model")
        self.stats.grammar_proposed += block.sources.count("grammar")
        self.stats.lookup_proposed += block.sources.count("lookup")
        self.stats.draft_seconds += time.perf_counter() - t0 - (self.stats.mask_seconds - mask_before)
        return block

    def verify_block(self, block: DraftBlock, rules: StepRules = StepRules()) -> tuple[VerifyResult, torch.Tensor, torch.Tensor]:
        """One target forward over pending + drafted tokens, then the verify math; the result, and the
        target's logits [k + 1, V] and the grammar's bitmasks [k + 1, W] it was given (before the
        top-k / top-p cut that ``rules.cut_in_mask`` puts into the masks)."""
        drafted = block.tokens
        t0 = time.perf_counter()
        pending = self.committed[self.target.length :]
        logits = self.target.extend(pending + drafted)[-(len(drafted) + 1) :]
        self.stats.target_forwards += 1
        t1 = time.perf_counter()
        if self.draft_length is not None:
            self.draft_length.target.observe(len(pending) + len(drafted), t1 - t0)
        if self.on_forward is not None:
            self.on_forward("target", len(pending) + len(drafted), t1 - t0)
        self.stats.verify_seconds += t1 - t0
        device, k = self.device, len(drafted)
        masks = torch.stack(block.masks).to(device, non_blocking=True)
        q, point_mass = block.draft_probs(self.vocab_size, device)
        used, top_k, top_p, options = masks.unsqueeze(0), self.params.top_k, self.params.top_p, self.verify_options
        if rules.cut_in_mask and (self.policy.top_k > 0 or self.policy.top_p < 1.0):
            used = self._cut_into(logits.unsqueeze(0), used)
            top_k, top_p = torch.zeros_like(top_k), torch.ones_like(top_p)
            options = {name: False if name == "filters" else value for name, value in options.items()}
        result = self.verifier(
            logits.unsqueeze(0),
            q,
            torch.tensor([drafted], dtype=torch.long).reshape(1, k).to(device, non_blocking=True),
            used,
            self.params.temperature,
            top_k,
            top_p,
            self._uniform(k + 1, device).unsqueeze(0),
            point_mass=point_mass,
            **options,
        )
        self.stats.sampling_seconds += time.perf_counter() - t1
        return result, logits, masks

    def _cut_into(self, logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
        """``bitmask`` [1, k + 1, W] intersected with the top-k / top-p cut of the whole vocabulary's
        distribution at each position (``filter_keep``); where the two share no token, the grammar's own."""
        p = self.policy
        keep = filter_keep(logits, p.temperature, p.top_k, p.top_p)
        allowed = unpack_bitmask(bitmask.to(logits.device), logits.shape[-1])
        both = allowed & keep
        both = torch.where(both.any(-1, keepdim=True), both, allowed)
        return pack_bitmask(both).to(bitmask.device)

    def accept_and_rollback(self, block: DraftBlock, result: VerifyResult) -> None:
        """Commit the kept prefix and the next token; crop both caches and roll the matcher back
        to the accepted prefix."""
        drafted = block.tokens
        # the step's one host sync: the accepted length and the next token, in one transfer
        n, next_token = torch.cat((result.accepted[:1], result.next_token[:1].to(result.accepted))).tolist()
        kept = block.sources[:n]
        self.stats.grammar_accepted += kept.count("grammar")
        self.stats.lookup_accepted += kept.count("lookup")
        if self.draft_length is not None:
            self.draft_length.observe_block(block.sources, block.confidences, n)
        base = len(self.committed)
        self.target.crop(base + n)  # the cache keeps committed + kept drafts; next token is pending
        if self.draft is not None:
            self.draft.crop(min(self.draft.length, base + n - self.draft_offset))
        self.matcher.rollback(base - self.prompt_len + n)
        self.stats.accepted_tokens += n
        for token in drafted[:n]:
            self._record(token)
        ended = bool(drafted) and n == len(drafted) and self.matcher.is_eos(drafted[-1])
        if self.lookup_gate is not None:
            self.lookup_gate.observe(block.sources, n, drafted[:n] + ([] if ended else [next_token]))
        if ended:
            return  # the kept block ended in EOS: no bonus token
        self._commit(next_token)

    def _book_heads(self) -> None:
        if self.model is not None:
            self.stats.restricted_head_forwards = self.model.counts.restricted
            self.stats.prefix_head_forwards = self.model.counts.prefix

    def check_invariants(self) -> None:
        """Debug mode: caches and grammar agree with the committed tokens."""
        committed = len(self.committed)
        problems = []
        # Each cache holds a prefix of the committed tokens; until EOS the newest one is pending.
        limit = committed if self.matcher.is_terminated() else committed - 1
        if self.target.length > limit:
            problems.append(f"target cache {self.target.length} not behind committed {committed}")
        if self.draft is not None and self.draft_offset + self.draft.length > limit:
            problems.append(f"draft cache {self.draft.length} (+{self.draft_offset} outside its window) not behind committed {committed}")
        if self.matcher.length != committed - self.prompt_len:
            problems.append(f"grammar path {self.matcher.length} vs generated {committed - self.prompt_len}")
        for name, model in (("target", self.target), ("draft", self.draft)):
            if isinstance(model, CacheIntrospection) and model.cache_length() != model.length:
                problems.append(f"{name} cache object holds {model.cache_length()} tokens, expected {model.length}")
        if problems:
            raise InvariantError("; ".join(problems))
