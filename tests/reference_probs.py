"""An independent reference for the effective distribution of one position, for the tests' oracles.

Written from the policy's definition in plain numpy (float64), one position at a time, without the
project's ``effective_probs``:

1. mask: only the allowed ids take part (none allowed: all zeros);
2. temperature: ``T == 0`` is a point mass on the allowed id with the largest logit (the lowest id
   among equal ones); otherwise softmax(logits / T) over the allowed ids;
3. top-k (``k > 0``): the k most likely allowed ids, most likely first, equal probabilities in
   increasing token id (the product's stable sort);
4. top-p (``p < 1``): of those, renormalised, the shortest most-likely-first prefix whose mass
   reaches p (at least one id);
5. renormalise what is kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def _array(values: Any, dtype: Any) -> np.ndarray:
    """A 1-D numpy array of ``values`` (a torch tensor on any device, a list, an array)."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=dtype).reshape(-1)


def _ranked(probs: np.ndarray, ids: np.ndarray) -> list[int]:
    """Positions into ``ids``, most likely first, equal probabilities by increasing token id."""
    return sorted(range(len(ids)), key=lambda i: (-probs[i], ids[i]))


def _top_p(probs: np.ndarray, order: list[int], top_p: float) -> list[int]:
    """The shortest prefix of ``order`` whose (renormalised) mass reaches ``top_p``, at least one."""
    total = sum(probs[i] for i in order)
    chosen: list[int] = []
    before = 0.0
    for i in order:
        if chosen and before >= top_p:
            break
        chosen.append(i)
        before += probs[i] / total
    return chosen


def reference_probs(logits: Any, allowed: Any, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """The policy's distribution over the vocabulary at one position: float64 [V], zeros outside
    what is kept (all zeros where nothing is allowed). ``logits`` and ``allowed``: [V] (or [1, V])."""
    x = _array(logits, np.float64)
    ids = np.flatnonzero(_array(allowed, bool))
    out = np.zeros_like(x)
    if not ids.size:
        return out
    if temperature == 0:
        out[ids[int(np.argmax(x[ids]))]] = 1.0  # argmax: the first (lowest id) of equal maxima
        return out
    scaled = x[ids] / temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    order = _ranked(probs, ids)
    if top_k > 0:
        order = order[:top_k]
    if top_p < 1.0:
        order = _top_p(probs, order, top_p)
    kept = np.array(order)
    out[ids[kept]] = probs[kept] / probs[kept].sum()
    return out
