"""Exhaustive distribution test on the llama.cpp runtime: speculative samples from tiny random-weight
GGUF models (target and draft on llama.cpp, GPT-2's vocabulary) against the exact constrained target
distribution, with a deliberately wrong verifier as negative control.

The enumeration walks every token sequence of a small finite language with its probability under the
target alone, without the project's matcher: a token is allowed where the text so far plus its text
can still be completed to a match (``regex`` partial matching; only tokens spelled with the letters
a, b, c can ever be), EOS where the text is a full match (``re.fullmatch``). Each node's logits come
from a fresh llama.cpp context over prompt + sequence, so the sampled runs (one context per model,
blocks, rollbacks) are checked against decodes that never rolled back.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest
import regex as regex_pkg
import torch
from conftest import require_llamacpp
from engine.test_distribution import ALPHA, chi2_pvalue, verify_resample_from_p
from reference_probs import reference_probs
from synthetic import make_decoder

from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.grammar.vocab import build_vocabulary
from constrained_spec.sampling import verify
from constrained_spec.sampling.distribution import SamplingPolicy

REGEX = r"(a|b)c?[abc]{0,2}"
EOS = 50256
#: samples per case (kept small: every sample is real llama.cpp decodes). Measured 2026-12-02 with 600: T1-k3 p = 0.72
#: over 173 outcomes, the negative control p = 2.4e-13
SAMPLES = 600


def letters_case(files, gpt2_tokenizer, regex: str) -> dict:
    """Weights of a GGUF pair (n_ctx 64), ``regex``'s automaton over GPT-2's vocabulary, every token spelled with
    the letters a, b, c (the only ones that can spell the language), and the prompt "Letters:" (shared with
    ``tests/engine/test_smc_llamacpp.py``)."""
    from constrained_spec.models.llamacpp.model import LlamaCppWeights

    target_w, draft_w = (LlamaCppWeights(p, threads=1, n_ctx=64) for p in files)
    vocab = build_vocabulary(gpt2_tokenizer, 50257)
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(regex)
    letters = {i: t for i, t in enumerate(gpt2_tokenizer.convert_ids_to_tokens(list(range(50257)))) if re.fullmatch(r"[abc]+", t)}
    return dict(target_w=target_w, draft_w=draft_w, automaton=automaton, letters=letters, prompt=gpt2_tokenizer("Letters:")["input_ids"])


def _models(case: dict) -> dict:
    from constrained_spec.models.llamacpp.model import LlamaCppModel

    return dict(case, target=LlamaCppModel(case["target_w"]), draft=LlamaCppModel(case["draft_w"]), oracle=LlamaCppModel(case["target_w"]))


@pytest.fixture(scope="module")
def setup(tiny_ggufs, gpt2_tokenizer):
    return _models(letters_case(tiny_ggufs, gpt2_tokenizer, REGEX))


@pytest.fixture(scope="module")
def quantized_setup(tmp_path_factory, gpt2_tokenizer):
    """The same on quantized files (target Q4_K_M, draft Q8_0, made by llama.cpp's quantizer) on the batch-invariant
    runtime; the oracle's probabilities come from one-token decodes after the prompt's prefill (``one_token``)."""
    require_llamacpp()
    from tiny_gguf import quantize_gguf, write_tiny_gguf

    from constrained_spec.models.llamacpp.model import batch_invariant_build

    if not batch_invariant_build():
        pytest.skip("llama-cpp-python without the batch-invariance patch (make install-llamacpp)")
    base = tmp_path_factory.mktemp("gguf-dist")
    files = [quantize_gguf(write_tiny_gguf(base / f"{name}.gguf", seed=seed, logit_scale=scale, n_embd=256, n_ff=512),
                           base / f"{name}-{ftype}.gguf", ftype)
             for name, seed, scale, ftype in (("target", 5, 0.18, "Q4_K_M"), ("draft", 6, 0.25, "Q8_0"))]
    case = _models(letters_case(files, gpt2_tokenizer, REGEX))
    assert case["target_w"].batch_invariant
    return dict(case, one_token=True)


def _oracle_logits(setup, seq: tuple[int, ...]) -> torch.Tensor:
    """The target's logits after prompt + ``seq``: a fresh decode of it all, or (``one_token``) the prompt prefilled
    as the engine prefills it, then every later token decoded one at a time."""
    oracle, prompt = setup["oracle"], setup["prompt"]
    oracle.reset()
    if not setup.get("one_token"):
        return oracle.extend(prompt + list(seq))[-1]
    oracle.prefill(prompt[:-1])
    logits = None
    for tok in [prompt[-1], *seq]:
        logits = oracle.extend([tok])[-1]
    assert logits is not None
    return logits


def exact_distribution(setup, policy: SamplingPolicy) -> dict[tuple[int, ...], float]:
    letters = setup["letters"]
    partial = regex_pkg.compile(REGEX)
    out: dict[tuple[int, ...], float] = {}

    def walk(text: str, seq: tuple[int, ...], prob: float) -> None:
        allowed = torch.zeros(1, 50257, dtype=torch.bool)
        for tok, raw in letters.items():
            allowed[0, tok] = partial.fullmatch(text + raw, partial=True) is not None
        allowed[0, EOS] = re.fullmatch(REGEX, text) is not None
        logits = _oracle_logits(setup, seq)
        p = reference_probs(logits, allowed[0], policy.temperature, policy.top_k, policy.top_p)  # not the project's effective_probs
        for tok in np.flatnonzero(p).tolist():
            pt = prob * float(p[tok])
            if tok == EOS:
                out[seq + (EOS,)] = out.get(seq + (EOS,), 0.0) + pt
            else:
                walk(text + letters[tok], seq + (tok,), pt)

    walk("", (), 1.0)
    assert math.isclose(sum(out.values()), 1.0, abs_tol=1e-5)
    return out


def sample(setup, policy: SamplingPolicy, k: int, n: int, verifier=verify) -> Counter:
    gen = torch.Generator().manual_seed(4321 + k)
    counts: Counter = Counter()
    for _ in range(n):
        dec = make_decoder(setup["target"], setup["draft"], setup["automaton"], policy, num_draft_tokens=k,
                           max_new_tokens=8, verifier=verifier, generator=gen)
        dec.run(setup["prompt"])
        counts[tuple(dec.generated)] += 1
    return counts


CASES = [pytest.param(SamplingPolicy(temperature=1.0), 3, id="T1-k3"),
         pytest.param(SamplingPolicy(temperature=0.7, top_k=5), 2, id="T0.7-topk5-k2", marks=pytest.mark.slow)]


@pytest.mark.parametrize("policy,k", CASES)
def test_speculative_samples_on_llamacpp_match_the_exact_distribution(setup, policy, k):
    exact = exact_distribution(setup, policy)
    assert len(exact) >= 10, "the language must have many outcomes to mean anything"
    counts = sample(setup, policy, k, SAMPLES)
    pvalue = chi2_pvalue(counts, exact)
    print(f"p = {pvalue:.3g}, {len(exact)} outcomes")
    assert pvalue > ALPHA


def test_negative_control_a_wrong_verifier_is_rejected_on_llamacpp(setup):
    policy = SamplingPolicy(temperature=1.0)
    exact = exact_distribution(setup, policy)
    counts = sample(setup, policy, 3, SAMPLES, verifier=verify_resample_from_p)
    pvalue = chi2_pvalue(counts, exact)
    print(f"negative control p = {pvalue:.3g}")
    assert pvalue < ALPHA


@pytest.mark.parametrize("wrong", [False, True], ids=["exact", "negative-control"])
def test_quantized_speculative_samples_match_one_token_probabilities(quantized_setup, wrong):
    """Q4_K_M target, Q8_0 draft, batch-invariant: speculative samples (k = 3) against the exact distribution from
    one-token decodes; the wrong verifier (resampling from p at a rejection) is rejected by the same test (measured
    2026-12-04: p = 0.195 and 6.7e-11 over 173 outcomes). The output norms are small (flat distributions, as the float32
    pair's): with peaked ones this draft is rejected almost always, the residual is then nearly p, and the control
    cannot show."""
    policy = SamplingPolicy(temperature=1.0)
    exact = exact_distribution(quantized_setup, policy)
    assert len(exact) >= 10, "the language must have many outcomes to mean anything"
    counts = sample(quantized_setup, policy, 3, SAMPLES, verifier=verify_resample_from_p if wrong else verify)
    pvalue = chi2_pvalue(counts, exact)
    print(f"p = {pvalue:.3g}, {len(exact)} outcomes")
    assert (pvalue < ALPHA) if wrong else (pvalue > ALPHA)
