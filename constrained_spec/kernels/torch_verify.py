"""The torch path of the kernels package: the reference itself, plus the bitmask routine.

``verify`` *is* :func:`constrained_spec.speculative.verify` (re-exported, not re-implemented), so
there is one definition of the math; the Triton kernels in :mod:`.triton_verify` are tested
against it. ``mask_logits`` applies a packed grammar bitmask to logits with plain torch ops; the
draft's one-position sampling step uses it (or its Triton twin) before computing q.
"""

from __future__ import annotations

import torch

from ..sampling import NEG_INF, unpack_bitmask
from ..speculative import VerifyResult, verify

__all__ = ["VerifyResult", "mask_logits", "verify"]


def mask_logits(logits: torch.Tensor, bitmask: torch.Tensor, *, inplace: bool = False) -> torch.Tensor:
    """Forbidden tokens -> ``-inf``. logits [..., V]; bitmask int32 [..., ceil(V/32)].

    Bit ``i`` of word ``w`` allows token ``32*w + i``. ``inplace=True`` writes into ``logits`` and
    returns it; otherwise a new tensor is returned and ``logits`` is left untouched.
    """
    vocab = logits.shape[-1]
    if bitmask.shape[-1] * 32 < vocab:
        raise ValueError(f"bitmask has {bitmask.shape[-1]} words, fewer than ceil({vocab}/32)")
    if tuple(bitmask.shape[:-1]) != tuple(logits.shape[:-1]):
        raise ValueError(f"bitmask shape {tuple(bitmask.shape)} does not match logits {tuple(logits.shape)}")
    forbidden = ~unpack_bitmask(bitmask.to(torch.int32), vocab)
    if inplace:
        return logits.masked_fill_(forbidden, NEG_INF)
    return logits.masked_fill(forbidden, NEG_INF)
