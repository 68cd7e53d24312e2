"""The distribution tests' reference (``tests/reference_probs.py``) against hand-worked rows, and the
product's ``effective_probs`` against the reference on random logits, masks and policies: the
oracles use the reference, so a bug in the product's temperature, top-k or top-p shows here and in
the chi-squares (``tests/engine/test_distribution.py`` checks that a wrong one is rejected there)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from reference_probs import reference_probs

from constrained_spec.sampling.distribution import effective_probs

LOG = [math.log(v) for v in (0.5, 0.3, 0.2)]


@pytest.mark.parametrize("logits,allowed,temperature,top_k,top_p,want", [
    pytest.param(LOG, [1, 1, 1], 1.0, 0, 1.0, [0.5, 0.3, 0.2], id="softmax"),
    pytest.param(LOG, [1, 0, 1], 1.0, 0, 1.0, [5 / 7, 0, 2 / 7], id="mask-then-renormalise"),
    pytest.param([0.0, math.log(4.0)], [1, 1], 2.0, 0, 1.0, [1 / 3, 2 / 3], id="temperature"),
    pytest.param([2.0, 1.0, 1.0, 0.0], [1, 1, 1, 1], 1.0, 2, 1.0, [math.e / (math.e + 1), 1 / (math.e + 1), 0, 0], id="top-k-tie-by-id"),
    pytest.param([0.0, 1.0, 1.0, 2.0], [1, 1, 1, 0], 1.0, 1, 1.0, [0, 1, 0, 0], id="top-k-among-allowed"),
    pytest.param([0.0] * 4, [1, 1, 1, 1], 1.0, 0, 0.5, [0.5, 0.5, 0, 0], id="top-p-reached-exactly-ties-by-id"),
    pytest.param(LOG, [1, 1, 1], 1.0, 0, 0.79, [0.625, 0.375, 0], id="top-p-reached"),
    pytest.param(LOG, [1, 1, 1], 1.0, 0, 0.81, [0.5, 0.3, 0.2], id="top-p-one-more"),
    pytest.param(LOG, [1, 1, 1], 1.0, 0, 0.1, [1, 0, 0], id="top-p-at-least-one"),
    pytest.param(LOG, [0, 1, 1], 1.0, 0, 0.55, [0, 1, 0], id="top-p-over-the-masked"),
    pytest.param(LOG, [1, 1, 1], 1.0, 2, 0.6, [1, 0, 0], id="top-p-of-the-top-k-renormalised"),
    pytest.param([1.0, 3.0, 3.0], [1, 1, 1], 0.0, 0, 1.0, [0, 1, 0], id="greedy-tie-by-id"),
    pytest.param([1.0, 3.0, 3.0], [0, 0, 0], 1.0, 0, 1.0, [0, 0, 0], id="nothing-allowed"),
])
def test_reference_on_hand_worked_rows(logits, allowed, temperature, top_k, top_p, want):
    got = reference_probs(logits, np.array(allowed, dtype=bool), temperature, top_k, top_p)
    assert np.allclose(got, want, atol=1e-12), got


def _random_rows(seed: int, rows: int = 64, positions: int = 2, vocab: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian logits, and in every third row small integers (ties); masks allowing about 60%,
    one row allowing nothing."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, positions, vocab, generator=g) * 3
    ties = torch.randint(-3, 3, (rows, positions, vocab), generator=g).float()
    logits[::3] = ties[::3]
    allowed = torch.rand(rows, positions, vocab, generator=g) < 0.6
    allowed[-1] = False
    return logits, allowed


@pytest.mark.parametrize("seed", range(4))
def test_effective_probs_equals_the_reference_on_random_rows(seed):
    """One batched call, every row with its own policy (greedy among them), against the reference
    row by row: the same support, the same probabilities to float32 rounding."""
    logits, allowed = _random_rows(seed)
    rows, positions, vocab = logits.shape
    g = torch.Generator().manual_seed(100 + seed)
    temperature = torch.tensor([0.0, 0.4, 1.0, 1.7])[torch.randint(0, 4, (rows,), generator=g)]
    top_k = torch.tensor([0, 0, 1, 3, vocab + 2])[torch.randint(0, 5, (rows,), generator=g)]
    top_p = torch.tensor([1.0, 1.0, 0.3, 0.5, 0.9])[torch.randint(0, 5, (rows,), generator=g)]
    got = effective_probs(logits, allowed, temperature, top_k, top_p).double().numpy()
    for r in range(rows):
        for i in range(positions):
            want = reference_probs(logits[r, i], allowed[r, i], float(temperature[r]), int(top_k[r]), float(top_p[r]))
            case = f"row {r} position {i}: T={float(temperature[r])} k={int(top_k[r])} p={float(top_p[r])}"
            assert np.array_equal(got[r, i] > 0, want > 0), case
            assert np.allclose(got[r, i], want, atol=1e-6), case
