"""What one generation cost and how well the proposals did; hooks that observe the loop.

:class:`DecodeStats` is filled by the loop as it runs; :class:`DecodeHooks` lets a caller observe it
without reaching into it (streaming, benchmark timers): each hook is optional.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Callable


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
    lookup_gated: int = 0  # lookup plans passed over for the draft model (engine.lookup_gate)
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
    draft_prefill_seconds: float = 0.0  # the draft's own prefill (inside prefill_seconds)
    prefill_overlapped: bool = False  # the draft prefilled beside the target (engine.prefill)
    draft_skipped: bool = False  # the draft model was left out: too short an output to repay its prefill (engine.draft_plan)
    draft_plan_reason: str = ""  # the plan's figures in words, where it was made ("gain 0.00 < prefill 8.10 target forwards")
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
    """Generated token ids (EOS excluded), whether the grammar completed, the stats, and the EOS id the
    generation ended with (the one sampled, where the vocabulary has several; None: no EOS was taken)."""

    token_ids: list[int]
    complete: bool
    stats: DecodeStats = field(default_factory=DecodeStats)
    eos_token_id: int | None = None


@dataclass(frozen=True)
class DecodeHooks:
    """Optional observers of one generation.

    ``on_tokens``: each step's newly committed token ids (final, never rolled back; EOS excluded),
    called from the loop; an exception it raises ends the generation there. ``on_grammar_call``:
    the seconds of each grammar call the loop or a proposer made (masks, forced-token checks, token
    tests), outermost calls only: what the benchmark reports as mask time. ``on_step``: called after
    each engine step (under ``alignment="smc"``, after each round of the particles, whose tokens
    are not streamed); an exception it raises ends the generation there: how a cancel or a
    deadline reaches a decode that streams nothing.
    """

    on_tokens: Callable[[list[int]], None] | None = None
    on_grammar_call: Callable[[float], None] | None = None
    on_step: Callable[[], None] | None = None
