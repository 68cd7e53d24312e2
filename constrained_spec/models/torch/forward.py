"""What the torch runtime's sequence (:mod:`~constrained_spec.models.torch.hf`) and its rows
(:mod:`~constrained_spec.models.torch.batched`) share: the keyword that hands a cache to a transformers
forward, and the view of a wrapped model the rows read. Kept apart so that neither of the two imports
the other (the sequence makes rows; the rows only read a :class:`WrappedLM`).
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol

__all__ = ["WrappedLM", "cache_kwarg"]

_CACHE_KWARG: dict[type, str] = {}


def cache_kwarg(module: Any, cache: Any) -> dict[str, Any]:
    """The keyword argument that hands ``cache`` to ``module``'s forward: ``cache`` in transformers 5.2x,
    ``past_key_values`` before (an older release swallows an unknown ``cache=`` into its ``**kwargs`` and
    runs without a cache, silently: seen with transformers 5.17)."""
    kind = type(module)
    if kind not in _CACHE_KWARG:
        params = inspect.signature(kind.forward).parameters
        _CACHE_KWARG[kind] = "cache" if "cache" in params else "past_key_values"
    return {_CACHE_KWARG[kind]: cache}


class WrappedLM(Protocol):
    """A transformers causal LM as the torch runtime's sequence wraps it (:class:`~constrained_spec.models.torch.hf.HFModel`):
    what rows over the same weights read of it."""

    model: Any  # the transformers module
    config: Any
    vocab_size: int
    device: Any
    _prefill_twin: Any  # the prefill weights (``HFModel.set_prefill``), or None
    _prefix_head: Any  # the restricted head (``HFModel.set_head_prefix``), or None

    @property
    def can_restrict_head(self) -> bool: ...

    @property
    def head_prefix(self) -> int: ...
