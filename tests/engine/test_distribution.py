"""Exhaustive distribution tests: speculative samples against the exact constrained target distribution.

A small vocabulary, prefix-dependent synthetic models, a small grammar; every allowed token sequence
is enumerated with its exact probability under the target's constrained policy (mask, temperature,
top-k, top-p, renormalise: ``tests/reference_probs.py``, written apart from the project's
``effective_probs``). Speculative samples must match it (chi-square, p > 0.001), and a deliberately
wrong verifier, or a wrong effective distribution in the product, must be rejected by the same test
(negative controls).

``CONSTRAINED_SPEC_TEST_DEVICE=cuda`` (benchmarks/gpu_check.sh) runs the same tests with both models'
logits on that GPU and the verifier ``auto`` picks there (the fused Triton kernel); without CUDA that
setting fails at collection rather than falling back.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from collections import Counter

import numpy as np
import pytest
import regex as regex_pkg
import torch
from reference_probs import reference_probs
from synthetic import PrefixModel, chi2_pvalue, letters_vocab, make_decoder

from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.sampling.acceptance import VerifyResult, acceptance_probs, dense_draft_probs, first_rejection, verify
from constrained_spec.sampling.distribution import SamplingPolicy, draw, effective_probs, unpack_bitmask

PROMPT = [0, 1]
REGEX = r"(a|b)c?[abc]{0,2}"  # finite language, several tokenizations per string
#: runs per sampled distribution of the policy cases and the point-mass proposals in the default run;
#: CONSTRAINED_SPEC_DIST_SAMPLES overrides it (the GPU check uses 10,000). The sizes below were set on
#: 2026-12-02 from measured p-values (docs/test-suite.md): a wrong verifier fails at p ~1e-72 with
#: WRONG_SAMPLES runs (~1e-19 with a quarter of them); a correct one's p-value is uniform whatever the size
SAMPLES = int(os.environ.get("CONSTRAINED_SPEC_DIST_SAMPLES", "6000"))
#: runs of a correct verifier in the tests of one lever (draft window, overlap, lookup gate, ...)
LEVER_SAMPLES = SAMPLES * 2 // 3
#: runs of a deliberately wrong verifier (the negative controls)
WRONG_SAMPLES = SAMPLES // 3
#: runs per distribution of the slow grid
SLOW_SAMPLES = 20_000
#: the slow twin of each lever test (``scale`` fixture) takes this many times its default runs: at
#: least the sizes of the default run before 2026-12-02 (12,000 runs where those took 5,000 or 10,000)
FULL_SCALE = 3
ALPHA = 1e-3
TEST_DEVICE = os.environ.get("CONSTRAINED_SPEC_TEST_DEVICE", "cpu")
#: verify calls by the device type of the target's logits (the device variant checks it used its device)
VERIFY_CALLS: Counter = Counter()


def _device_verifier():
    """The verifier under test: the reference on the CPU; on a GPU what ``auto`` picks, which must be Triton."""
    if TEST_DEVICE == "cpu":
        return verify
    from constrained_spec.sampling.kernels import get_verifier, resolve_backend

    if not torch.cuda.is_available():
        raise RuntimeError(f"CONSTRAINED_SPEC_TEST_DEVICE={TEST_DEVICE} but torch sees no CUDA device")
    if resolve_backend("auto") != "triton":
        raise RuntimeError("on CUDA the auto verify backend must be the fused Triton kernel")
    return get_verifier("auto")


_VERIFY = _device_verifier()


def device_verify(target_logits, *args, point_mass=None, **options):
    VERIFY_CALLS[target_logits.device.type] += 1
    return _VERIFY(target_logits, *args, point_mass=point_mass, **options)


device_verify.takes_filters = getattr(_VERIFY, "takes_filters", False)


class MemoModel(PrefixModel):
    """PrefixModel with memoised logits (pure function of the prefix) to keep 20k runs fast."""

    _memo: dict = {}
    device = torch.device(TEST_DEVICE)

    def extend(self, tokens):
        return super().extend(tokens).to(self.device, non_blocking=True)

    def logits(self, prefix):
        key = (self.seed, tuple(prefix))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = super().logits(prefix)
        return hit


@pytest.fixture(params=[pytest.param(1, id="default"), pytest.param(FULL_SCALE, id="full", marks=pytest.mark.slow)])
def scale(request) -> int:
    """How many times its default runs a lever test takes: 1, or FULL_SCALE in its slow twin."""
    return request.param


@pytest.fixture(params=[pytest.param(FULL_SCALE, id="full", marks=pytest.mark.slow)])
def off_by_default_scale(request) -> int:
    """:func:`scale` for levers the defaults leave off (draft window, adaptive k, an unmasked draft):
    only their full-size run, in ``make test-slow``; the default run keeps the levers users get."""
    return request.param


@functools.lru_cache(maxsize=None)
def compiled(pattern: str):
    """``pattern`` compiled over the letters vocabulary, once per process."""
    return AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(pattern)


@pytest.fixture
def automaton():
    """REGEX's automaton (a plain fixture over a per-process cache: no module-scoped fixture, so
    xdist spreads this module's tests one by one, see tests/conftest.py)."""
    return compiled(REGEX)


def exact_distribution(pattern: str, policy: SamplingPolicy, prompt: list[int] = PROMPT) -> dict[tuple[int, ...], float]:
    """P(token sequence incl. EOS) under the target alone, by enumeration, without the project's
    automaton: a token is allowed where the text so far plus its bytes can still be completed to a
    full match (``regex`` partial matching), EOS where the text is a full match (``re.fullmatch``);
    each position's probabilities from :func:`reference_probs`, not the project's ``effective_probs``."""
    target = MemoModel(10, seed=11)
    tokens = letters_vocab().tokens
    partial = regex_pkg.compile(pattern)
    out: dict[tuple[int, ...], float] = {}

    def walk(text: str, seq: tuple[int, ...], prob: float) -> None:
        allowed = torch.zeros(1, 10, dtype=torch.bool)
        for tok, raw in tokens.items():
            allowed[0, tok] = partial.fullmatch(text + raw.decode(), partial=True) is not None
        allowed[0, 9] = re.fullmatch(pattern, text) is not None
        p = reference_probs(target.logits(prompt + list(seq)), allowed[0], policy.temperature, policy.top_k, policy.top_p)
        for tok in np.flatnonzero(p).tolist():
            pt = prob * float(p[tok])
            if tok == 9:
                out[seq + (9,)] = out.get(seq + (9,), 0.0) + pt
            else:
                walk(text + tokens[tok].decode(), seq + (tok,), pt)

    walk("", (), 1.0)
    assert math.isclose(sum(out.values()), 1.0, abs_tol=1e-6)
    return out


def sample(automaton, policy: SamplingPolicy, k: int, n: int, verifier=device_verify, draft_scale: float = 2.0,
           prompt: list[int] = PROMPT, **options) -> Counter:
    target, draft = MemoModel(10, seed=11), MemoModel(10, seed=22, scale=draft_scale)
    gen = torch.Generator().manual_seed(1234 + k)
    counts: Counter = Counter()
    for _ in range(n):
        dec = make_decoder(target, draft, automaton, policy, num_draft_tokens=k,
                                 max_new_tokens=16, verifier=verifier, generator=gen, **options)
        dec.run(prompt)
        counts[tuple(dec.generated)] += 1
    return counts


def stats_over_seeds(automaton, policy: SamplingPolicy, k: int, prompt: list[int] = PROMPT, seeds: int = 20,
                     **options) -> dict[str, float]:
    """DecodeStats summed over ``seeds`` runs: shows that an option really acted in a setting."""
    target, draft = MemoModel(10, seed=11), MemoModel(10, seed=22, scale=2.0)
    totals: Counter = Counter()
    for seed in range(seeds):
        dec = make_decoder(target, draft, automaton, policy, num_draft_tokens=k, max_new_tokens=16, verifier=device_verify,
                                 generator=torch.Generator().manual_seed(seed), **options)
        dec.run(prompt)
        totals.update({f: v for f, v in dec.stats.as_dict().items() if isinstance(v, (int, float))})
    return totals


# -- deliberately wrong verifiers (negative controls) ---------------------------------------------
def verify_resample_from_p(target_logits, draft_probs, draft_tokens, bitmask, temperature, top_k, top_p, uniforms, point_mass=None):
    """Wrong: on rejection draw the replacement from p instead of the residual max(0, p - q)."""
    draft_probs = dense_draft_probs(draft_probs, draft_tokens, point_mass)
    _, positions, vocab = target_logits.shape
    k = positions - 1
    p = effective_probs(target_logits, unpack_bitmask(bitmask, vocab), temperature, top_k, top_p)
    acc = acceptance_probs(p[:, :k], draft_probs, draft_tokens) if k else p.new_zeros(1, 0)
    n = first_rejection(acc, uniforms[:, :k])
    rows = torch.arange(p.shape[0], device=p.device)
    return VerifyResult(accepted=n, next_token=draw(p[rows, n], uniforms[:, k]), accept_prob=acc)


def verify_unmasked_acceptance(target_logits, draft_probs, draft_tokens, bitmask, temperature, top_k, top_p, uniforms, point_mass=None):
    """Wrong: the acceptance test uses the target's unmasked probabilities (the draw stays masked)."""
    draft_probs = dense_draft_probs(draft_probs, draft_tokens, point_mass)
    from constrained_spec.sampling.acceptance import residual

    _, positions, vocab = target_logits.shape
    k = positions - 1
    everything = torch.ones_like(target_logits, dtype=torch.bool)
    p_unmasked = effective_probs(target_logits, everything, temperature, top_k, top_p)
    p = effective_probs(target_logits, unpack_bitmask(bitmask, vocab), temperature, top_k, top_p)
    acc = acceptance_probs(p_unmasked[:, :k], draft_probs, draft_tokens) if k else p.new_zeros(1, 0)
    n = first_rejection(acc, uniforms[:, :k])
    rows = torch.arange(p.shape[0], device=p.device)
    q_pad = torch.cat([draft_probs, draft_probs.new_zeros(1, 1, vocab)], dim=1)
    token = draw(residual(p[rows, n], q_pad[rows, n]), uniforms[:, k])
    return VerifyResult(accepted=n, next_token=token, accept_prob=acc)


#: the default run's cases (T0.7-topk3-k1 is in SLOW_CASES and, as a row of a batch against the
#: exact enumeration, in test_batching's default test; it left this list to keep ``make test``
#: under 8 minutes)
CASES = [
    pytest.param(SamplingPolicy(temperature=1.0), 3, id="T1-k3"),
    pytest.param(SamplingPolicy(temperature=1.0, top_p=0.9), 5, id="T1-topp0.9-k5"),
]
SLOW_CASES = [
    pytest.param(SamplingPolicy(temperature=t, top_k=tk, top_p=tp), k, id=f"T{t}-topk{tk}-topp{tp}-k{k}")
    for t in (1.0, 0.7) for tk, tp in ((0, 1.0), (3, 1.0), (0, 0.8)) for k in (1, 3, 5)
]


def test_verify_runs_on_the_test_device(automaton):
    """The tests here verify on ``CONSTRAINED_SPEC_TEST_DEVICE`` (the CPU unless set), nowhere else."""
    VERIFY_CALLS.clear()
    sample(automaton, SamplingPolicy(temperature=1.0), 3, 20)
    want = torch.device(TEST_DEVICE).type
    assert VERIFY_CALLS[want] > 0 and set(VERIFY_CALLS) == {want}, dict(VERIFY_CALLS)


@pytest.mark.parametrize("policy,k", CASES)
def test_speculative_matches_exact_constrained_target(automaton, policy, k):
    exact = exact_distribution(automaton.regex, policy)
    counts = sample(automaton, policy, k, SAMPLES)
    pvalue = chi2_pvalue(counts, exact)
    print(f"p-value {pvalue:.4f} over {len(exact)} outcomes")
    assert pvalue > ALPHA


def test_blocks_ending_at_unsure_draft_tokens_stay_exact(automaton, scale):
    policy = SamplingPolicy(temperature=1.0)
    exact = exact_distribution(automaton.regex, policy)
    counts = sample(automaton, policy, 4, LEVER_SAMPLES * scale, draft_confidence=0.5)
    pvalue = chi2_pvalue(counts, exact)
    print(f"p-value {pvalue:.4f} over {len(exact)} outcomes")
    assert pvalue > ALPHA
    # the option really ends blocks early in this setting
    assert stats_over_seeds(automaton, policy, 4, draft_confidence=0.5)["confidence_stops"] > 0


def test_windowed_draft_stays_exact(automaton, off_by_default_scale):
    """A draft that sees only the last prompt token (``draft_window=1`` of a 5-token prompt) proposes
    from another q; the output distribution is the target's all the same. The same test rejects a
    wrong verifier with the windowed draft (negative control)."""
    policy = SamplingPolicy(temperature=1.0)
    prompt = [0, 1, 2, 0, 1]
    exact = exact_distribution(automaton.regex, policy, prompt=prompt)
    options = dict(prompt=prompt, draft_window=1, prefill_overlap="off")  # overlapped: the next test
    counts = sample(automaton, policy, 3, LEVER_SAMPLES * off_by_default_scale, debug_checks=True, **options)
    assert chi2_pvalue(counts, exact) > ALPHA
    wrong = sample(automaton, policy, 3, WRONG_SAMPLES, verifier=verify_resample_from_p, **options)
    assert chi2_pvalue(wrong, exact) < ALPHA


def test_overlapped_prefill_stays_exact(automaton, off_by_default_scale):
    """The draft prefilled on a second thread beside the target (``prefill_overlap="on"``, with a
    windowed draft so the two prefills differ): the target's distribution all the same; the same
    test rejects a wrong verifier in that setting (negative control). The windowed draft is off by
    default, so only the full-size run, in ``make test-slow``."""
    policy = SamplingPolicy(temperature=1.0)
    prompt = [0, 1, 2, 0, 1]
    exact = exact_distribution(automaton.regex, policy, prompt=prompt)
    options = dict(prompt=prompt, draft_window=2, prefill_overlap="on")
    assert stats_over_seeds(automaton, policy, 3, seeds=3, **options)["prefill_overlapped"] == 3
    assert chi2_pvalue(sample(automaton, policy, 3, LEVER_SAMPLES * off_by_default_scale, **options), exact) > ALPHA
    wrong = sample(automaton, policy, 3, WRONG_SAMPLES, verifier=verify_resample_from_p, **options)
    assert chi2_pvalue(wrong, exact) < ALPHA


@pytest.mark.slow
@pytest.mark.parametrize("policy,k", SLOW_CASES)
def test_speculative_matches_exact_full_grid(automaton, policy, k):
    exact = exact_distribution(automaton.regex, policy)
    assert chi2_pvalue(sample(automaton, policy, k, SLOW_SAMPLES), exact) > ALPHA


@pytest.mark.parametrize("wrong", [verify_resample_from_p, verify_unmasked_acceptance], ids=["resample-from-p", "unmasked-acceptance"])
def test_negative_controls_are_rejected(automaton, wrong):
    policy = SamplingPolicy(temperature=1.0)
    exact = exact_distribution(automaton.regex, policy)
    counts = sample(automaton, policy, 3, WRONG_SAMPLES, verifier=wrong)
    pvalue = chi2_pvalue(counts, exact)
    print(f"negative control {wrong.__name__}: p-value {pvalue:.3g}")
    assert pvalue < ALPHA


# -- deliberately wrong effective distributions in the product (negative controls of the oracle) -----
_EFFECTIVE = effective_probs  # the product's own, under a name replace_everywhere leaves alone


def _no_cut(top_k: torch.Tensor, top_p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros_like(top_k), torch.ones_like(top_p)


def probs_temperature_after_top_p(logits, allowed, temperature, top_k, top_p, **hints):
    """Wrong: the top-k / top-p cut taken at T = 1, the temperature applied to what it keeps."""
    keep = _EFFECTIVE(logits, allowed, torch.ones_like(temperature), top_k, top_p) > 0
    return _EFFECTIVE(logits, keep, temperature, *_no_cut(top_k, top_p))


def probs_cut_before_mask(logits, allowed, temperature, top_k, top_p, **hints):
    """Wrong: the top-k / top-p cut taken over the unmasked distribution, then the mask (where the
    cut keeps nothing allowed, the mask alone)."""
    keep = (_EFFECTIVE(logits, torch.ones_like(allowed), temperature, top_k, top_p) > 0) & allowed
    keep = torch.where(keep.any(-1, keepdim=True), keep, allowed)
    return _EFFECTIVE(logits, keep, temperature, *_no_cut(top_k, top_p))


def replace_everywhere(monkeypatch, original, replacement) -> int:
    """``replacement`` for ``original`` in every loaded module that holds it under its name (the
    product's modules, and any test module that imported it); returns how many modules."""
    name = original.__name__
    held = [m for m in list(sys.modules.values()) if getattr(m, "__dict__", {}).get(name) is original]
    for module in held:
        monkeypatch.setattr(module, name, replacement)
    return len(held)


@pytest.mark.parametrize("wrong,policy", [
    pytest.param(probs_temperature_after_top_p, SamplingPolicy(temperature=1.5, top_p=0.8), id="temperature-after-top-p"),
    pytest.param(probs_cut_before_mask, SamplingPolicy(temperature=1.0, top_p=0.9), id="top-p-before-mask"),
    pytest.param(probs_cut_before_mask, SamplingPolicy(temperature=1.0, top_k=3), id="top-k-before-mask"),
])
def test_a_wrong_effective_distribution_in_the_product_is_rejected(automaton, monkeypatch, wrong, policy):
    """The product's ``effective_probs`` replaced, wherever a module holds it, by one that takes its
    steps in a wrong order (the target's p and the draft's q both follow it): the enumeration, made
    after the swap, must reject the samples. It does because the oracle never calls the product's
    function; one that did would share the bug and pass."""
    assert replace_everywhere(monkeypatch, effective_probs, wrong) >= 3  # distribution, acceptance, proposers at least
    exact = exact_distribution(automaton.regex, policy)
    counts = sample(automaton, policy, 3, WRONG_SAMPLES, verifier=verify)
    pvalue = chi2_pvalue(counts, exact)
    print(f"wrong effective distribution {wrong.__name__}: p-value {pvalue:.3g}")
    assert pvalue < ALPHA


def test_unmasked_draft_is_still_exact_but_wastes_drafts(automaton, off_by_default_scale):
    """The construction is exact for any proposal q: a draft that ignores the grammar stays exact
    (its forbidden tokens are always rejected) but keeps fewer tokens."""
    policy = SamplingPolicy(temperature=1.0)
    exact = exact_distribution(automaton.regex, policy)

    def everything(matcher):  # the draft's q ignores the grammar
        return torch.ones(10, dtype=torch.bool)

    target, draft = MemoModel(10, seed=11), MemoModel(10, seed=22)
    gen = torch.Generator().manual_seed(99)
    counts, drafted, kept = Counter(), 0, 0
    for _ in range(LEVER_SAMPLES * off_by_default_scale):
        # a draft token the grammar forbids ends its block and is always rejected (p = 0)
        dec = make_decoder(target, draft, automaton, policy, num_draft_tokens=3, max_new_tokens=16, generator=gen,
                           allowed_mask=everything, verifier=device_verify)
        dec.run(PROMPT)
        counts[tuple(dec.generated)] += 1
        drafted += dec.stats.drafted_tokens
        kept += dec.stats.accepted_tokens
    assert chi2_pvalue(counts, exact) > ALPHA
    m_drafted = m_kept = 0
    for _ in range(2000):
        dec = make_decoder(target, draft, automaton, policy, num_draft_tokens=3, max_new_tokens=16, generator=gen, verifier=device_verify)
        dec.run(PROMPT)
        m_drafted += dec.stats.drafted_tokens
        m_kept += dec.stats.accepted_tokens
    assert kept / drafted < m_kept / m_drafted


FORCED_REGEX = r"(a|b)cab(c|b)[abc]{0,2}"  # after the first letter the grammar forces a string


def letters_encode(text: str) -> list[int]:
    """A canonical tokenization for the letters vocabulary (greedy longest match)."""
    vocab = {b.decode(): i for i, b in letters_vocab().tokens.items()}
    out, i = [], 0
    while i < len(text):
        for size in (3, 2, 1):
            if text[i : i + size] in vocab:
                out.append(vocab[text[i : i + size]])
                i += size
                break
    return out


@pytest.mark.parametrize("policy,n", [
    pytest.param(SamplingPolicy(temperature=1.0), SAMPLES, id="T1"),
    pytest.param(SamplingPolicy(temperature=1.0), SLOW_SAMPLES, id="T1-full", marks=pytest.mark.slow),
    pytest.param(SamplingPolicy(temperature=0.7, top_k=4), SLOW_SAMPLES, id="T0.7-topk4", marks=pytest.mark.slow),
])
def test_point_mass_proposals_grammar_strings_and_lookup_stay_exact(policy, n):
    """Grammar-forced strings and prompt lookup propose with q = a point mass; still exact."""
    from constrained_spec.engine.proposers import GrammarStrings
    from constrained_spec.grammar.backends.outlines_core import AutomatonMatcher

    automaton = AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(FORCED_REGEX)
    strings = GrammarStrings(letters_encode, automaton.vocab)
    after_a = AutomatonMatcher(automaton)
    after_a.advance(0)
    assert strings.tokens(after_a), "the grammar must force a string here"
    exact = exact_distribution(automaton.regex, policy)
    counts = sample(automaton, policy, 3, n, grammar_strings=strings, lookup=True, lookup_min_ngram=1)
    pvalue = chi2_pvalue(counts, exact)
    print(f"point-mass proposals: p-value {pvalue:.4f} over {len(exact)} outcomes")
    assert pvalue > ALPHA
    # both zero-cost sources really proposed in this setting
    stats = stats_over_seeds(automaton, policy, 3, grammar_strings=strings, lookup=True, lookup_min_ngram=1)
    assert stats["lookup_proposed"] > 0 and stats["grammar_proposed"] > 0


def test_a_left_out_draft_stays_exact(scale):
    """``draft_plan="auto"`` leaves the draft model out of a request whose output is too short to repay
    its prefill (a 60-token prompt, a grammar of at most 7 bytes by ``grammar.length_bound``, a
    machine where the draft would pay for longer outputs: ``draft_gain_per_token=0.25``):
    the free proposers and the target alone sample the target's distribution; the same test rejects
    a wrong verifier in that setting (negative control)."""
    from constrained_spec.engine.proposers import GrammarStrings
    from constrained_spec.grammar.length_bound import max_output_bytes

    policy = SamplingPolicy(temperature=1.0)
    automaton = AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(FORCED_REGEX)
    prompt = [(3 * i + 1) % 9 for i in range(60)]
    options = dict(prompt=prompt, grammar_strings=GrammarStrings(letters_encode, automaton.vocab), lookup=True,
                   lookup_min_ngram=1, draft_plan="auto", output_bound=max_output_bytes(FORCED_REGEX), draft_gain_per_token=0.25)
    stats = stats_over_seeds(automaton, policy, 3, seeds=5, **options)
    assert stats["draft_skipped"] == 5 and stats["draft_forwards"] == 0 and stats["grammar_proposed"] > 0
    exact = exact_distribution(automaton.regex, policy, prompt=prompt)
    good = chi2_pvalue(sample(automaton, policy, 3, LEVER_SAMPLES * scale, **options), exact)
    bad = chi2_pvalue(sample(automaton, policy, 3, WRONG_SAMPLES, verifier=verify_resample_from_p, **options), exact)
    print(f"left-out draft: p-value {good:.4f}, wrong verifier {bad:.3g}")
    assert good > ALPHA and bad < ALPHA


class _EdgyGateDecoder:
    """Builds decoders whose lookup gate starts at its threshold (prior keep rate 0.55, weight 0.5),
    so that one verify's outcome decides whether the next lookup plan is proposed or passed over."""

    def __new__(cls, *args, **kwargs):
        from constrained_spec.engine.lookup_gate import LookupGate
        from constrained_spec.engine.loop import SpeculativeDecoder
        from constrained_spec.engine.rates import RunningRate

        decoder = SpeculativeDecoder(*args, **kwargs)
        if decoder.lookup_gate is not None:
            decoder.lookup_gate = LookupGate(lookup={"ngram": RunningRate(prior=0.55, weight=0.5)})
        return decoder


def test_gated_lookup_stays_exact(automaton, scale):
    """The lookup gate chooses, from past verifies, between a lookup plan and the draft model; the
    output distribution is the target's whichever it picks. The gate really acted in this setting,
    and the same test rejects a wrong verifier (negative control)."""
    policy = SamplingPolicy(temperature=1.0)
    options = dict(lookup=True, lookup_min_ngram=1, decoder_class=_EdgyGateDecoder)
    stats = stats_over_seeds(automaton, policy, 3, seeds=200, **options)
    assert stats["lookup_gated"] > 0 and stats["lookup_proposed"] > 0
    exact = exact_distribution(automaton.regex, policy)
    counts = sample(automaton, policy, 3, LEVER_SAMPLES * scale, debug_checks=True, **options)
    assert chi2_pvalue(counts, exact) > ALPHA
    wrong = sample(automaton, policy, 3, WRONG_SAMPLES, verifier=verify_resample_from_p, **options)
    assert chi2_pvalue(wrong, exact) < ALPHA


class _EdgyAloneGateDecoder:
    """Builds decoders without their draft model (as the draft plan leaves it out) whose lookup gate weighs lookup
    against the target alone at CPU-like verify costs (a block of two: 1.6 forwards) and starts above its threshold
    (prior keep rate 0.8, weight 0.5): one verify's outcome decides whether the next plan is verified."""

    def __new__(cls, *args, **kwargs):
        from constrained_spec.engine.lookup_gate import LookupGate
        from constrained_spec.engine.loop import SpeculativeDecoder
        from constrained_spec.engine.rates import RunningRate

        decoder = SpeculativeDecoder(*args, **kwargs)
        decoder._leave_out_draft()
        decoder.lookup_gate = LookupGate(verify_cost=lambda n: 1.0 + 0.6 * (max(n, 1.0) - 1.0),
                                         lookup={"ngram": RunningRate(prior=0.8, weight=0.5)})
        return decoder


def test_lookup_gated_against_the_target_alone_stays_exact(automaton, scale):
    """Without a draft model the gate chooses, from past verifies and fixed costs, how many of a lookup plan's
    tokens the verify takes (none, some, all); the distribution is the target's whichever it picks. The gate
    really acted, and the same test rejects a wrong verifier (negative control)."""
    policy = SamplingPolicy(temperature=1.0)
    options = dict(lookup=True, lookup_min_ngram=1, decoder_class=_EdgyAloneGateDecoder)
    stats = stats_over_seeds(automaton, policy, 3, seeds=200, **options)
    assert stats["lookup_gated"] > 0 and stats["lookup_proposed"] > 0 and stats["draft_forwards"] == 0
    exact = exact_distribution(automaton.regex, policy)
    counts = sample(automaton, policy, 3, LEVER_SAMPLES * scale, debug_checks=True, **options)
    assert chi2_pvalue(counts, exact) > ALPHA
    wrong = sample(automaton, policy, 3, 3 * WRONG_SAMPLES, verifier=verify_resample_from_p, **options)  # point masses only: a smaller error
    assert chi2_pvalue(wrong, exact) < ALPHA


def test_text_lookup_proposals_stay_exact(automaton, scale):
    """Byte-level prompt lookup (PromptText) proposes re-tokenized continuations with a point-mass q;
    still exact. Token lookup is set to need more tokens than there are, so text lookup is the one
    that fires."""
    from constrained_spec.engine.proposers import PromptText

    policy = SamplingPolicy(temperature=1.0)
    prompt = [0, 2, 1, 8, 5, 8]  # "acbccbccc": after "a" or "b" it proposes "c", "bc", "cc"
    text = PromptText(letters_vocab(), letters_encode, min_match=1, max_bytes=4)
    exact = exact_distribution(automaton.regex, policy, prompt)
    counts = sample(automaton, policy, 3, LEVER_SAMPLES * scale, prompt=prompt, lookup=True, lookup_min_ngram=20, text_lookup=text)
    pvalue = chi2_pvalue(counts, exact)
    print(f"text lookup: p-value {pvalue:.4f} over {len(exact)} outcomes")
    assert pvalue > ALPHA
    stats = stats_over_seeds(automaton, policy, 3, prompt, lookup=True, lookup_min_ngram=20, text_lookup=text)
    assert stats["lookup_proposed"] > stats["lookup_accepted"] > 0  # it fired, and was both kept and rejected


class FixedCosts:
    """A cost curve that ignores timings: the adaptive rule decides the same way on any machine."""

    def __init__(self, seconds):
        self.seconds = dict(seconds)

    def observe(self, tokens: int, seconds: float) -> None:
        pass

    def __call__(self, tokens: int) -> float:
        return self.seconds[min(tokens, max(self.seconds))]


def test_adaptive_block_lengths_stay_exact(automaton, off_by_default_scale):
    """Adaptive k ends each block where one more position is not worth its cost, from the draft's
    confidence in the tokens drafted so far and keep rates learnt from past verifies: still exact."""
    from constrained_spec.engine.draft_length import AdaptiveDraftLength

    policy = SamplingPolicy(temperature=1.0)
    rule = AdaptiveDraftLength(max_k=4, target=FixedCosts({n: 1.0 for n in range(1, 7)}), draft=FixedCosts({1: 0.3}))
    exact = exact_distribution(automaton.regex, policy)
    counts = sample(automaton, policy, 4, LEVER_SAMPLES * off_by_default_scale, draft_length=rule)
    pvalue = chi2_pvalue(counts, exact)
    print(f"adaptive k: p-value {pvalue:.4f} over {len(exact)} outcomes")
    assert pvalue > ALPHA
    stats = stats_over_seeds(automaton, policy, 4, draft_length=rule)
    assert stats["length_stops"] > 0 and stats["model_proposed"] > 0  # it both ended blocks early and let the draft run
