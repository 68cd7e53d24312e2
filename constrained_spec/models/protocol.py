"""What the decode loop knows of a model: :class:`SequenceModel`, and one optional capability.

A model holds an incremental cache over one token sequence: feed tokens, get next-token logits,
crop back to any earlier length (rollback is a length change). Everything the loop uses is stated
here. The optional capability, :class:`RestrictedHeadModel` (compute the output head for some token
ids only), is checked once, where the loop is built (:func:`restricted_head`), never probed per call.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class SequenceModel(Protocol):
    """A causal model with an incremental cache over one token sequence."""

    vocab_size: int
    #: where its logits live; the loop builds every tensor it hands this model's math there
    device: torch.device

    @property
    def length(self) -> int:
        """Tokens held in the cache."""

    def extend(self, tokens: list[int]) -> torch.Tensor:
        """Append ``tokens`` to the cache; return float logits [len(tokens), vocab_size] on
        :attr:`device`, row i predicting the token after ``tokens[i]``."""

    def prefill(self, tokens: list[int]) -> None:
        """Append ``tokens`` (a prompt) without returning logits (a model may skip computing them)."""

    def crop(self, length: int) -> None:
        """Drop everything after the first ``length`` cached tokens."""

    def reset(self) -> None:
        """Empty the cache."""


@runtime_checkable
class RestrictedHeadModel(SequenceModel, Protocol):
    """A model that can compute its output head for some token ids only (a draft-model speed-up)."""

    @property
    def can_restrict_head(self) -> bool:
        """Whether this model's head can be cut (a plain linear map of the last hidden state)."""

    @property
    def head_prefix(self) -> int:
        """How many leading token ids :meth:`extend_prefix_head` scores (0: none set)."""

    def extend_last(self, tokens: list[int], allowed_ids: torch.Tensor) -> torch.Tensor:
        """Append ``tokens``; logits [V] of the last position for ``allowed_ids`` (others -inf)."""

    def extend_prefix_head(self, tokens: list[int]) -> torch.Tensor:
        """Append ``tokens``; logits [V] of the last position for the first :attr:`head_prefix` ids."""

    def set_head_prefix(self, n: int) -> bool:
        """Keep a head over the first ``n`` token ids for :meth:`extend_prefix_head` (0: none);
        False where it cannot."""


@runtime_checkable
class CacheIntrospection(Protocol):
    """Optional: the length the cache object itself reports (for the debug invariant check)."""

    def cache_length(self) -> int:
        """Tokens the underlying cache object holds."""


def restricted_head(model: SequenceModel) -> RestrictedHeadModel | None:
    """``model`` where it has a usable restricted head, else None (checked once per loop)."""
    if isinstance(model, RestrictedHeadModel) and model.can_restrict_head:
        return model
    return None
