"""Attention for packed ragged forwards: rows of different widths as one unpadded token sequence.

A batched forward of rows with widths ``[2, 9, 2, 2]`` padded to ``[4, 9]`` computes 36 token
rows in every linear layer for 15 real ones; on a CPU, where a forward's cost steps up with every
few token rows, that is most of its cost. Packed, the rows' tokens are concatenated into one
sequence ``[1, 15]`` (each with its own position id), every linear layer sees only real tokens, and
only attention needs to know the rows apart: this module's attention runs each row's queries
against that row's own keys and values in the slotted cache
(:class:`~constrained_spec.models.torch.ragged_cache.RaggedKVCache`), causal from the row's start.

transformers picks the attention function by name from its shared ``AttentionInterface``;
:func:`install` puts :func:`dispatch` there in place of ``"sdpa"``. It runs the packed attention
only inside :func:`packed_rows` on the calling thread, and hands every other call to the original
sdpa function unchanged, so other models and other threads see no difference.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

__all__ = ["PackedRows", "dispatch", "install", "installed", "packed_rows"]

_state = threading.local()
_install_lock = threading.Lock()
_original: Callable[..., Any] | None = None


@dataclass
class PackedRows:
    """The rows of one packed forward: each row's slot, start position, width and offset in the
    packed sequence; its causal mask over its keys (None for a single query, which sees them all)."""

    keys: list[torch.Tensor]  # per layer [slots, kv_heads, capacity, head_dim]
    values: list[torch.Tensor]
    slots: list[int]
    starts: list[int]
    widths: list[int]
    offsets: list[int]
    masks: list[torch.Tensor | None]

    @classmethod
    def build(cls, keys: list[torch.Tensor], values: list[torch.Tensor], slots: list[int], starts: list[int],
              widths: list[int]) -> "PackedRows":
        offsets: list[int] = []
        masks: list[torch.Tensor | None] = []
        at = 0
        device = keys[0].device
        for start, width in zip(starts, widths):
            offsets.append(at)
            at += width
            if width == 1:
                masks.append(None)
            else:
                query = torch.arange(width, device=device)[:, None] + start
                masks.append(torch.arange(start + width, device=device)[None, :] <= query)
        return cls(keys, values, slots, starts, widths, offsets, masks)


@contextmanager
def packed_rows(rows: PackedRows) -> Iterator[None]:
    """Within this block, on this thread, attention runs packed over ``rows``."""
    previous = getattr(_state, "rows", None)
    _state.rows = rows
    try:
        yield
    finally:
        _state.rows = previous


def dispatch(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
             dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """The attention transformers calls under the name ``"sdpa"``: packed rows inside
    :func:`packed_rows`, the original sdpa attention everywhere else."""
    rows: PackedRows | None = getattr(_state, "rows", None)
    if rows is None:
        assert _original is not None
        return _original(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    layer = module.layer_idx
    keys, values = rows.keys[layer], rows.values[layer]
    heads, dim = query.shape[1], query.shape[3]
    out = query.new_empty(1, query.shape[2], heads, dim)
    for slot, start, width, offset, mask in zip(rows.slots, rows.starts, rows.widths, rows.offsets, rows.masks):
        q = query[:, :, offset : offset + width]
        k = keys[slot, :, : start + width].unsqueeze(0).to(q.dtype)
        v = values[slot, :, : start + width].unsqueeze(0).to(q.dtype)
        attn = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scaling,
                                                                enable_gqa=k.shape[1] != heads)
        out[:, offset : offset + width] = attn.transpose(1, 2)
    return out, None


def install() -> bool:
    """Put :func:`dispatch` in transformers' attention registry as ``"sdpa"`` (once); False where
    transformers has no such registry (then batched forwards pad their rows instead)."""
    global _original
    with _install_lock:
        if _original is not None:
            return True
        try:
            from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
        except ImportError:  # pragma: no cover - an older transformers
            return False
        if "sdpa" not in ALL_ATTENTION_FUNCTIONS:
            return False
        _original = ALL_ATTENTION_FUNCTIONS["sdpa"]
        ALL_ATTENTION_FUNCTIONS["sdpa"] = dispatch
        return True


def installed() -> bool:
    """Whether :func:`install` has run."""
    return _original is not None
