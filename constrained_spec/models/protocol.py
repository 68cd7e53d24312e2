"""The runtime protocol: everything the engine knows of a model, whatever runs it.

A **sequence** (:class:`SequenceModel`) holds an incremental cache over one token sequence: feed
tokens, get next-token logits, crop back to any earlier length (rollback is a length change).
A :class:`ForkableModel` also makes an independent copy of its cache over the same weights (SMC
particles). **Rows** (:class:`RowBackend`) run many sequences of one model in one forward
(:class:`RowCall` each), with prefix copies between slots; a :class:`BatchableModel` makes them.
Each runtime (``models.torch.hf``: transformers/torch; ``models.llamacpp.model``: GGUF through llama.cpp)
implements all of it; the engine imports this module, never a runtime.

The optional capability :class:`RestrictedHeadModel` (compute the output head for some token ids
only) is checked once, where the loop is built (:func:`restricted_head`), never probed per call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, Sequence, runtime_checkable

import torch

from constrained_spec.errors import ConfigError


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


@runtime_checkable
class ForkableModel(SequenceModel, Protocol):
    """A sequence whose cache can be copied: the fork continues alike and apart."""

    def fork(self) -> SequenceModel:
        """An independent sequence over the same weights holding a copy of this one's cache."""


def fork_model(model: SequenceModel) -> SequenceModel:
    """``model.fork()``; a :class:`~constrained_spec.errors.ConfigError` naming the model where it cannot fork."""
    if isinstance(model, ForkableModel):
        return model.fork()
    raise ConfigError(f"alignment='smc' needs models whose cache can fork; a {type(model).__name__} cannot")


#: what a call wants back: ``"all"`` logits [len(tokens), V]; ``"none"`` nothing (a prompt);
#: ``"restricted"`` logits [V] of the last position for ``allowed_ids`` only (others -inf);
#: ``"prefix"`` logits [V] of the last position for the first ``head_prefix`` ids (others -inf)
HeadKind = Literal["all", "none", "restricted", "prefix"]


@dataclass
class RowCall:
    """One row of a batched forward: its slot, the position its tokens start at (the row's length:
    whatever the slot held past it is overwritten) and what it wants back."""

    slot: int
    start: int
    tokens: list[int]
    head: HeadKind = "all"
    allowed_ids: torch.Tensor | None = None


@runtime_checkable
class RowBackend(Protocol):
    """A model that runs ragged rows over ``slots`` sequences of up to ``max_length`` tokens."""

    vocab_size: int
    device: torch.device
    slots: int
    max_length: int

    @property
    def can_restrict_head(self) -> bool:
        """Whether ``"restricted"`` calls are cheaper than ``"all"`` (a cut output head)."""

    @property
    def head_prefix(self) -> int:
        """How many leading ids a ``"prefix"`` call scores (0: none)."""

    def forward(self, calls: list[RowCall]) -> list[torch.Tensor | None]:
        """Run ``calls`` (distinct slots) as one forward; each call's result as its head asks."""

    def read_prefix(self, slot: int, length: int) -> Any:
        """A copy of what ``slot`` holds for its first ``length`` positions (for the prefix cache)."""

    def write_prefix(self, slot: int, saved: Any, length: int) -> None:
        """Restore the first ``length`` positions of ``saved`` (from :meth:`read_prefix`) into ``slot``."""

    def reusable_prefix(self, tokens: Sequence[int], stored: Sequence[int], length: int) -> int:
        """How many of the first ``length`` positions of a prompt ``tokens`` a row may take from the saved prefill of
        ``stored`` (the two share ``length`` first tokens) and
        still hold the very cache a prefill from scratch makes: ``length``, or less where the runtime's prefill
        is cut into pieces whose bits depend on the cut (llama.cpp's fast paths: the last cut up to it)."""

    def copy_rows(self, source: int, dest: int, length: int) -> None:
        """Fork a row: ``dest`` holds ``source``'s first ``length`` positions (what it held is dropped)."""


@runtime_checkable
class BatchableModel(SequenceModel, Protocol):
    """A sequence whose weights can also run as batch rows."""

    def rows(self, slots: int, max_length: int) -> RowBackend:
        """``slots`` rows of up to ``max_length`` tokens over this model's weights (caches of their own)."""


def make_rows(model: SequenceModel, slots: int, max_length: int, role: str = "model") -> RowBackend:
    """``model.rows(slots, max_length)``; a :class:`~constrained_spec.errors.ConfigError` naming ``role``
    where the model cannot run as rows."""
    if isinstance(model, BatchableModel):
        return model.rows(slots, max_length)
    raise ConfigError(f"batched decoding needs models that run as rows; the {role} is a {type(model).__name__}")
