"""A draft block (what one step proposes) and the grammar view the loop drafts through.

:class:`DraftBlock` carries one block from propose to verify to accept: the tokens, the q each was
drawn from (None: a point mass, never written out as a row), the grammar bitmask before each token
and after the last, where each came from, and the draft's confidence in its model tokens.

:class:`TimedMatcher` is the matcher as the loop and the proposers see it: the same
:class:`~constrained_spec.grammar.matcher.GrammarMatcher`, with every call timed into the stats
(and the ``on_grammar_call`` hook), so all grammar work is charged wherever it happens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

import numpy as np
import torch

from constrained_spec.engine.stats import DecodeStats
from constrained_spec.grammar.matcher import FORCED_BYTES_LIMIT, GrammarMatcher


@dataclass
class DraftBlock:
    """One block of proposals: ``tokens`` [n], ``q_rows`` [n] (a probability row [V] on the
    proposer's device, or None for a point mass), ``masks`` [n+1] (packed grammar bitmasks before
    each token and after the last; CPU), ``sources`` [n] ("forced", "grammar", "lookup", "model",
    ...) and ``confidences`` [n] (the draft's probability of each model token, else None)."""

    tokens: list[int] = field(default_factory=list)
    q_rows: list[torch.Tensor | None] = field(default_factory=list)
    masks: list[torch.Tensor] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    confidences: list[float | None] = field(default_factory=list)

    def draft_probs(self, vocab_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
        """q [1, n, V] on ``device`` and the point-mass flags [1, n] (None where no row is one).

        Point-mass rows are not built: where every row is one, q is a broadcast zero row (no memory
        per position); elsewhere their rows are zeros and the verifier reads the flag instead.
        """
        n = len(self.tokens)
        flags = [row is None for row in self.q_rows]
        point_mass = torch.tensor([flags], dtype=torch.bool).to(device, non_blocking=True) if any(flags) else None
        if all(flags):
            return torch.zeros(1, 1, vocab_size, device=device).expand(1, n, vocab_size), point_mass
        zero = torch.zeros(vocab_size, device=device)
        rows = [zero if row is None else row.to(device, non_blocking=True) for row in self.q_rows]
        return torch.stack(rows).unsqueeze(0), point_mass


class TimedMatcher:
    """A :class:`GrammarMatcher` that times each call into ``stats.mask_seconds`` and the hook."""

    def __init__(self, inner: GrammarMatcher, stats: DecodeStats, hook: Callable[[float], None] | None = None) -> None:
        self.inner = inner
        self.vocab = inner.vocab
        self.stats = stats
        self.hook = hook

    def _timed(self, fn: Callable[..., Any], *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            dt = time.perf_counter() - t0
            self.stats.mask_seconds += dt
            if self.hook is not None:
                self.hook(dt)

    @property
    def length(self) -> int:
        return self.inner.length

    def advance(self, token_id: int) -> None:
        self._timed(self.inner.advance, token_id)

    def rollback(self, length: int) -> None:
        self.inner.rollback(length)

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()

    def is_accepting(self) -> bool:
        return bool(self._timed(self.inner.is_accepting))

    def is_eos(self, token_id: int) -> bool:
        return self.inner.is_eos(token_id)

    def allowed_ids(self) -> np.ndarray:
        return self._timed(self.inner.allowed_ids)

    def allowed_mask(self) -> torch.Tensor:
        return self._timed(self.inner.allowed_mask)

    def bitmask(self) -> torch.Tensor:
        return self._timed(self.inner.bitmask)

    def forced_token(self) -> int | None:
        return self._timed(self.inner.forced_token)

    def forced_bytes(self, limit: int = FORCED_BYTES_LIMIT) -> bytes:
        return self._timed(self.inner.forced_bytes, limit)

    def count_allowed(self, token_ids: Sequence[int]) -> int:
        return int(self._timed(self.inner.count_allowed, token_ids))

    def accepts_prefix_bytes(self, data: bytes) -> bool:
        return bool(self._timed(self.inner.accepts_prefix_bytes, data))

    def state_key(self) -> Hashable | None:
        return self.inner.state_key()
