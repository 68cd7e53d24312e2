"""Match per request: the engine's and the proposers' only view of a grammar.

:class:`GrammarMatcher` is the interface (in the spirit of xgrammar's ``GrammarMatcher`` and vLLM's
``StructuredOutputGrammar``): a per-request cursor over the tokens accepted so far that can advance,
roll back to any earlier length, say what the grammar allows next (ids, bool mask, packed bitmask,
the single forced token, the forced bytes), test candidates without moving (``count_allowed``,
``accepts_prefix_bytes``) and report whether the text so far is complete (``is_accepting``) or
ended by EOS (``is_terminated``). The decode loop drafts by advancing the matcher along the drafted
tokens and rolls it back to the accepted prefix after verification, exactly as it crops the caches.

:class:`AutomatonMatcher` implements it over a compiled byte-level automaton (regex and JSON
Schema compile to one): it holds the path of states from the start, so rolling back is O(1) and
exact. A grammar back end with a stack (a CFG) implements the same methods.
"""

from __future__ import annotations

from typing import Hashable, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from constrained_spec.errors import GrammarError
from constrained_spec.grammar.automaton import CompiledAutomaton
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


class AutomatonMatcher:
    """:class:`GrammarMatcher` over a :class:`CompiledAutomaton` (shared, immutable, cached masks)."""

    def __init__(self, automaton: CompiledAutomaton) -> None:
        self.automaton = automaton
        self.vocab = automaton.vocab
        self._path: list[int] = [automaton.initial_state]
        self._tokens: list[int] = []

    @property
    def length(self) -> int:
        return len(self._path) - 1

    @property
    def tokens(self) -> list[int]:
        """The accepted tokens (a copy)."""
        return list(self._tokens)

    def is_terminated(self) -> bool:
        return bool(self._tokens) and self.is_eos(self._tokens[-1])

    def is_accepting(self) -> bool:
        return self.automaton.is_final(self._path[-1])

    def is_eos(self, token_id: int) -> bool:
        return token_id in self.vocab.eos_token_ids

    def allowed_ids(self) -> np.ndarray:
        return self.automaton.allowed_ids(self._path[-1])

    def allowed_mask(self) -> torch.Tensor:
        return self.automaton.allowed_mask(self._path[-1])

    def bitmask(self) -> torch.Tensor:
        return self.automaton.bitmask(self._path[-1])

    def forced_token(self) -> int | None:
        return self.automaton.single_allowed(self._path[-1])

    def forced_bytes(self, limit: int = FORCED_BYTES_LIMIT) -> bytes:
        return self.automaton.forced_bytes(self._path[-1], limit)[0]

    def count_allowed(self, token_ids: Sequence[int]) -> int:
        state = self._path[-1]
        if self.is_terminated():
            return 0
        for n, token in enumerate(token_ids):
            if self.is_eos(token) and n + 1 < len(token_ids):
                return n + int(self.automaton.is_final(state))  # nothing follows EOS
            nxt = self.automaton.next_state(state, int(token))
            if nxt is None:
                return n
            state = nxt
        return len(token_ids)

    def accepts_prefix_bytes(self, data: bytes) -> bool:
        return self.automaton.walk_bytes(self._path[-1], data) is not None

    def state_key(self) -> Hashable | None:
        return self._path[-1]

    def advance(self, token_id: int) -> None:
        if self.is_terminated():
            raise GrammarError("token after EOS")
        nxt = self.automaton.next_state(self._path[-1], token_id)
        if nxt is None:
            raise GrammarError(f"token {token_id} is not allowed in state {self._path[-1]}")
        self._path.append(nxt)
        self._tokens.append(token_id)

    def rollback(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll back to {length} of {self.length} tokens")
        del self._path[length + 1 :]
        del self._tokens[length:]
