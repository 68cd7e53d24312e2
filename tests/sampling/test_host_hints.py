"""effective_probs with the host's hints (all_greedy, filters) equals effective_probs reading the
tensors; a wrong hint gives another distribution (so the hints are really used)."""

from __future__ import annotations

import pytest
import torch

from constrained_spec.sampling.distribution import SamplingPolicy, effective_probs


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, 3, 50, generator=g) * 3
    allowed = torch.rand(1, 3, 50, generator=g) < 0.5
    allowed[..., 0] = True
    return logits, allowed


@pytest.mark.parametrize("policy", [SamplingPolicy(temperature=0.0), SamplingPolicy(temperature=0.7), SamplingPolicy(temperature=1.0, top_k=3),
                                    SamplingPolicy(temperature=1.3, top_p=0.8), SamplingPolicy(temperature=0.0, top_k=2)])
def test_hinted_distribution_equals_the_read_one(policy):
    logits, allowed = _inputs()
    p = policy.as_tensors(1)
    reference = effective_probs(logits, allowed, p.temperature, p.top_k, p.top_p)
    hinted = effective_probs(logits, allowed, p.temperature, p.top_k, p.top_p, all_greedy=policy.greedy,
                             filters=policy.top_k > 0 or policy.top_p < 1.0)
    assert torch.equal(hinted, reference)


def test_a_wrong_filters_hint_changes_the_distribution():
    logits, allowed = _inputs(1)
    p = SamplingPolicy(temperature=1.0, top_k=2).as_tensors(1)
    reference = effective_probs(logits, allowed, p.temperature, p.top_k, p.top_p)
    wrong = effective_probs(logits, allowed, p.temperature, p.top_k, p.top_p, all_greedy=False, filters=False)
    assert not torch.equal(wrong, reference)
    assert int((reference[0, 0] > 0).sum()) == 2 and int((wrong[0, 0] > 0).sum()) > 2
