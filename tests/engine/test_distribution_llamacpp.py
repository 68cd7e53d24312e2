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


@pytest.fixture(scope="module")
def setup(tiny_ggufs, gpt2_tokenizer):
    from constrained_spec.models.llamacpp import LlamaCppModel, LlamaCppWeights

    target_w, draft_w = (LlamaCppWeights(p, threads=1, n_ctx=64) for p in tiny_ggufs)
    vocab = build_vocabulary(gpt2_tokenizer, 50257)
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(REGEX)
    letters = {i: t for i, t in enumerate(gpt2_tokenizer.convert_ids_to_tokens(list(range(50257)))) if re.fullmatch(r"[abc]+", t)}
    prompt = gpt2_tokenizer("Letters:")["input_ids"]
    return dict(target=LlamaCppModel(target_w), draft=LlamaCppModel(draft_w), oracle=LlamaCppModel(target_w),
                automaton=automaton, letters=letters, prompt=prompt)


def exact_distribution(setup, policy: SamplingPolicy) -> dict[tuple[int, ...], float]:
    oracle, letters, prompt = setup["oracle"], setup["letters"], setup["prompt"]
    partial = regex_pkg.compile(REGEX)
    out: dict[tuple[int, ...], float] = {}

    def walk(text: str, seq: tuple[int, ...], prob: float) -> None:
        allowed = torch.zeros(1, 50257, dtype=torch.bool)
        for tok, raw in letters.items():
            allowed[0, tok] = partial.fullmatch(text + raw, partial=True) is not None
        allowed[0, EOS] = re.fullmatch(REGEX, text) is not None
        oracle.reset()
        logits = oracle.extend(prompt + list(seq))[-1]
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
