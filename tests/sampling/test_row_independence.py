"""A row's effective distribution does not depend on the other rows of its batch: computed beside rows with other
policies (top-k, top-p, greedy, other temperatures) it is bitwise what the row gives alone. Before the fix a row
without top-k/top-p was renormalised whenever a neighbour filtered (its probabilities moved by ~1e-7)."""

from __future__ import annotations

import torch

from constrained_spec.sampling.distribution import effective_probs

POLICIES = [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.0, 5, 1.0), (0.8, 0, 0.9), (0.0, 0, 1.0), (1.3, 3, 0.8), (1.0, 0, 1.0)]


def _batch(seed: int, width: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(POLICIES), width, 300, generator=g) * 4
    allowed = torch.rand(len(POLICIES), width, 300, generator=g) < 0.6
    return logits, allowed


def _probs(logits, allowed, rows):
    temp = torch.tensor([POLICIES[r][0] for r in rows])
    top_k = torch.tensor([POLICIES[r][1] for r in rows])
    top_p = torch.tensor([POLICIES[r][2] for r in rows])
    return effective_probs(logits[rows], allowed[rows], temp, top_k, top_p)


def test_every_row_of_a_mixed_batch_is_bitwise_the_row_alone():
    for seed in range(5):
        logits, allowed = _batch(seed)
        together = _probs(logits, allowed, list(range(len(POLICIES))))
        for r in range(len(POLICIES)):
            alone = _probs(logits, allowed, [r])[0]
            assert torch.equal(together[r], alone), (seed, POLICIES[r], float((together[r] - alone).abs().max()))


def test_negative_control_renormalising_every_row_moves_the_rows_that_do_not_filter():
    """What the old code did (every row divided by its total when any row filters) is not bitwise the row alone, so
    the test above can fail."""
    logits, allowed = _batch(0)
    rows = list(range(len(POLICIES)))
    together = _probs(logits, allowed, rows)
    plain = [r for r, (t, k, p) in enumerate(POLICIES) if t > 0 and k == 0 and p == 1.0]
    renormalised = together[plain] / together[plain].sum(-1, keepdim=True)
    assert not torch.equal(renormalised, together[plain])
