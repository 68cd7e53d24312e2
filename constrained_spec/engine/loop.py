"""The decode loop: draft, verify, accept, roll back.

One step:

1. **forced** - if the grammar allows exactly one token, commit it without running either model
   (p = q = a point mass, so this is exact); it enters both caches with their next forward.
2. **draft** - the proposer drafts up to k tokens, each drawn from its masked effective
   distribution q, walking its own copy of the automaton path.
3. **verify** - the target runs its pending token(s) + the k drafted tokens in one forward; the
   masks of all k+1 positions come from the automaton states along the drafted path.
4. **accept** - the verify function keeps a prefix and gives the correction or bonus token.
5. **roll back** - both caches are cropped to the accepted prefix; the matcher advances by the kept
   tokens and the next token only. Nothing from the rejected suffix survives.

``num_draft_tokens = 0`` is plain constrained decoding with the target alone: the baseline.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

from constrained_spec.engine.draft_length import AdaptiveDraftLength
from constrained_spec.engine.proposers import GrammarStrings, PromptText, prompt_lookup
from constrained_spec.errors import ConstrainedSpecError, TokenBudgetExceeded
from constrained_spec.grammar.matcher import Matcher
from constrained_spec.models.hf import SequenceModel
from constrained_spec.sampling.acceptance import VerifyResult, verify
from constrained_spec.sampling.distribution import PolicyTensors, SamplingPolicy, draw, effective_probs, make_generator

Verifier = Callable[..., VerifyResult]

#: the draft computes its head for the allowed tokens only up to this many of them: gathering the
#: rows costs 0.2 / 1.1 / 4.2 / 30 ms for 500 / 2k / 5k / 10k of 152k x 896 (fp16, one thread),
#: against ~3 ms for the 48k-row int8 prefix head and ~10 ms for the whole int8 head
RESTRICTED_HEAD_MAX_ROWS = 3000


@dataclass
class DecodeStats:
    """What one generation cost and how well the draft did."""

    generated_tokens: int = 0
    target_forwards: int = 0
    draft_forwards: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    forced_tokens: int = 0
    model_proposed: int = 0  # drafted by the draft model
    grammar_proposed: int = 0  # grammar-forced strings (point-mass q, no model forward)
    grammar_accepted: int = 0
    lookup_proposed: int = 0  # prompt-lookup n-gram continuations (point-mass q)
    lookup_accepted: int = 0
    restricted_head_forwards: int = 0  # draft forwards that computed the head for allowed tokens only
    prefix_head_forwards: int = 0  # draft forwards that scored the leading (common) token ids only
    confidence_stops: int = 0  # blocks ended early because the draft was unsure of its token
    length_stops: int = 0  # blocks adaptive k ended before the cap: one more position was not worth its cost
    steps: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    mask_seconds: float = 0.0
    sampling_seconds: float = 0.0
    prefill_seconds: float = 0.0
    wall_seconds: float = 0.0
    stop_reason: str = ""

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def tokens_per_target_forward(self) -> float:
        return self.generated_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second of decoding (prompt prefill excluded)."""
        decode = self.wall_seconds - self.prefill_seconds
        return self.generated_tokens / decode if decode > 0 else 0.0

    def as_dict(self) -> dict[str, float | int | str]:
        d: dict[str, float | int | str] = asdict(self)
        d["acceptance_rate"] = round(self.acceptance_rate, 4)
        d["tokens_per_target_forward"] = round(self.tokens_per_target_forward, 4)
        d["tokens_per_second"] = round(self.tokens_per_second, 3)
        return d


@dataclass
class DecodeResult:
    """Generated token ids (EOS excluded), whether the grammar completed, and the stats."""

    token_ids: list[int]
    complete: bool
    stats: DecodeStats = field(default_factory=DecodeStats)


class InvariantError(ConstrainedSpecError):
    """A debug check found caches or automaton out of step with the committed tokens (a bug)."""


@dataclass
class DraftBlock:
    """One block of proposals: tokens [n], the q rows they were drawn from [n, V], the automaton
    states before each and after the last [n+1], where each came from ("model", "forced",
    "grammar", "lookup"), and the draft's probability for each model token (None elsewhere)."""

    tokens: list[int]
    q_rows: torch.Tensor
    states: list[int]
    sources: list[str]
    confidences: list[float | None]


class SpeculativeDecoder:
    """Runs constrained (speculative) decoding for one request.

    ``target`` and ``draft`` share one vocabulary (checked by the caller); ``draft`` may be None,
    which is the same as ``num_draft_tokens = 0``.
    """

    def __init__(
        self,
        target: SequenceModel,
        draft: SequenceModel | None,
        matcher: Matcher,
        policy: SamplingPolicy,
        num_draft_tokens: int = 4,
        max_new_tokens: int = 256,
        verifier: Verifier = verify,
        debug_checks: bool = False,
        generator: torch.Generator | None = None,
        grammar_strings: GrammarStrings | None = None,
        lookup: bool = False,
        draft_length: AdaptiveDraftLength | None = None,
        restrict_head: bool = True,
        draft_confidence: float = 0.0,
        lookup_min_ngram: int = 3,
        on_tokens: Callable[[list[int]], None] | None = None,
        text_lookup: PromptText | None = None,
    ) -> None:
        if num_draft_tokens < 0:
            raise ValueError("num_draft_tokens must be >= 0")
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        self.target = target
        self.draft = draft if num_draft_tokens > 0 else None
        self.matcher = matcher
        self.policy = policy
        self.grammar_strings = grammar_strings
        self.lookup = lookup
        self.draft_length = draft_length
        self.restrict_head = restrict_head
        self.draft_confidence = draft_confidence
        self.lookup_min_ngram = lookup_min_ngram  # 3: measured more precise than 2 on the bench workload
        self.on_tokens = on_tokens  # streaming: called with each step's newly committed tokens (EOS excluded)
        self.text_lookup = text_lookup  # byte-level prompt lookup, tried where token lookup finds nothing
        has_proposer = draft is not None or grammar_strings is not None or lookup
        self.k = num_draft_tokens if has_proposer else 0
        self.max_new_tokens = max_new_tokens
        self.verifier = verifier
        self.debug_checks = debug_checks
        self.gen = generator or make_generator(policy.seed)
        self.params: PolicyTensors = policy.as_tensors(1)
        self.vocab_size = target.vocab_size
        self.stats = DecodeStats()
        self.committed: list[int] = []  # prompt + accepted tokens
        self.prompt_len = 0

    # -- helpers ---------------------------------------------------------------------------
    def _uniform(self, n: int) -> torch.Tensor:
        return torch.rand(n, generator=self.gen)

    def _allowed(self, state: int) -> torch.Tensor:
        t0 = time.perf_counter()
        allowed = self.matcher.automaton.allowed_mask(state)
        self.stats.mask_seconds += time.perf_counter() - t0
        return allowed

    @property
    def generated(self) -> list[int]:
        return self.committed[self.prompt_len :]

    def _commit(self, token: int) -> None:
        self.matcher.advance(token)
        self.committed.append(token)
        if not self.matcher.is_eos(token):
            self.stats.generated_tokens += 1

    # -- the algorithm ---------------------------------------------------------------------
    def run(self, prompt_ids: list[int]) -> DecodeResult:
        """Generate until EOS, a final state at the budget, or the budget runs out (error)."""
        if not prompt_ids:
            raise ValueError("the prompt must hold at least one token")
        start = time.perf_counter()
        self.committed = list(prompt_ids)
        self.prompt_len = len(prompt_ids)
        for model in (self.target, self.draft):
            if model is None:
                continue
            model.reset()
            if len(prompt_ids) > 1:  # the prompt's logits are not needed: models that can skip them do
                getattr(model, "prefill", model.extend)(prompt_ids[:-1])
        self.stats.prefill_seconds = time.perf_counter() - start
        while not self.matcher.finished:
            remaining = self.max_new_tokens - self.stats.generated_tokens
            if remaining <= 0:
                break
            count = self.step(remaining)
            if self.on_tokens is not None:
                new = [t for t in self.committed[len(self.committed) - count :] if not self.matcher.is_eos(t)]
                if new:
                    self.on_tokens(new)
            if self.debug_checks:
                self.check_invariants()
        self.stats.wall_seconds = time.perf_counter() - start
        tokens = [t for t in self.generated if not self.matcher.is_eos(t)]
        complete = self.matcher.finished or self.matcher.is_final()
        self.stats.stop_reason = "eos" if self.matcher.finished else "max_new_tokens"
        if not complete:
            text = self.matcher.automaton.vocab.decode(tokens)
            raise TokenBudgetExceeded(self.max_new_tokens, text)
        return DecodeResult(token_ids=tokens, complete=True, stats=self.stats)

    def step(self, remaining: int) -> int:
        """One forced token, or one draft-verify-accept-rollback round; returns how many tokens it
        committed."""
        self.stats.steps += 1
        t0 = time.perf_counter()
        forced = self.matcher.forced_token()  # builds the state's mask on first visit
        self.stats.mask_seconds += time.perf_counter() - t0
        if forced is not None:
            self._commit(forced)
            self.stats.forced_tokens += 1
            return 1
        before = len(self.committed)
        block = self.propose(min(self.k, remaining - 1))
        result = self.verify_block(block)
        self.accept_and_rollback(block, result)
        return len(self.committed) - before

    def _point_mass(self, token: int) -> torch.Tensor:
        q = torch.zeros(self.vocab_size)
        q[token] = 1.0
        return q

    def _draft_logits(self, pending: list[int], state: int) -> torch.Tensor:
        """The draft's logits [1, V] for the next position; where few tokens are allowed and the model
        supports it, the output head is computed for the allowed tokens only (same masked q)."""
        if self.restrict_head and getattr(self.draft, "can_restrict_head", False):
            allowed = self.matcher.automaton.allowed_ids(state)
            if allowed.size <= RESTRICTED_HEAD_MAX_ROWS:
                self.stats.restricted_head_forwards += 1
                return self.draft.extend_last(pending, torch.from_numpy(allowed)).unsqueeze(0)
            # a head over the common (leading) ids only; used where some allowed token is among them
            prefix = getattr(self.draft, "head_prefix", 0)
            if prefix and allowed.size and int(allowed.min()) < prefix:
                self.stats.prefix_head_forwards += 1
                return self.draft.extend_prefix_head(pending).unsqueeze(0)
        return self.draft.extend(pending)[-1:]

    def _confidence(self, logits: torch.Tensor, allowed: torch.Tensor, q: torch.Tensor, token: int) -> float:
        """The draft's probability of its own token: q itself, or the masked softmax where q is a
        greedy point mass. Ending a block on it depends on the proposal alone, so it stays exact."""
        if float(self.params.temperature[0]) > 0:
            return float(q[token])
        return float(torch.softmax(logits.float().masked_fill(~allowed, float("-inf")), -1)[0, token])

    def _free_proposal(self, state: int, drafted: list[int]) -> tuple[list[int], str]:
        """Zero-cost proposals from ``state``: the grammar's forced string, else a prompt lookup."""
        if self.grammar_strings is not None:
            tokens = self.grammar_strings.tokens(state)
            if tokens:
                return list(tokens), "grammar"
        if self.lookup:
            n = self.lookup_min_ngram
            tokens = prompt_lookup(self.committed + drafted, max_ngram=max(3, n), min_ngram=n)
            if not tokens and self.text_lookup is not None:
                tokens = self.text_lookup.propose(self.committed, drafted)
            return tokens, "lookup"
        return [], ""

    def propose(self, k: int) -> DraftBlock:
        """Draft up to k tokens: a :class:`DraftBlock`.

        Per position: a grammar-forced single token, else the next token of a zero-cost proposal
        (grammar-forced string or prompt lookup, a point mass), else a draw from the draft model's
        masked q. Which applies is a function of the drafted prefix only, so q is always the
        distribution the token was really drawn from. The block ends early after a model token
        whose draft probability is below ``draft_confidence`` (it is likely to be rejected, and the
        forwards after it wasted); it still takes the zero-cost tokens that follow (forced, grammar
        strings, lookup), which cost only a verify row each. With adaptive k (``draft_length``), the
        block also ends where one more position is not worth its cost.
        """
        t0 = time.perf_counter()
        state = self.matcher.state
        states, drafted, rows, sources = [state], [], [], []
        plan: list[int] = []
        plan_source = ""
        stop = False  # the draft was unsure of a token: no more model tokens in this block
        mask_before = self.stats.mask_seconds  # mask work inside drafting is booked as mask time
        adaptive = self.draft_length
        fed = len(self.committed) - self.target.length  # tokens the verify takes before the drafts
        kept = 1.0  # estimated probability that every token drafted so far is kept
        last_confidence: float | None = None
        confidences: list[float | None] = []
        for _ in range(k):
            t_mask = time.perf_counter()
            forced = self.matcher.forced_token(state)
            self.stats.mask_seconds += time.perf_counter() - t_mask
            if forced is not None:  # q is a point mass: no draft forward needed
                source = "forced"
            else:
                if not plan:
                    plan, plan_source = self._free_proposal(state, drafted)
                if plan and self.matcher.step(state, plan[0]) is not None:
                    source = plan_source
                elif self.draft is not None and not stop:
                    plan, source = [], "model"
                else:
                    break  # nothing to propose, or no more model tokens after an unsure one
            expected_confidence = last_confidence if source == "model" else None
            if adaptive is not None and not adaptive.worth_proposing(kept, source, expected_confidence, fed + len(drafted)):
                self.stats.length_stops += 1
                break
            confidence: float | None = None
            if source == "forced":
                token, q, plan = forced, self._point_mass(forced), []
            elif source != "model":
                token = plan.pop(0)
                q = self._point_mass(token)
            else:
                pending = (self.committed + drafted)[self.draft.length :]
                t_fwd = time.perf_counter()
                logits = self._draft_logits(pending, state)
                if adaptive is not None:
                    adaptive.draft.observe(1, time.perf_counter() - t_fwd)
                self.stats.draft_forwards += 1
                allowed = self._allowed(state).unsqueeze(0)
                q = effective_probs(logits, allowed, self.params.temperature, self.params.top_k, self.params.top_p)[0]
                token = int(draw(q, self._uniform(1))[0])
                if self.draft_confidence > 0 or adaptive is not None:
                    confidence = last_confidence = self._confidence(logits, allowed, q, token)
                if self.draft_confidence > 0 and confidence < self.draft_confidence:
                    stop = True
            if adaptive is not None:
                kept *= adaptive.keep.rate(source, confidence)
            drafted.append(token)
            rows.append(q)
            sources.append(source)
            confidences.append(confidence)
            state = self.matcher.step(state, token)
            states.append(state)
            if self.matcher.is_eos(token):
                break
            if source == "model" and stop:
                self.stats.confidence_stops += 1
        self.stats.drafted_tokens += len(drafted)
        self.stats.model_proposed += sources.count("model")
        self.stats.grammar_proposed += sources.count("grammar")
        self.stats.lookup_proposed += sources.count("lookup")
        self.stats.draft_seconds += time.perf_counter() - t0 - (self.stats.mask_seconds - mask_before)
        q_rows = torch.stack(rows) if rows else torch.zeros(0, self.vocab_size)
        return DraftBlock(drafted, q_rows, states, sources, confidences)

    def verify_block(self, block: DraftBlock) -> VerifyResult:
        """One target forward over pending + drafted tokens, then the verify math."""
        drafted, q_rows, states = block.tokens, block.q_rows, block.states
        t0 = time.perf_counter()
        pending = self.committed[self.target.length :]
        logits = self.target.extend(pending + drafted)[-(len(drafted) + 1) :]
        self.stats.target_forwards += 1
        t1 = time.perf_counter()
        if self.draft_length is not None:
            self.draft_length.target.observe(len(pending) + len(drafted), t1 - t0)
        self.stats.verify_seconds += t1 - t0
        masks = torch.stack([self.matcher.bitmask(s) for s in states])
        t2 = time.perf_counter()
        self.stats.mask_seconds += t2 - t1
        k = len(drafted)
        result = self.verifier(
            logits.unsqueeze(0),
            q_rows.unsqueeze(0),
            torch.tensor([drafted], dtype=torch.long).reshape(1, k),
            masks.unsqueeze(0),
            self.params.temperature,
            self.params.top_k,
            self.params.top_p,
            self._uniform(k + 1).unsqueeze(0),
        )
        self.stats.sampling_seconds += time.perf_counter() - t2
        return result

    def accept_and_rollback(self, block: DraftBlock, result: VerifyResult) -> None:
        """Commit the kept prefix and the next token; crop both caches to the accepted prefix."""
        drafted = block.tokens
        n = int(result.accepted[0])
        kept = block.sources[:n]
        self.stats.grammar_accepted += kept.count("grammar")
        self.stats.lookup_accepted += kept.count("lookup")
        if self.draft_length is not None:
            self.draft_length.observe_block(block.sources, block.confidences, n)
        base = len(self.committed)
        self.target.crop(base + n)  # the cache keeps committed + kept drafts; next token is pending
        if self.draft is not None:
            self.draft.crop(min(self.draft.length, base + n))
        self.stats.accepted_tokens += n
        for token in drafted[:n]:
            self._commit(token)
        if n == len(drafted) and drafted and self.matcher.is_eos(drafted[-1]):
            return  # the kept block ended in EOS: no bonus token
        self._commit(int(result.next_token[0]))

    def check_invariants(self) -> None:
        """Debug mode: caches and automaton agree with the committed tokens."""
        committed = len(self.committed)
        problems = []
        # Each cache holds a prefix of the committed tokens; until EOS the newest one is pending.
        limit = committed if self.matcher.finished else committed - 1
        if self.target.length > limit:
            problems.append(f"target cache {self.target.length} not behind committed {committed}")
        if self.draft is not None and self.draft.length > limit:
            problems.append(f"draft cache {self.draft.length} not behind committed {committed}")
        if self.matcher.length != committed - self.prompt_len:
            problems.append(f"automaton path {self.matcher.length} vs generated {committed - self.prompt_len}")
        for name, model in (("target", self.target), ("draft", self.draft)):
            if model is not None and hasattr(model, "cache_length") and model.cache_length() != model.length:
                problems.append(f"{name} cache object holds {model.cache_length()} tokens, expected {model.length}")
        if problems:
            raise InvariantError("; ".join(problems))
