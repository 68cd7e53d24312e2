"""Sequence-level constrained sampling (SMC) on the llama.cpp runtime, against P(y | y in L) enumerated
independently: tiny random-weight GGUF models over GPT-2's vocabulary, particles forked through the
runtime's own ``fork()`` (a llama.cpp sequence's cells copied into a context of its own) when they run
alone, through ``copy_rows`` (``llama_memory_seq_cp`` / the sequence state) as rows of a batch.

The oracle walks every token sequence of a small finite language with fresh llama.cpp decodes (no
rollback, no fork, not the project's matcher: ``regex`` partial matching on the text): P_T(y) from the
plain softmax over the whole vocabulary, so Z = P_T(y in L) and P(y | L), and the locally masked Q(y)
the engine samples without SMC. The checks are those of ``tests/engine/test_smc.py`` on torch: the mean
of Z's estimates within 4 standard errors of the exact Z (alone target-only, and speculative k = 3 as
batch rows), rejected for weights from the unmasked mass (negative control); with 16 particles the
output distribution is within a quarter of local masking's distance to P(y | L), and SMC with its
weights ignored is not.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest
import regex as regex_pkg
import torch
from engine.test_distribution_llamacpp import letters_case
from engine.test_smc import ignored_weights, total_variation, unmasked_mass_weights, z_matches
from reference_probs import reference_probs
from synthetic import make_decoder

from constrained_spec.engine.batching import BatchCoordinator
from constrained_spec.engine.smc import SMCDecoder, SMCOptions, default_weigh
from constrained_spec.engine.smc_rows import ParticleRows
from constrained_spec.grammar.backends.outlines_core import AutomatonMatcher
from constrained_spec.sampling import SamplingPolicy, verify

#: 20 outcomes on the tiny target, local masking at TV 0.54 from P(y | L). Chosen with care: over a 50k vocabulary
#: with random weights, the round potentials are myopic in some languages (in ``(a|b|c)(a|b)?`` particles that took
#: "b" then "b" look best until their EOS, at e^-19; resampling keeps them and drops the "bb"-token ones), so with 16
#: particles SMC ends further from P(y | L) than local masking (TV 0.90 against 0.62) and Z's estimates are too
#: heavy-tailed for 120 runs to average (unbiased still: 1,500 runs without resampling give the exact Z within 1
#: standard error). See docs/smc.md, "When SMC struggles".
REGEX = r"a[bc]{0,2}"
EOS = 50256
MAX_NEW = 8


@pytest.fixture(scope="module")
def case(tiny_ggufs, gpt2_tokenizer):
    case = letters_case(tiny_ggufs, gpt2_tokenizer, REGEX)
    cond, local, z = enumerate_language(case["target_w"], case["prompt"], case["letters"])
    return dict(case, cond=cond, local=local, z=z)


def enumerate_language(weights, prompt: list[int], letters: dict[int, str]):
    """(P(y | L), Q_local(y), Z) over token sequences y (EOS included), each node's logits from a fresh
    llama.cpp decode of prompt + y so far."""
    partial = regex_pkg.compile(REGEX)
    joint: dict[tuple[int, ...], float] = {}
    local: dict[tuple[int, ...], float] = {}

    def walk(text: str, seq: tuple[int, ...], pj: float, pl: float) -> None:
        logits = weights.sequence_model().extend(prompt + list(seq))[-1]
        full = torch.softmax(logits.double(), -1)
        allowed = torch.zeros(50257, dtype=torch.bool)
        for tok, raw in letters.items():
            allowed[tok] = partial.fullmatch(text + raw, partial=True) is not None
        allowed[EOS] = re.fullmatch(REGEX, text) is not None
        q = reference_probs(logits, allowed, 1.0, 0, 1.0)  # the masked, renormalised distribution (not the project's)
        for tok in np.flatnonzero(q).tolist():
            if tok == EOS:
                joint[seq + (EOS,)] = pj * float(full[EOS])
                local[seq + (EOS,)] = pl * float(q[EOS])
            else:
                walk(text + letters[tok], seq + (tok,), pj * float(full[tok]), pl * float(q[tok]))

    walk("", (), 1.0, 1.0)
    z = sum(joint.values())
    assert math.isclose(sum(local.values()), 1.0, abs_tol=1e-6)
    return {y: v / z for y, v in joint.items()}, local, z


def smc_runs(case, particles: int, runs: int, *, k: int = 0, seed: int = 0, ess_threshold: float = 0.5, weigh=default_weigh,
             batched: bool = False):
    """``runs`` SMC requests on llama.cpp: (returned samples, blended output distribution, log Z estimates)."""
    from constrained_spec.models.llamacpp.model import LlamaCppModel

    policy = SamplingPolicy(temperature=1.0)
    gen = torch.Generator().manual_seed(seed)
    automaton = case["automaton"]

    def build(t, d, matcher, verifier, generator):
        return make_decoder(t, d, matcher, policy, num_draft_tokens=k, max_new_tokens=MAX_NEW, verifier=verifier, generator=generator)

    counts: Counter = Counter()
    blended: Counter = Counter()
    log_zs: list[float] = []
    batch = None
    if batched:
        models = {"target": LlamaCppModel(case["target_w"]).rows(particles, 64)}
        if k:
            models["draft"] = LlamaCppModel(case["draft_w"]).rows(particles, 64)
        batch = BatchCoordinator(models, prefix_cache_bytes=0)
    for _ in range(runs):
        options = SMCOptions(particles, ess_threshold)
        if batch is not None:
            with ParticleRows(batch, particles, bool(k)) as rows:
                t, d = rows.fresh()
                smc = SMCDecoder(build, t, d, lambda: AutomatonMatcher(automaton), policy, batch.verifier(verify), options=options,
                                 max_new_tokens=MAX_NEW, generator=gen, weigh=weigh)
                result = smc.on_rows(rows).run(case["prompt"])
        else:
            target = LlamaCppModel(case["target_w"])
            draft = LlamaCppModel(case["draft_w"]) if k else None
            smc = SMCDecoder(build, target, draft, lambda: AutomatonMatcher(automaton), policy, verify, options=options,
                             max_new_tokens=MAX_NEW, generator=gen, weigh=weigh)
            result = smc.run(case["prompt"])
        assert result.eos_token_id == EOS
        counts[tuple(result.token_ids) + (EOS,)] += 1
        for p in result.particles:
            assert p.state == "done" or p.weight == 0.0
            if p.state == "done":
                blended[tuple(p.token_ids) + (EOS,)] += p.weight / runs
        log_zs.append(result.log_z)
    return counts, blended, log_zs


def test_the_case_is_far_from_local(case):
    assert len(case["cond"]) >= 10
    assert 0.5 * sum(abs(case["cond"][y] - case["local"][y]) for y in case["cond"]) >= 0.4


@pytest.mark.parametrize("k,batched", [(0, False), (3, True)], ids=["alone-target-only", "batch-rows-k3"])
def test_log_z_estimate_is_unbiased_on_llamacpp(case, k, batched):
    """Resampling in every round with a spread of weights (threshold 1): every round forks particles,
    alone through ``LlamaCppModel.fork`` and as rows through ``copy_rows``."""
    _, _, log_zs = smc_runs(case, 4, 120, k=k, seed=30 + k, ess_threshold=1.0, batched=batched)
    assert z_matches(log_zs, case["z"], f"llama.cpp k={k} batched={batched}")


def test_log_z_check_rejects_unmasked_mass_weights_on_llamacpp(case):
    _, _, log_zs = smc_runs(case, 4, 120, seed=30, ess_threshold=1.0, weigh=unmasked_mass_weights)
    assert not z_matches(log_zs, case["z"], "unmasked-mass weights")


def test_particles_converge_to_p_given_l_on_llamacpp_and_ignored_weights_do_not(case):
    cond, local = case["cond"], case["local"]
    local_tv = 0.5 * sum(abs(cond[y] - local[y]) for y in cond)
    _, blended, _ = smc_runs(case, 16, 10, seed=41)
    _, ignored, _ = smc_runs(case, 16, 10, seed=42, weigh=ignored_weights)
    tv, tv_ignored = total_variation(blended, cond), total_variation(ignored, cond)
    print(f"local TV {local_tv:.3f}; SMC N=16 TV {tv:.3f}; weights ignored TV {tv_ignored:.3f}")
    assert tv < local_tv / 4 and tv_ignored > local_tv / 2


def test_a_forked_llamacpp_sequence_continues_bitwise_alike_and_apart(case):
    from constrained_spec.models.llamacpp.model import LlamaCppModel

    model = LlamaCppModel(case["target_w"])
    model.extend([10, 20, 30])
    fork = model.fork()
    a, b = model.extend([40, 50]), fork.extend([40, 50])
    assert torch.equal(a, b)
    fork.crop(3)
    c = fork.extend([60])
    assert fork.length == 4 and model.length == 5 and fork.cache_length() == 4 and model.cache_length() == 5  # apart
    model.crop(3)
    assert torch.equal(model.extend([60]), c)
    assert not torch.equal(c, a[:1])  # the control: another token gives other logits
