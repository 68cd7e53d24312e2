"""Randomness comes from an explicit generator: fresh without a seed, reproducible with one; a
distribution with no mass raises instead of returning a token."""

from __future__ import annotations

import re

import pytest
import torch

from constrained_spec.errors import SamplingError
from constrained_spec.grammar import Regex
from constrained_spec.sampling.distribution import draw, make_generator

PATTERN = "[a-z]{6}"


@pytest.fixture(scope="module")
def generator(tiny_generator):
    return tiny_generator(draft=False, max_new_tokens=20)


def test_unseeded_runs_draw_fresh_samples(generator):
    texts = [generator.run("Say a word.", Regex(PATTERN), temperature=1.0).text for _ in range(4)]
    assert all(re.fullmatch(PATTERN, t) for t in texts)
    assert len(set(texts)) > 1, texts  # 4 equal samples from ~300M strings: the old fixed seed


def test_a_seed_reproduces_a_sample(generator):
    runs = [generator.run("Say a word.", Regex(PATTERN), temperature=1.0, seed=42).text for _ in range(2)]
    other = generator.run("Say a word.", Regex(PATTERN), temperature=1.0, seed=43).text
    assert runs[0] == runs[1]
    assert other != runs[0]


def test_make_generator_does_not_touch_the_global_rng():
    torch.manual_seed(3)
    expected = torch.rand(1)
    torch.manual_seed(3)
    a, b = make_generator(None), make_generator(None)
    assert torch.rand(1) == expected  # the global stream did not move
    assert torch.rand(4, generator=a).tolist() != torch.rand(4, generator=b).tolist()


def test_draw_from_a_zero_distribution_raises():
    probs = torch.tensor([[0.2, 0.8, 0.0], [0.0, 0.0, 0.0]])
    with pytest.raises(SamplingError):
        draw(probs, torch.tensor([0.5, 0.5]))
    assert draw(probs[:1], torch.tensor([0.5])).tolist() == [1]
