"""alignment="smc" through Generator.run on tiny transformers models (the distribution itself is
tested against an enumeration in tests/engine/test_smc.py): options, errors, the report, forks."""

from __future__ import annotations

import math
import re

import pytest
import torch

from constrained_spec import Regex
from constrained_spec.engine.smc import fork_model
from constrained_spec.errors import ConfigError

PATTERN = r"(yes|no|maybe)( please)?"


@pytest.fixture(scope="module")
def generator(tiny_generator):
    return tiny_generator(draft=True, max_new_tokens=12)


def test_smc_returns_a_valid_sample_and_every_particle(generator):
    result = generator.run("Answer:", Regex(PATTERN), alignment="smc", particles=4, temperature=1.0, seed=3)
    assert re.fullmatch(PATTERN, result.text)
    report = result.smc
    assert report is not None and len(report.particles) == 4
    assert math.isclose(sum(p.weight for p in report.particles), 1.0, rel_tol=1e-9)
    for p in report.particles:
        assert (p.state == "done" and re.fullmatch(PATTERN, p.text)) or p.weight == 0.0
    assert report.particles[report.chosen].text == result.text
    assert report.log_z <= 0.0 and math.isfinite(report.log_z)
    again = generator.run("Answer:", Regex(PATTERN), alignment="smc", particles=4, temperature=1.0, seed=3)
    assert again.text == result.text and again.smc.log_z == report.log_z  # the seed reproduces the request


def test_top_k_and_top_p_are_taken(generator):
    """A wide cut (the tiny random model spreads little mass over a 50k vocabulary: a narrow cut
    would keep none of the grammar's tokens and every particle would die)."""
    result = generator.run("Answer:", Regex(PATTERN), alignment="smc", particles=3, temperature=1.0, top_k=50000, seed=4)
    assert re.fullmatch(PATTERN, result.text) and result.smc is not None


def test_local_stays_the_default(generator):
    result = generator.run("Answer:", Regex(PATTERN), temperature=1.0, seed=3)
    assert result.smc is None and re.fullmatch(PATTERN, result.text)


@pytest.mark.parametrize("options", [
    dict(temperature=0.0), dict(temperature=1.0, particles=0), dict(temperature=1.0, ess_threshold=2.0), dict(temperature=1.0, alignment="global"),
])
def test_smc_refuses_what_it_does_not_define(generator, options):
    options.setdefault("alignment", "smc")
    with pytest.raises(ConfigError):
        generator.run("Answer:", Regex(PATTERN), **options)


def test_a_forked_transformers_cache_continues_alike_and_apart(generator):
    model = generator.target
    model.reset()
    model.extend([10, 20, 30])
    fork = fork_model(model)
    a = model.extend([40, 50])
    b = fork.extend([40, 50])
    assert torch.allclose(a, b, atol=1e-5)
    fork.crop(3)
    c = fork.extend([60])
    assert fork.length == 4 and model.length == 5  # the two caches are apart
    model.crop(3)
    assert torch.allclose(model.extend([60]), c, atol=1e-5)
    model.reset()


def test_on_tokens_gets_the_sample_once(generator):
    seen = []
    result = generator.run("Answer:", Regex(PATTERN), alignment="smc", particles=3, temperature=1.0, seed=5, on_tokens=seen.append)
    assert seen == [result.token_ids]


class StopAfter(Exception):
    pass


@pytest.mark.parametrize("batched", [False, True])
def test_on_step_ends_an_smc_request_between_rounds(tiny_generator, batched):
    """``on_step`` is called after each round of the particles (no row mid-forward); what it
    raises ends the request, and the models (or the batch's rows) serve the next one."""
    options = dict(max_batch_size=4, batch_max_tokens=512) if batched else {}
    gen = tiny_generator(draft=False, max_new_tokens=80, **options)
    long = Regex("[a-z]{60}")
    rounds = []

    def stop_at_three():
        rounds.append(1)
        if len(rounds) == 3:
            raise StopAfter()

    with pytest.raises(StopAfter):
        gen.run("Go.", long, alignment="smc", particles=3, temperature=1.0, seed=1, on_step=stop_at_three)
    assert len(rounds) == 3
    if batched:
        assert gen.batch.active_rows == 0
    counted = []  # control: left to run, the same request takes more rounds and ends in the language
    result = gen.run("Go.", long, alignment="smc", particles=3, temperature=1.0, seed=1, on_step=lambda: counted.append(1))
    assert re.fullmatch("[a-z]{60}", result.text) and len(counted) > 3


def test_smc_on_a_batching_generator_runs_beside_the_batch(tiny_generator):
    """A Generator with continuous batching (the server's default) runs SMC on its own models,
    outside the batch; a local request still decodes as a batch row."""
    gen = tiny_generator(draft=False, max_new_tokens=12, max_batch_size=2, batch_max_tokens=256, prefix_cache_mb=8)
    result = gen.run("Answer:", Regex(PATTERN), alignment="smc", particles=2, temperature=1.0, seed=6)
    assert re.fullmatch(PATTERN, result.text) and len(result.smc.particles) == 2
    assert re.fullmatch(PATTERN, gen.run("Answer:", Regex(PATTERN), temperature=1.0, seed=6).text)
