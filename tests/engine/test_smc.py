"""Sequence-level constrained sampling (SMC) against P(y | y in L), enumerated independently.

The oracle: a finite language written out as its strings (a regex of a handful of strings; for the
Lark case, strings that lark itself parses), a token allowed where the text so far plus its bytes is
a prefix of one of them, EOS where the text is one of them; probabilities from a plain forward of
the synthetic model (``PrefixModel.logits``), never the engine's matcher or weights. It gives, for
every token sequence y (EOS implied), P_T(y) 1[y in L] (so Z and P(y | L)) and the locally masked
Q(y) the engine samples today.

The case is chosen so that local masking is far from P(y | L) (total variation >= 0.3, asserted).
SMC with one particle is local masking; its distance to P(y | L) falls with the particles (N = 32:
under a quarter of local's); a chi-square at a large N passes; the same test rejects SMC with its
weights ignored and with weights from the unmasked mass (negative controls); log Z's estimate averages to the exact Z within its standard error, and
the same check rejects Z estimated with wrong weights (unmasked, untempered); every particle of every run is a string of L.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

import pytest
import torch
from synthetic import BatchedPrefixModel, ForkModel, chi2_pvalue, letters_vocab, make_decoder

from constrained_spec.engine.batching import BatchCoordinator
from constrained_spec.engine.smc import SMCDecoder, SMCOptions, check_smc_options, default_weigh
from constrained_spec.engine.smc_rows import ParticleRows
from constrained_spec.errors import ConfigError, NoParticleLeftError
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.sampling import SamplingPolicy, verify
from constrained_spec.sampling.smc_weights import allowed_log_mass, ess, log_mean_exp, systematic_resample

PROMPT = [0, 1]
EOS = 9
#: a case where local masking is far from P(y | L): TV 0.60 at T = 1
STRINGS = ("ab", "cac", "bb", "c")
SCALE, SEED, DRAFT_SEED = 1.5, 13, 22
ALPHA = 1e-3
TOKENS = letters_vocab().tokens


def cut(p: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """The unconstrained sampler's top-k / top-p cut of a distribution over the whole vocabulary,
    written out here (not the engine's): most likely first, ties by token id; top-k keeps k; top-p
    keeps the shortest prefix (of the top-k renormalised) whose mass reaches top_p; renormalised."""
    order = sorted(range(len(p)), key=lambda t: (-float(p[t]), t))
    kept = order[:top_k] if top_k > 0 else order
    mass = sum(float(p[t]) for t in kept)
    if top_p < 1.0:
        chosen, before = [], 0.0
        for t in kept:
            if before >= top_p and chosen:
                break
            chosen.append(t)
            before += float(p[t]) / mass
        kept = chosen
    out = torch.zeros_like(p)
    for t in kept:
        out[t] = p[t]
    return out / out.sum()


def enumerate_language(strings, temperature: float = 1.0, scale: float = SCALE, seed: int = SEED, prompt=PROMPT,
                       top_k: int = 0, top_p: float = 1.0):
    """(P(y | L), Q_local(y), Z) over token sequences y (EOS implied), by a plain walk; with top-k /
    top-p, P is the unconstrained sampler's (the cut over the whole vocabulary) and Q that cut
    masked and renormalised (SMC's proposal)."""
    model = ForkModel(10, seed, scale)
    joint: dict[tuple[int, ...], float] = {}
    local: dict[tuple[int, ...], float] = {}

    def walk(text: str, seq: tuple[int, ...], pj: float, pl: float) -> None:
        p = cut(torch.softmax(model.logits(list(prompt) + list(seq)).double() / temperature, -1), top_k, top_p)
        allowed = [t for t, raw in TOKENS.items() if any(s.startswith(text + raw.decode()) for s in strings) and p[t] > 0]
        ends = text in strings and p[EOS] > 0
        mass = sum(float(p[t]) for t in allowed) + (float(p[EOS]) if ends else 0.0)
        if ends:
            joint[seq] = pj * float(p[EOS])
            local[seq] = pl * float(p[EOS]) / mass
        for t in allowed:
            walk(text + TOKENS[t].decode(), seq + (t,), pj * float(p[t]), pl * float(p[t]) / mass)

    walk("", (), 1.0, 1.0)
    z = sum(joint.values())
    local = {y: v for y, v in local.items() if v > 0}
    assert top_k or top_p < 1.0 or math.isclose(sum(local.values()), 1.0, abs_tol=1e-9)  # a cut can leave dead ends
    return {y: v / z for y, v in joint.items()}, local, z


def total_variation(counts: Counter, exact: dict) -> float:
    n = sum(counts.values())  # counts or a distribution (n = 1)
    keys = set(counts) | set(exact)
    return 0.5 * sum(abs(counts.get(k, 0) / n - exact.get(k, 0.0)) for k in keys)


def ignored_weights(logits, allowed, tokens, policy):
    """Wrong: no weights at all (SMC is then local masking with extra steps)."""
    return torch.zeros(len(tokens), dtype=torch.float64)


def unmasked_mass_weights(logits, allowed, tokens, policy):
    """Wrong: the unmasked mass of the logits (log sum of exp(logits / T) over every token) instead
    of the allowed share of the normalised distribution."""
    return torch.logsumexp(logits.double() / policy.temperature, -1).cpu()


def _matcher_factory(strings):
    pattern = "|".join(re.escape(s) for s in strings)
    automaton = AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(pattern)
    from constrained_spec.grammar.backends.outlines_core import AutomatonMatcher

    return lambda: AutomatonMatcher(automaton)


@dataclass
class Runs:
    """What :func:`smc_runs` saw: the returned samples, the output distribution estimated from every
    run's particles and normalised weights (unbiased for the returned sample's distribution, with far
    less noise than the samples), the log Z estimates, and every particle's (text, state, weight)."""

    counts: Counter
    blended: Counter
    log_zs: list
    texts: list
    batch: BatchCoordinator | None = None  # the batched runs' coordinator (its metrics)
    rows_per_forward: list | None = None  # the batched target's forwards: rows in each


def smc_runs(new_matcher, particles: int, runs: int, *, k: int = 0, temperature: float = 1.0, weigh=default_weigh,
             seed: int = 0, ess_threshold: float = 0.5, max_new_tokens: int = 16, strings=STRINGS, top_k: int = 0, top_p: float = 1.0,
             batched: bool = False, slots: int | None = None):
    """``runs`` SMC requests; the sampled outputs (Counter), the log Z estimates, every particle's text.
    ``batched``: the particles are rows of a :class:`BatchCoordinator` (``slots`` of them; default
    ``particles``) over :class:`BatchedPrefixModel` views of the same models, else they run in turn."""
    policy = SamplingPolicy(temperature=temperature, top_k=top_k, top_p=top_p)
    gen = torch.Generator().manual_seed(seed)
    target = ForkModel(10, SEED, SCALE)
    draft = ForkModel(10, DRAFT_SEED, 2.0) if k else None
    counts: Counter = Counter()
    blended: Counter = Counter()  # the mean over runs of the particles' normalised weights by output
    log_zs, texts = [], []
    batch = None
    if batched:
        models = {"target": BatchedPrefixModel(target, slots or particles, 64)}
        if draft is not None:
            models["draft"] = BatchedPrefixModel(draft, slots or particles, 64)
        batch = BatchCoordinator(models, prefix_cache_bytes=0)

    def build(t, d, matcher, verifier, generator):
        return make_decoder(t, d, matcher, policy, num_draft_tokens=k, max_new_tokens=max_new_tokens, verifier=verifier,
                            generator=generator)

    for _ in range(runs):
        target.reset()
        if draft is not None:
            draft.reset()
        if batch is not None:
            with ParticleRows(batch, particles, draft is not None) as rows:
                t, d = rows.fresh()
                smc = SMCDecoder(build, t, d, new_matcher, policy, batch.verifier(verify), options=SMCOptions(particles, ess_threshold),
                                 max_new_tokens=max_new_tokens, generator=gen, weigh=weigh)
                result = smc.on_rows(rows).run(PROMPT)
        else:
            smc = SMCDecoder(build, target, draft, new_matcher, policy, verify, options=SMCOptions(particles, ess_threshold),
                             max_new_tokens=max_new_tokens, generator=gen, weigh=weigh)
            result = smc.run(PROMPT)
        assert result.eos_token_id == EOS  # the returned sample ended with the vocabulary's EOS
        counts[tuple(result.token_ids)] += 1
        for p in result.particles:
            blended[tuple(p.token_ids)] += p.weight / runs
        log_zs.append(result.log_z)
        texts.extend((letters_vocab().decode(p.token_ids), p.state, p.weight) for p in result.particles)
    rows_per_forward = batch.models["target"].rows_per_forward if batch is not None else None
    return Runs(counts, blended, log_zs, texts, batch, rows_per_forward)


@pytest.fixture(scope="module")
def case():
    cond, local, z = enumerate_language(STRINGS)
    return cond, local, z, _matcher_factory(STRINGS)


# -- the pure math ---------------------------------------------------------------------------
def test_allowed_log_mass_is_the_tempered_allowed_mass():
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 0.0, 0.0]])
    allowed = torch.tensor([[True, False, True, False], [False, False, False, False]])
    for t in (1.0, 0.7, 2.0):
        p = torch.softmax(logits[0].double() / t, -1)
        got = allowed_log_mass(logits, allowed, t)
        assert math.isclose(float(got[0]), math.log(float(p[0] + p[2])), rel_tol=1e-12)
        assert got[1] == float("-inf")


def test_ess_and_systematic_resampling():
    assert math.isclose(ess([0.0] * 8), 8.0)
    assert math.isclose(ess([0.0] + [float("-inf")] * 7), 1.0)
    assert math.isclose(log_mean_exp([math.log(1.0), math.log(3.0)]), math.log(2.0))
    weights = [math.log(w) for w in (0.5, 0.25, 0.25, 1e-300)] + [float("-inf")]
    gen = torch.Generator().manual_seed(3)
    seen = Counter()
    for _ in range(400):
        idx = systematic_resample(weights, gen)
        assert len(idx) == 5 and 4 not in idx and idx == sorted(idx)
        c = Counter(idx)
        # systematic: each index appears floor or ceil of N w_i times
        assert 2 <= c[0] <= 3 and 1 <= c[1] <= 2 and 1 <= c[2] <= 2
        seen.update(idx)
    assert abs(seen[0] / 2000 - 0.5) < 0.02


def test_allowed_log_mass_with_top_k_and_top_p_is_the_cut_distributions():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]])
    p = torch.softmax(logits[0].double(), -1)
    allowed = torch.tensor([[False, True, True, True, False]])
    got = allowed_log_mass(logits, allowed, 1.0, top_k=3)  # keeps 0, 1, 2; allowed among them: 1, 2
    assert math.isclose(float(got[0]), math.log(float((p[1] + p[2]) / (p[0] + p[1] + p[2]))), rel_tol=1e-9)
    q = cut(p, 0, 0.7)  # the oracle's cut: the shortest most-likely prefix reaching 0.7
    got = allowed_log_mass(logits, allowed, 1.0, top_p=0.7)
    assert math.isclose(float(got[0]), math.log(float(q[1] + q[2] + q[3])), rel_tol=1e-6)
    assert allowed_log_mass(logits, torch.tensor([[False, False, False, True, True]]), 1.0, top_k=2)[0] == float("-inf")


def test_greedy_and_bad_options_are_refused():
    for policy in (SamplingPolicy(temperature=0.7), SamplingPolicy(temperature=1.0, top_k=3), SamplingPolicy(temperature=1.0, top_p=0.9)):
        check_smc_options("smc", 4, 0.5, policy)
    with pytest.raises(ConfigError):
        check_smc_options("smc", 4, 0.5, SamplingPolicy(temperature=0.0))
    check_smc_options("local", 4, 0.5, SamplingPolicy(temperature=0.0))  # local takes greedy
    for bad in (("global", 4, 0.5), ("smc", 0, 0.5), ("smc", 4, 1.5)):
        with pytest.raises(ConfigError):
            check_smc_options(*bad)
    assert issubclass(ConfigError, ValueError)


# -- exactness against the enumeration --------------------------------------------------------
def test_the_case_is_far_from_local(case):
    cond, local, _, _ = case
    assert 0.5 * sum(abs(cond[y] - local[y]) for y in cond) >= 0.3


def test_one_particle_is_local_masking(case):
    cond, local, _, new_matcher = case
    counts = smc_runs(new_matcher, 1, 300, seed=1).counts
    assert chi2_pvalue(counts, local) > ALPHA
    assert chi2_pvalue(counts, cond) < ALPHA


def _valid(texts, strings=STRINGS):
    """Every finished particle spells a string of L; a dead one has weight 0."""
    for text, state, weight in texts:
        if state == "done":
            assert text in strings, text
        else:
            assert weight == 0.0


def test_distance_to_p_given_l_falls_with_particles(case):
    """TV to P(y | L) of the output distribution (estimated from every run's weighted particles):
    N = 1 is local's distance; N = 4 is closer; N = 32 under a quarter of local's. The same test
    rejects SMC with its weights ignored and with the unmasked mass as weights (negative
    controls)."""
    cond, local, _, new_matcher = case
    local_tv = 0.5 * sum(abs(cond[y] - local[y]) for y in cond)
    tv = {n: total_variation(smc_runs(new_matcher, n, runs, seed=110 + n).blended, cond) for n, runs in ((1, 120), (4, 40), (32, 20))}
    print(f"local TV {local_tv:.3f}; SMC TV by particles {tv}")
    assert abs(tv[1] - local_tv) < 0.15  # 120 samples: a standard deviation is about 0.045
    assert tv[4] < tv[1] and tv[32] < local_tv / 4
    ignored = total_variation(smc_runs(new_matcher, 32, 6, seed=5, weigh=ignored_weights).blended, cond)
    unmasked = total_variation(smc_runs(new_matcher, 32, 6, seed=6, weigh=unmasked_mass_weights).blended, cond)
    print(f"negative controls at N = 32: weights ignored TV {ignored:.3f}, unmasked mass weights TV {unmasked:.3f}")
    assert ignored > local_tv / 2 and unmasked > local_tv / 2


def test_chi_square_at_many_particles_and_controls_rejected(case):
    cond, _, _, new_matcher = case
    good = smc_runs(new_matcher, 16, 80, seed=21)
    pvalue = chi2_pvalue(good.counts, cond)
    bad_ignored = chi2_pvalue(smc_runs(new_matcher, 16, 25, seed=22, weigh=ignored_weights).counts, cond)
    bad_token = chi2_pvalue(smc_runs(new_matcher, 16, 25, seed=23, weigh=unmasked_mass_weights).counts, cond)
    print(f"chi-square p at N = 16: {pvalue:.3f}; weights ignored {bad_ignored:.3g}; unmasked mass weights {bad_token:.3g}")
    assert pvalue > ALPHA and bad_ignored < ALPHA and bad_token < ALPHA
    _valid(good.texts)


def z_matches(log_zs: list[float], z: float, label: str) -> bool:
    """The log Z check: the mean of the estimates of Z within 4 standard errors of the exact ``z``
    (4, not 2: the estimates' distribution is skewed)."""
    zs = [math.exp(v) for v in log_zs]
    mean = sum(zs) / len(zs)
    se = math.sqrt(sum((v - mean) ** 2 for v in zs) / (len(zs) - 1) / len(zs))
    print(f"{label}: exact Z {z:.5g}, mean estimate {mean:.5g} +- {se:.3g} (standard error)")
    return abs(mean - z) < 4 * se


#: the log Z check's settings: (k, particles, runs, batched, temperature)
LOG_Z_TARGET_ONLY = (0, 4, 150, False, 1.0)
LOG_Z_TEMPERED = (0, 4, 600, False, 0.7)


@pytest.mark.parametrize("k,particles,runs,batched,temperature", [LOG_Z_TARGET_ONLY, (3, 4, 100, False, 1.0), (3, 4, 100, True, 1.0), LOG_Z_TEMPERED],
                         ids=["target-only", "speculative-k3", "batch-rows-k3", "target-only-T0.7"])
def test_log_z_estimate_is_unbiased(case, k, particles, runs, batched, temperature):
    """The mean of Z's estimates matches the exact Z (:func:`z_matches`) (resampling on: the
    threshold is 1, so every round with a spread of weights resamples); with draft blocks of up to 3
    tokens (particles advance by different numbers of tokens per round) too, alone and as batch rows
    (every resampling forks rows); and at T = 0.7 (the weights' temperature)."""
    new_matcher = case[3]
    z = case[2] if temperature == 1.0 else enumerate_language(STRINGS, temperature=temperature)[2]
    got = smc_runs(new_matcher, particles, runs, k=k, seed=30 + k + batched, ess_threshold=1.0, batched=batched, temperature=temperature)
    assert z_matches(got.log_zs, z, f"k={k} T={temperature}")
    _valid(got.texts)


def untempered_weights(logits, allowed, tokens, policy):
    """Wrong: the allowed mass of softmax(logits) at T = 1, whatever the policy's temperature."""
    return allowed_log_mass(logits, allowed, 1.0, policy.top_k, policy.top_p)


@pytest.mark.parametrize("weigh,setting", [(unmasked_mass_weights, LOG_Z_TARGET_ONLY), (untempered_weights, LOG_Z_TEMPERED)],
                         ids=["unmasked-mass", "untempered-T0.7"])
def test_log_z_check_rejects_wrong_weights(case, weigh, setting):
    """Negative controls of the log Z test: weights from the unmasked mass, and weights without the
    temperature, in the settings of its target-only cases (the same seeds, runs and exact Z): the
    same check must reject their estimates of Z."""
    k, particles, runs, batched, temperature = setting
    z = case[2] if temperature == 1.0 else enumerate_language(STRINGS, temperature=temperature)[2]
    got = smc_runs(case[3], particles, runs, k=k, seed=30 + k + batched, ess_threshold=1.0, batched=batched, temperature=temperature,
                   weigh=weigh)
    assert not z_matches(got.log_zs, z, f"{weigh.__name__} T={temperature}")


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "batch-rows"])
def test_speculative_particles_converge(case, batched):
    """Particles extended by draft blocks (k = 3, a draft that disagrees with the target) still
    converge to P(y | L): N = 16 under a quarter of local's distance; alone and as batch rows."""
    cond, local, _, new_matcher = case
    local_tv = 0.5 * sum(abs(cond[y] - local[y]) for y in cond)
    got = smc_runs(new_matcher, 16, 10, k=3, seed=41, batched=batched)
    tv = total_variation(got.blended, cond)
    print(f"speculative k=3, N=16: TV {tv:.3f} (local {local_tv:.3f})")
    assert tv < local_tv / 4
    _valid(got.texts)


LARK = 'start: "c" tail? | "a" "b" | "b" "b"\ntail: "ac" | "b"\n'


def test_lark_grammar_converges_and_every_particle_parses():
    """A Lark grammar through the lazy (llguidance) matcher, forked by replay: its language is
    listed by lark itself (every string over a, b, c up to 4 letters that lark parses), and SMC with
    16 particles is within a quarter of local masking's distance to P(y | L)."""
    import itertools

    from lark import Lark
    from lark.exceptions import LarkError

    from constrained_spec.grammar.backends.llguidance import compile_grammar

    parser = Lark(LARK)

    def parses(text: str) -> bool:
        try:
            parser.parse(text)
            return True
        except LarkError:
            return False

    strings = tuple(s for n in range(1, 5) for s in map("".join, itertools.product("abc", repeat=n)) if parses(s))
    assert set(strings) == {"c", "cac", "cb", "ab", "bb"}
    cond, local, _ = enumerate_language(strings)
    local_tv = 0.5 * sum(abs(cond[y] - local[y]) for y in cond)
    grammar = compile_grammar("lark", LARK, letters_vocab())
    got = smc_runs(grammar.matcher, 16, 10, seed=51, strings=strings)
    tv = total_variation(got.blended, cond)
    print(f"lark: local TV {local_tv:.3f}, SMC N=16 TV {tv:.3f}")
    assert local_tv >= 0.3 and tv < local_tv / 4
    for text, state, weight in got.texts:
        assert (state == "done" and parses(text)) or weight == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("temperature,k", [(1.0, 0), (0.7, 0), (1.0, 3)], ids=["T1", "T0.7", "T1-k3"])
def test_chi_square_at_64_particles_full(temperature, k):
    """The heavier sweep: 64 particles, 300 requests, at T = 1 and 0.7 and with draft blocks."""
    cond, local, _ = enumerate_language(STRINGS, temperature)
    got = smc_runs(_matcher_factory(STRINGS), 64, 300, k=k, temperature=temperature, seed=60 + k)
    pvalue = chi2_pvalue(got.counts, cond)
    print(f"T={temperature} k={k}: chi-square p {pvalue:.3f}, TV {total_variation(got.blended, cond):.4f}")
    assert pvalue > ALPHA
    _valid(got.texts)


@pytest.mark.parametrize("top_k,top_p", [(5, 1.0), pytest.param(0, 0.9, marks=pytest.mark.slow)], ids=["top-k5", "top-p0.9"])
def test_top_k_top_p_target_the_unconstrained_sampler_given_l(top_k, top_p):
    """With top-k / top-p, SMC samples the unconstrained sampler's distribution (the cut over the
    whole vocabulary) given L; the oracle writes the cut out itself. Every particle valid; draft
    blocks on (a draft token the cut removes is rejected)."""
    cond, _, _ = enumerate_language(STRINGS, top_k=top_k, top_p=top_p)
    got = smc_runs(_matcher_factory(STRINGS), 16, 30, k=2, seed=70 + top_k, top_k=top_k, top_p=top_p)
    pvalue = chi2_pvalue(got.counts, cond)
    tv = total_variation(got.blended, cond)
    print(f"top_k={top_k} top_p={top_p}: {len(cond)} outcomes, chi-square p {pvalue:.3f}, TV {tv:.3f}")
    assert pvalue > ALPHA and tv < 0.1
    _valid(got.texts)


def test_every_particle_at_a_dead_end_is_a_named_error():
    """top-k = 1 keeps only the target's most likely first token; a language whose one string starts
    with another letter leaves every particle nothing to take: NoParticleLeftError (a 400 at the
    server), not a bare SamplingError (a 500). With no cut the same language samples its string."""
    first = ForkModel(10, SEED, SCALE).logits(PROMPT).argmax().item()
    other = next(letter for token, letter in ((0, "a"), (1, "b"), (2, "c")) if token != first)  # only its own token spells it
    with pytest.raises(NoParticleLeftError, match="every SMC particle died"):
        smc_runs(_matcher_factory((other,)), 4, 1, top_k=1, strings=(other,))
    got = smc_runs(_matcher_factory((other,)), 4, 1, strings=(other,))
    assert [letters_vocab().decode(list(y)) for y in got.counts] == [other]  # the control: no cut, it is found


# -- particles as rows of the continuous batch -------------------------------------------------
def test_batch_rows_sample_p_given_l(case):
    """As batch rows (draft blocks of up to 3 tokens), SMC at N = 16 passes a chi-square against the
    enumeration (particles alone pass the same test above: the two paths sample one distribution);
    the same rows with the weights ignored are rejected (negative control)."""
    cond, local, _, new_matcher = case
    local_tv = 0.5 * sum(abs(cond[y] - local[y]) for y in cond)
    rows = smc_runs(new_matcher, 16, 40, k=3, seed=84, batched=True)
    bad = smc_runs(new_matcher, 8, 20, k=3, seed=83, batched=True, weigh=ignored_weights)
    p_rows, p_bad = chi2_pvalue(rows.counts, cond), chi2_pvalue(bad.counts, cond)
    tv_rows = total_variation(rows.blended, cond)
    print(f"batch rows N=16: chi-square p {p_rows:.3f}, TV {tv_rows:.3f} (local {local_tv:.3f}); weights ignored: p {p_bad:.3g}")
    assert p_rows > ALPHA and p_bad < ALPHA and tv_rows < local_tv / 4
    assert max(rows.rows_per_forward) == 16  # the rows did share forwards
    _valid(rows.texts)


def test_batch_rows_share_target_forwards():
    """N = 4 particles as batch rows: the target runs about one forward per round for all of them
    (at most half as many forwards as particle steps; ideally a quarter), while particles alone run
    one forward per particle step (the negative control: the same count, the other path)."""
    new_matcher = _matcher_factory(STRINGS)
    runs = 20
    rows = smc_runs(new_matcher, 4, runs, seed=91, batched=True)
    steps = rows.batch.metrics.rows_per_verify  # every particle step verifies once
    particle_steps = sum(n * c for n, c in steps.items())
    shared = len(rows.rows_per_forward) - runs  # less one prompt prefill per request
    before = ForkModel.extends
    smc_runs(new_matcher, 4, runs, seed=91)
    alone = ForkModel.extends - before - runs
    print(f"particle steps {particle_steps}: target forwards as rows {shared}, alone {alone}")
    assert shared <= particle_steps / 2
    assert alone >= 0.8 * particle_steps


def test_seeded_batch_rows_reproduce_whatever_the_threads_order():
    """The same seed gives the same samples, particles, weights and log Z as batch rows, though the
    particles' threads are made to arrive in a random order each time (random sleeps); another
    seed gives another result (the control)."""
    import random
    import time

    new_matcher = _matcher_factory(STRINGS)

    def jittery(logits, allowed, tokens, policy):
        time.sleep(random.random() * 0.003)
        return default_weigh(logits, allowed, tokens, policy)

    first = smc_runs(new_matcher, 4, 6, k=3, seed=7, batched=True, weigh=jittery)
    again = smc_runs(new_matcher, 4, 6, k=3, seed=7, batched=True, weigh=jittery)
    other = smc_runs(new_matcher, 4, 6, k=3, seed=8, batched=True)
    assert first.counts == again.counts and first.log_zs == again.log_zs and first.texts == again.texts
    assert other.texts != first.texts
