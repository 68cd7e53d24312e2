"""Match per request: the engine's and the proposers' only view of a grammar.

:class:`GrammarMatcher` is the interface (in the spirit of xgrammar's ``GrammarMatcher`` and vLLM's
``StructuredOutputGrammar``): a per-request cursor over the tokens accepted so far that can advance,
roll back to any earlier length, say what the grammar allows next (ids, bool mask, packed bitmask,
the single forced token, the forced bytes), test candidates without moving (``count_allowed``,
``accepts_prefix_bytes``) and report whether the text so far is complete (``is_accepting``) or
ended by EOS (``is_terminated``). The decode loop drafts by advancing the matcher along the drafted
tokens and rolls it back to the accepted prefix after verification, exactly as it crops the caches.

:class:`GrammarMatcher` has one implementation per grammar back end
(:mod:`constrained_spec.grammar.backends`): ``LazyMatcher`` over llguidance (the default) and
``AutomatonMatcher`` over an outlines-core byte automaton.
"""

from __future__ import annotations

from typing import Hashable, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from constrained_spec.grammar.vocab import TokenVocabulary

#: the longest forced string :meth:`GrammarMatcher.forced_bytes` reports by default
FORCED_BYTES_LIMIT = 256


@runtime_checkable
class GrammarMatcher(Protocol):
    """Per-request grammar state over the generated tokens (EOS included once accepted)."""

    vocab: TokenVocabulary

    @property
    def length(self) -> int:
        """Tokens accepted so far (EOS included)."""

    def advance(self, token_id: int) -> None:
        """Accept one token; raises :class:`GrammarError` if the grammar forbids it here."""

    def rollback(self, length: int) -> None:
        """Return to the state after the first ``length`` accepted tokens."""

    def is_terminated(self) -> bool:
        """True once an EOS token has been accepted."""

    def is_accepting(self) -> bool:
        """True if the text so far is a complete value (EOS would be allowed)."""

    def is_eos(self, token_id: int) -> bool:
        """Whether ``token_id`` is an end-of-sequence token of this vocabulary."""

    def allowed_ids(self) -> np.ndarray:
        """Sorted int64 ids of the tokens allowed next."""

    def allowed_mask(self) -> torch.Tensor:
        """bool [V]: the tokens allowed next (CPU; the caller moves it to its device)."""

    def bitmask(self) -> torch.Tensor:
        """int32 [ceil(V/32)]: bit i of word w allows token 32*w + i (CPU)."""

    def forced_token(self) -> int | None:
        """The one token the grammar allows next, if exactly one is allowed."""

    def forced_bytes(self, limit: int = FORCED_BYTES_LIMIT) -> bytes:
        """The bytes the grammar forces from here (up to ``limit``; empty where a choice exists)."""

    def count_allowed(self, token_ids: Sequence[int]) -> int:
        """How many leading tokens of ``token_ids`` the grammar allows in turn from here (no move)."""

    def accepts_prefix_bytes(self, data: bytes) -> bool:
        """Whether ``data`` continues the text so far into a prefix of some value (no move)."""

    def state_key(self) -> Hashable | None:
        """A key equal for positions the grammar cannot tell apart (for caches), or None."""
