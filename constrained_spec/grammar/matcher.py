"""Match per request: the automaton state at every position of the generated text.

A :class:`Matcher` holds the path of states from the start (one entry per accepted token, plus the
start state), so rolling back to any accepted length is exact and O(1). Masks come from the shared
:class:`~constrained_spec.grammar.automaton.CompiledAutomaton`, cached per state.
"""

from __future__ import annotations

import torch

from constrained_spec.errors import GrammarError
from constrained_spec.grammar.automaton import CompiledAutomaton


class Matcher:
    """Per-request automaton state: ``advance``, ``rollback``, ``bitmask``, ``is_final``."""

    def __init__(self, automaton: CompiledAutomaton) -> None:
        self.automaton = automaton
        self.path: list[int] = [automaton.initial_state]
        self.tokens: list[int] = []

    @property
    def finished(self) -> bool:
        """True once an EOS token has been accepted."""
        return bool(self.tokens) and self.is_eos(self.tokens[-1])

    @property
    def state(self) -> int:
        return self.path[-1]

    @property
    def length(self) -> int:
        """Number of tokens accepted so far (EOS included)."""
        return len(self.path) - 1

    def is_final(self, state: int | None = None) -> bool:
        return self.automaton.is_final(self.state if state is None else state)

    def is_eos(self, token_id: int) -> bool:
        return token_id in self.automaton.vocab.eos_token_ids

    def bitmask(self, state: int | None = None) -> torch.Tensor:
        return self.automaton.bitmask(self.state if state is None else state)

    def forced_token(self, state: int | None = None) -> int | None:
        """The one token the grammar allows in ``state``, if exactly one is allowed."""
        return self.automaton.single_allowed(self.state if state is None else state)

    def step(self, state: int, token_id: int) -> int | None:
        """The state after ``token_id`` from ``state``, without changing the matcher."""
        return self.automaton.next_state(state, token_id)

    def advance(self, token_id: int) -> None:
        """Accept one token; raises GrammarError if the grammar forbids it (a bug upstream)."""
        if self.finished:
            raise GrammarError("token after EOS")
        nxt = self.automaton.next_state(self.state, token_id)
        if nxt is None:
            raise GrammarError(f"token {token_id} is not allowed in state {self.state}")
        self.path.append(nxt)
        self.tokens.append(token_id)

    def rollback(self, length: int) -> None:
        """Return to the state after the first ``length`` accepted tokens."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll back to {length} of {self.length} tokens")
        del self.path[length + 1 :]
        del self.tokens[length:]
