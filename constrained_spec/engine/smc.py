"""Sequence-level constrained sampling: sequential Monte Carlo over exact speculative decodes.

The engine samples the *locally* constrained distribution Q (each position masked to the allowed
tokens and renormalised), which is not what the model means under the constraint,
P_T(y | y in L) = P_T(y) 1[y in L] / Z. :class:`SMCDecoder` corrects it: N particles, each an
ordinary :class:`~constrained_spec.engine.loop.SpeculativeDecoder` (so each extends by the engine's
exact speculative steps: drafted, verified, rolled back), carry importance weights, and the returned
sequence is drawn by weight.

**Weights.** A particle's log weight gains, at every committed position, the log of the allowed mass
of the target's tempered distribution there (``sampling.smc_weights.allowed_log_mass``), read off the
logits the verify forward already computed: no extra forward. Over a finished sequence the product
is P_T(y) 1[y in L] / Q(y), whatever path of draft blocks produced it. With top-k / top-p, P_T is
the unconstrained sampler's cut distribution and the verify samples it masked (see
``sampling.smc_weights`` and :class:`~constrained_spec.engine.loop.StepRules`' ``cut_in_mask``).

**Rounds, not positions.** Speculative steps commit a random number of tokens, and the tokens a
step commits are not Q-distributed given how many it committed; so time here is the round: each
round every running particle takes exactly one engine step (a finished one stays as it is), and the
potential of the round is the product of the allowed masses of the tokens that step committed. This
is a Feynman-Kac model whose Markov kernel is "one speculative step" on a particle's whole state
(tokens, caches, grammar, proposer state, drawn with fresh uniforms) and whose potentials multiply,
over the whole path, to P_T(y) 1[y in L] / Q(y): its final weighted particles target P_T(y | L)
(the auxiliary draft randomness integrates out, because the committed tokens' law is Q exactly), and
the product over rounds of the mean weights is an unbiased estimate of Z = P_T(y in L). Resampling
is allowed in any round (adaptive, when the effective sample size falls under
``ess_threshold * N``), with systematic resampling from the request's generator.

**Forced tokens.** The step-level shortcut that commits a grammar-forced token without a forward
would leave that token without logits (its p_T is part of the weight): particles see their grammar
by :data:`~constrained_spec.engine.loop.WEIGHED_STEPS`, which turn that shortcut off, so every token is
committed by a verify, whose logits weigh it (free proposers still draft forced strings as point masses,
verified in blocks).

**The particles drive the decoder's own lifecycle** (:class:`~constrained_spec.engine.loop.SpeculativeDecoder`):
``start`` (the prompt, without the draft plan), ``step`` (returning a
:class:`~constrained_spec.engine.loop.StepRecord`: the tokens it committed, and the verify's logits and grammar
masks, which the weights are read off) and ``fork``. Nothing wraps the verifier or the matcher.

**Forks.** A resampled particle's copies fork: the target's and the draft's caches are copied
(:func:`~constrained_spec.models.protocol.fork_model`: the runtime's own ``fork()`` over the shared
weights: a deep copy of a transformers ``DynamicCache``, a llama.cpp sequence's cells copied into a
context of its own; as batch rows, the slot's cache rows: see below), the grammar matcher is a
fresh one advanced along the same tokens (a replay: O(length) grammar steps), the lookup gate and
the adaptive draft-length state are deep-copied. Shared, read-only: the weights, the compiled
grammar, the proposers' grammar-string and prompt indexes (as batch rows each particle has its own
prompt-lookup index), the policy tensors and the request's generator (alone, every particle draws
its uniforms from it in turn; as batch rows, see below). The prompt is prefilled once, into the first particle; the others fork from it.

**Deaths.** A particle whose step finds nothing to sample (a grammar dead end), whose weight becomes
0, or that reaches ``max_new_tokens`` without EOS (after one last chance to end where the text is
complete) gets weight 0 and is never returned. Where every particle dies, the request fails.

**Where particles run.** Alone, particles step one after another on their own
model copies, each step its own forwards, every uniform drawn in turn from the request's generator.
As rows of the continuous batch (:meth:`SMCDecoder.on_rows`: :class:`~constrained_spec.engine.smc_rows.ParticleRows`),
each live particle holds a slot of the :class:`~constrained_spec.engine.batching.BatchCoordinator`
and, in each round, every running particle takes its one engine step on a thread of its own, so
their draft and target forwards and their verifies are batched together; the round ends when all
have stepped (a barrier), and only then are weights read, particles resampled and forked. A fork
copies the source slot's cache rows into a free slot of the request (ragged cache: the keys and
values up to the row's length; llama.cpp: ``llama_memory_seq_cp``, cells shared). Each particle then
draws from a generator of its own, reseeded at the start of every round from the request's
generator in particle order, so a seeded request gives the same result whatever order the threads
run in (the same distribution as alone, not the same draws). The prompt is prefilled once, into the
first particle's slot (through the batch's prefix cache), and the others fork from it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from constrained_spec.config import MAX_PARTICLES
from constrained_spec.engine.batching import RowModel
from constrained_spec.engine.loop import WEIGHED_STEPS, Drafting, SpeculativeDecoder
from constrained_spec.engine.stats import DecodeStats
from constrained_spec.errors import ConfigError, GrammarError, NoParticleLeftError, SamplingError, TokenBudgetExceeded
from constrained_spec.grammar.matcher import GrammarMatcher
from constrained_spec.models.protocol import SequenceModel, fork_model
from constrained_spec.sampling import SamplingPolicy, VerifyResult, make_generator, unpack_bitmask
from constrained_spec.sampling.smc_weights import (
    allowed_log_mass,
    check_policy,
    draw_index,
    ess,
    log_mean_exp,
    systematic_resample,
)

if TYPE_CHECKING:
    from constrained_spec.engine.decode_request import DecodeRequest
    from constrained_spec.engine.proposers import Proposer
    from constrained_spec.engine.smc_rows import ParticleRows

__all__ = ["ALIGNMENTS", "ParticleText", "SMCDecoder", "SMCOptions", "SMCParticle", "SMCReport", "SMCResult", "Weigh", "check_smc_options", "decode_smc",
           "fork_model"]

#: the sampling alignments: ``"local"`` (each position masked and renormalised: the default) and
#: ``"smc"`` (sequence-level: P(y | y in L) by sequential Monte Carlo)
ALIGNMENTS = ("local", "smc")


#: (logits [c, V], allowed bool [c, V], committed tokens [c], policy) -> log weights [c]
Weigh = Callable[[torch.Tensor, torch.Tensor, Sequence[int], SamplingPolicy], torch.Tensor]

#: (target, draft, matcher, verifier, generator) -> the decoder of one particle, drawing from ``generator``
Build = Callable[[SequenceModel, "SequenceModel | None", GrammarMatcher, Callable[..., VerifyResult], torch.Generator],
                 SpeculativeDecoder]


def default_weigh(logits: torch.Tensor, allowed: torch.Tensor, tokens: Sequence[int], policy: SamplingPolicy) -> torch.Tensor:
    """The allowed mass of the policy's distribution (temperature, top-k, top-p over the whole
    vocabulary) at each committed position (invariant 10)."""
    return allowed_log_mass(logits, allowed, policy.temperature, policy.top_k, policy.top_p)


def check_smc_options(alignment: str, particles: int, ess_threshold: float, policy: SamplingPolicy | None = None) -> None:
    """Raise :class:`ConfigError` for an unknown alignment, a particle count out of 1..MAX_PARTICLES,
    a threshold out of [0, 1], or (with SMC) a policy SMC does not define (greedy, top-k, top-p)."""
    if alignment not in ALIGNMENTS:
        raise ConfigError(f"unknown alignment {alignment!r}; choose one of {', '.join(ALIGNMENTS)}")
    if not isinstance(particles, int) or not 1 <= particles <= MAX_PARTICLES:
        raise ConfigError(f"particles must be an integer in 1..{MAX_PARTICLES}, got {particles!r}")
    if not 0.0 <= ess_threshold <= 1.0:
        raise ConfigError(f"ess_threshold must be in [0, 1], got {ess_threshold!r}")
    if alignment == "smc" and policy is not None:
        check_policy(policy.temperature, policy.top_k, policy.top_p)


@dataclass
class _Particle:
    decoder: SpeculativeDecoder | None  # None once finished or dead (its caches freed)
    tokens: list[int]  # generated so far (EOS included once committed)
    log_weight: float = 0.0
    state: str = "running"  # running, done, dead
    died_of_budget: bool = False
    gen: torch.Generator | None = None  # its own random stream as a batch row (reseeded each round); None: the SMC's


@dataclass
class SMCParticle:
    """One final particle: its generated token ids (EOS excluded), its normalised weight, its log
    weight since the last resampling, and whether it finished (``"done"``) or died (``"dead"``)."""

    token_ids: list[int]
    weight: float
    log_weight: float
    state: str


@dataclass
class SMCResult:
    """The returned sample (``token_ids``, EOS excluded; ``chosen``: its particle), every final
    particle, the estimate of log Z = log P_T(y in L | prompt), how many times the particles were
    resampled, the effective sample size after each round, the stats summed over particles, and the
    EOS id the returned sample ended with (None: it ended without one)."""

    token_ids: list[int]
    chosen: int
    particles: list[SMCParticle]
    log_z: float
    resamples: int
    ess_history: list[float]
    stats: DecodeStats
    complete: bool = True
    eos_token_id: int | None = None


def _sum_stats(all_stats: Sequence[DecodeStats]) -> DecodeStats:
    out = DecodeStats()
    for f in fields(DecodeStats):
        if f.type in ("int", "float"):  # counts and seconds add up; flags and words stay the default
            setattr(out, f.name, sum(getattr(s, f.name) for s in all_stats))
    return out


@dataclass(frozen=True)
class SMCOptions:
    """How many particles an SMC request runs, and the effective sample size (as a share of them)
    under which they are resampled (checked by :func:`check_smc_options`)."""

    particles: int = 4
    ess_threshold: float = 0.5


class SMCDecoder:
    """Runs one SMC request: ``options.particles`` decoders built by ``build`` over forks of
    ``target`` and ``draft``, their grammars from ``new_matcher``; weights from ``weigh`` (the
    allowed mass: tests swap in wrong ones as negative controls); resampling when ESS <
    ``options.ess_threshold`` * N. The prompt is read with the built decoders' ``config.draft_window``.
    The particles run one after another on ``target`` and ``draft`` and forks of them, or as rows
    of the continuous batch after :meth:`on_rows`; :meth:`between_rounds` sets a hook (cancellation)."""

    def __init__(self, build: Build, target: SequenceModel, draft: SequenceModel | None,
                 new_matcher: Callable[[], GrammarMatcher], policy: SamplingPolicy, verifier: Callable[..., VerifyResult], *,
                 options: SMCOptions = SMCOptions(), max_new_tokens: int = 256, generator: torch.Generator,
                 weigh: Weigh = default_weigh) -> None:
        check_smc_options("smc", options.particles, options.ess_threshold, policy)
        if max_new_tokens < 1:
            raise ConfigError("max_new_tokens must be >= 1")
        self.build, self.target, self.draft = build, target, draft
        self.new_matcher, self.policy, self.verifier = new_matcher, policy, verifier
        self.n, self.threshold, self.max_new_tokens = options.particles, options.ess_threshold, max_new_tokens
        self.gen, self.weigh = generator, weigh
        self.on_round: Callable[[], None] | None = None
        self.rows: ParticleRows | None = None
        self._stats: list[DecodeStats] = []
        self.resamples = 0

    def on_rows(self, rows: ParticleRows) -> SMCDecoder:
        """Run the particles as the batch rows ``rows`` (the decoder's ``target`` and ``draft``
        must then be the first particle's row views, from ``rows.fresh()``); returns self."""
        self.rows = rows
        return self

    def between_rounds(self, hook: Callable[[], None] | None) -> SMCDecoder:
        """Call ``hook`` after each round of the particles (no row is mid-forward then); an
        exception it raises ends the request there (a cancel; the rows are freed by their owner).
        Returns self."""
        self.on_round = hook
        return self

    # -- particles -------------------------------------------------------------------------
    def _own_gen(self) -> torch.Generator | None:
        """A new particle's random stream: its own as a batch row (reseeded each round, ``_round``), else None (the SMC's)."""
        return torch.Generator() if self.rows is not None else None

    def _decoder(self, target: SequenceModel, draft: SequenceModel | None, matcher: GrammarMatcher,
                 gen: torch.Generator | None) -> SpeculativeDecoder:
        decoder = self.build(target, draft, matcher, self.verifier, self.gen if gen is None else gen)
        self._stats.append(decoder.stats)
        return decoder

    def _first(self, prompt_ids: list[int]) -> _Particle:
        gen = self._own_gen()
        decoder = self._decoder(self.target, self.draft, self.new_matcher(), gen)
        decoder.start(prompt_ids, plan=False)
        return _Particle(decoder, [], gen=gen)

    def _fork(self, src: _Particle) -> _Particle:
        if src.decoder is None:  # finished: its tokens are all there is
            return _Particle(None, list(src.tokens), src.log_weight, src.state, src.died_of_budget)
        parent = src.decoder
        if self.rows is not None:
            target, draft = self.rows.fork(parent.target, parent.draft)
        else:
            target, draft = fork_model(parent.target), fork_model(parent.draft) if parent.draft is not None else None
        gen = self._own_gen()
        decoder = parent.fork(target, draft, self.new_matcher(), lambda t, d, m: self._decoder(t, d, m, gen))
        return _Particle(decoder, list(src.tokens), src.log_weight, gen=gen)

    def _finish(self, p: _Particle, state: str) -> None:
        p.state = state
        if state == "dead":
            p.log_weight = float("-inf")
        self._free(p)

    def _free(self, p: _Particle) -> None:
        """Drop ``p``'s decoder: its caches (or its batch slot) are free."""
        if self.rows is not None and p.decoder is not None:
            target = p.decoder.target
            assert isinstance(target, RowModel)
            self.rows.free(target.slot)
        p.decoder = None

    def _advance(self, p: _Particle) -> None:
        """One engine step of a running particle, its weight times the masses of what it committed."""
        decoder = p.decoder
        assert decoder is not None
        eos = decoder.matcher.is_eos
        produced = sum(1 for t in p.tokens if not eos(t))
        remaining = self.max_new_tokens - produced
        if remaining <= 0 and not decoder.matcher.is_accepting():
            p.died_of_budget = True
            self._finish(p, "dead")
            return
        try:
            record = decoder.step(max(remaining, 1), WEIGHED_STEPS)
        except (SamplingError, GrammarError):  # nothing to sample here: a grammar dead end
            self._finish(p, "dead")
            return
        new, logits, masks = record.tokens, record.logits, record.masks
        assert logits is not None and masks is not None, "every SMC step verifies"
        count = len(new)
        allowed = unpack_bitmask(masks[:count].to(logits.device), logits.shape[-1])
        increments = self.weigh(logits[:count], allowed, new, self.policy)
        p.log_weight += float(increments.sum())
        p.tokens.extend(new)
        if decoder.config.debug_checks:
            decoder.check_invariants()
        if math.isnan(p.log_weight) or p.log_weight == float("-inf"):
            self._finish(p, "dead")
        elif decoder.matcher.is_terminated():
            self._finish(p, "done")
        elif sum(1 for t in p.tokens if not eos(t)) > self.max_new_tokens:
            p.died_of_budget = True
            self._finish(p, "dead")

    def _resample(self, particles: list[_Particle]) -> list[_Particle]:
        ancestors = systematic_resample([p.log_weight for p in particles], self.gen)
        for i, p in enumerate(particles):
            if i not in ancestors:  # dropped: its caches (slot) free before the forks take them
                self._free(p)
        out, used = [], set()
        for a in ancestors:
            if a in used:
                out.append(self._fork(particles[a]))
            else:
                used.add(a)
                out.append(particles[a])
        for p in out:
            p.log_weight = 0.0
        return out

    # -- the algorithm ---------------------------------------------------------------------
    def run(self, prompt_ids: list[int]) -> SMCResult:
        """Run the particles to the end; the sample drawn by final weight, and the rest."""
        if not prompt_ids:
            raise ConfigError("the prompt must hold at least one token")
        start = time.perf_counter()
        first = self._first(prompt_ids)
        particles = [first] + [self._fork(first) for _ in range(self.n - 1)]
        log_z = 0.0
        history: list[float] = []
        eos = first.decoder.matcher.is_eos if first.decoder is not None else (lambda t: False)
        while any(p.state == "running" for p in particles):
            self._round([p for p in particles if p.state == "running"])
            if self.on_round is not None:  # between rounds: no row is mid-forward (cancellation)
                self.on_round()
            weights = [p.log_weight for p in particles]
            if all(w == float("-inf") for w in weights):
                self._all_dead(particles, eos, len(prompt_ids), start)
            history.append(ess(weights))
            if any(p.state == "running" for p in particles) and history[-1] < self.threshold * self.n:
                log_z += log_mean_exp(weights)
                particles = self._resample(particles)
                self.resamples += 1
        weights = [p.log_weight for p in particles]
        if all(w == float("-inf") for w in weights):
            self._all_dead(particles, eos, len(prompt_ids), start)
        log_z += log_mean_exp(weights)
        top = max(weights)
        total = sum(math.exp(w - top) for w in weights)
        chosen = draw_index(weights, self.gen)
        report = [SMCParticle([t for t in p.tokens if not eos(t)], math.exp(p.log_weight - top) / total, p.log_weight, p.state)
                  for p in particles]
        stats = _sum_stats(self._stats)
        stats.wall_seconds = time.perf_counter() - start
        stats.stop_reason = "eos"
        ending = particles[chosen].tokens[-1:]
        eos_id = ending[0] if ending and eos(ending[0]) else None
        return SMCResult(report[chosen].token_ids, chosen, report, log_z, self.resamples, history, stats, eos_token_id=eos_id)

    def _round(self, running: list[_Particle]) -> None:
        """Every running particle's one engine step: in turn, or as batch rows at once (each
        drawing from its own generator, seeded here in particle order)."""
        if self.rows is None:
            for p in running:
                self._advance(p)
            return
        for p in running:
            assert p.gen is not None
            p.gen.manual_seed(int(torch.randint(0, 2**62, (1,), generator=self.gen)))
        self.rows.step(running, self._advance)

    def _all_dead(self, particles: list[_Particle], eos: Callable[[int], bool], prompt_tokens: int, start: float) -> None:
        if any(p.died_of_budget for p in particles):
            longest = max(particles, key=lambda p: len(p.tokens))
            ids = [t for t in longest.tokens if not eos(t)]
            vocab = self.new_matcher().vocab
            stats = _sum_stats(self._stats)
            stats.wall_seconds = time.perf_counter() - start
            stats.stop_reason = "max_new_tokens"
            raise TokenBudgetExceeded(self.max_new_tokens, vocab.decode(ids), token_ids=ids, prompt_tokens=prompt_tokens, stats=stats)
        raise NoParticleLeftError("every SMC particle died: the grammar (within the top-k / top-p cut, where set) allowed nothing "
                            "the model could take; more particles may find a way")


@dataclass
class ParticleText:
    """One final particle as a caller sees it: its text, normalised weight and state."""

    text: str
    weight: float
    state: str


@dataclass
class SMCReport:
    """What an SMC request returns beside its sample: every final particle (text, weight, state),
    which one was returned, log Z (the estimate of log P(y in L | prompt) under the request's
    temperature), how many times the particles were resampled."""

    particles: list[ParticleText]
    chosen: int
    log_z: float
    resamples: int

    @classmethod
    def of(cls, result: SMCResult, decode: Callable[[list[int]], str]) -> "SMCReport":
        texts = [ParticleText(decode(p.token_ids), p.weight, p.state) for p in result.particles]
        return cls(texts, result.chosen, result.log_z, result.resamples)


def decode_smc(request: DecodeRequest, target: SequenceModel, draft: SequenceModel | None, verifier: Callable[..., VerifyResult],
               options: SMCOptions, drafting: Drafting = Drafting(), *, rows: ParticleRows | None = None,
               proposers: Callable[[], Sequence[Proposer]] | None = None) -> SMCResult:
    """One SMC request over the loop the builder makes for ``local`` (the request's config and
    policy, the same verifier and ``drafting``): each particle's decoder is a
    :class:`SpeculativeDecoder` with its own copy of the adaptive draft-length state
    (``drafting.draft_length``; None: fixed k); the particles draw from one generator, seeded by
    the request's policy. ``rows``: the particles are batch rows (``target``, ``draft``: the first
    one's row views); ``proposers``: each particle's own free proposers (else ``drafting``'s, shared)."""
    generator = make_generator(request.policy.seed)

    def build(t: SequenceModel, d: SequenceModel | None, matcher: GrammarMatcher, verify: Callable[..., VerifyResult],
              gen: torch.Generator) -> SpeculativeDecoder:
        own = dataclasses.replace(drafting, draft_length=copy.deepcopy(drafting.draft_length))
        if proposers is not None:
            own = dataclasses.replace(own, proposers=proposers())
        return SpeculativeDecoder(t, d, matcher, request.policy, request.config, max_new_tokens=request.max_new_tokens,
                                  verifier=verify, generator=gen, hooks=request.hooks, drafting=own)

    smc = SMCDecoder(build, target, draft, request.new_matcher, request.policy, verifier, options=options,
                     max_new_tokens=request.max_new_tokens, generator=generator)
    smc.between_rounds(request.hooks.on_step if request.hooks is not None else None)
    if rows is not None:
        smc.on_rows(rows)
    return smc.run(request.prompt_ids)
