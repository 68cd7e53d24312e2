"""Tests of constrained_spec.sampling.kernels: backend selection, the torch path's distribution, and the
Triton kernels against the torch reference.

The Triton kernels run in the CPU interpreter (TRITON_INTERPRET=1) in a **subprocess**: the
interpreter only works when the variable is set before triton is first imported, which a pytest
session that has already imported triton elsewhere cannot guarantee. The parent process generates
the cases, the child runs the Triton path on them, and the parent compares with the reference
:func:`constrained_spec.sampling.acceptance.verify` computed here.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from constrained_spec.errors import ConstrainedSpecError
from constrained_spec.sampling.acceptance import RESIDUAL_EPS, VerifyResult, residual
from constrained_spec.sampling.acceptance import verify as reference_verify
from constrained_spec.sampling.distribution import draw, effective_probs, pack_bitmask, unpack_bitmask
from constrained_spec.sampling.kernels import get_verifier, resolve_backend, torch_verify
from constrained_spec.sampling.kernels.torch_verify import boundary_reason, compare_with_reference

REPO_ROOT = Path(__file__).resolve().parents[2]
HAS_TRITON = importlib.util.find_spec("triton") is not None
#: ``CONSTRAINED_SPEC_TEST_DEVICE=cuda`` (benchmarks/gpu_check.sh): the Triton cases run compiled on
#: that GPU, in this process, instead of in the interpreter
TEST_DEVICE = os.environ.get("CONSTRAINED_SPEC_TEST_DEVICE", "cpu")

B, K, V = 3, 4, 300

# ------------------------------------------------------------------------------------------
# backend selection
# ------------------------------------------------------------------------------------------


def test_torch_backend_is_the_reference() -> None:
    assert get_verifier("torch") is reference_verify
    assert torch_verify.verify is reference_verify


def test_auto_backend_choice() -> None:
    expected = "triton" if (torch.cuda.is_available() and HAS_TRITON) else "torch"
    assert resolve_backend("auto") == expected


def test_unknown_backend_raises() -> None:
    with pytest.raises(ConstrainedSpecError, match="unknown kernel backend"):
        get_verifier("cuda-magic")


@pytest.mark.skipif(torch.cuda.is_available(), reason="there is a CUDA device here")
def test_forcing_triton_without_cuda_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ConstrainedSpecError, match="triton"):
        get_verifier("triton")


# ------------------------------------------------------------------------------------------
# distribution of the torch path (three-token example)
# ------------------------------------------------------------------------------------------

P3 = torch.tensor([0.6, 0.3, 0.1])
Q3 = torch.tensor([0.5, 0.4, 0.1])


def _chi_square_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Pearson chi-square goodness of fit; p-value from the chi-square survival function."""
    n = counts.sum().double()
    expected = probs.double() * n
    stat = float((((counts.double() - expected) ** 2) / expected).sum())
    dof = probs.numel() - 1
    # regularised upper incomplete gamma Q(dof/2, stat/2)
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64), torch.tensor(stat / 2.0, dtype=torch.float64)))


def _three_token_inputs(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    logits = torch.log(P3).expand(n, 2, 3).clone()  # k = 1: position 0 drafted, position 1 bonus
    q = Q3.expand(n, 1, 3).clone()
    tokens = torch.multinomial(Q3.expand(n, 3), 1, replacement=True, generator=g)  # x ~ q
    bitmask = pack_bitmask(torch.ones(n, 2, 3, dtype=torch.bool))
    uniforms = torch.rand(n, 2, generator=g, dtype=torch.float64)
    policy = (torch.ones(n), torch.zeros(n, dtype=torch.long), torch.ones(n))
    return logits, q, tokens, bitmask, policy, uniforms


def test_three_token_acceptance_probabilities() -> None:
    verify = get_verifier("torch")
    logits, q, _, bitmask, policy, uniforms = _three_token_inputs(3, seed=0)
    tokens = torch.arange(3).unsqueeze(1)  # each token drafted once
    res = verify(logits, q, tokens, bitmask, *policy, uniforms)
    torch.testing.assert_close(res.accept_prob[:, 0], torch.tensor([1.0, 0.75, 1.0]))
    total = float((Q3 * res.accept_prob[:, 0]).sum())
    assert abs(total - 0.9) < 1e-6


def _first_token_samples(verify, n: int, seed: int) -> torch.Tensor:
    logits, q, tokens, bitmask, policy, uniforms = _three_token_inputs(n, seed)
    res = verify(logits, q, tokens, bitmask, *policy, uniforms)
    # The first emitted token: the draft token if kept, else the correction.
    return torch.where(res.accepted >= 1, tokens[:, 0], res.next_token)


def _wrong_correction_verify(target_logits, draft_probs, draft_tokens, bitmask, temperature, top_k, top_p, uniforms):
    """Negative control: correct acceptance, but the correction is drawn from p, not the residual."""
    res = reference_verify(target_logits, draft_probs, draft_tokens, bitmask, temperature, top_k, top_p, uniforms)
    p = effective_probs(target_logits, unpack_bitmask(bitmask, target_logits.shape[-1]), temperature, top_k, top_p)
    rows = torch.arange(p.shape[0])
    from_p = draw(p[rows, res.accepted], uniforms[:, -1])
    res.next_token = torch.where(res.accepted < draft_tokens.shape[1], from_p, res.next_token)
    return res


def test_three_token_output_distribution_is_p() -> None:
    n = 40_000
    counts = torch.bincount(_first_token_samples(get_verifier("torch"), n, seed=1234), minlength=3)
    pvalue = _chi_square_pvalue(counts, P3)
    assert pvalue > 1e-3, (counts.tolist(), pvalue)


def test_three_token_negative_control_is_rejected() -> None:
    # Drawing the correction from p instead: P = (0.56, 0.33, 0.11), not p = (0.6, 0.3, 0.1).
    n = 40_000
    counts = torch.bincount(_first_token_samples(_wrong_correction_verify, n, seed=1234), minlength=3)
    pvalue = _chi_square_pvalue(counts, P3)
    assert pvalue < 1e-3, (counts.tolist(), pvalue)


# ------------------------------------------------------------------------------------------
# Triton vs the torch reference (interpreter, in a subprocess)
# ------------------------------------------------------------------------------------------

KINDS = {  # kind -> number of cases (each case is one verify call with B = 3 rows)
    "random": 60,
    "greedy": 25,
    "greedy_ties": 10,
    "p_eq_q": 25,
    "forbidden_draft": 20,
    "single_allowed": 15,
    "small_q": 20,
    "k0": 15,
    "empty_position": 5,
    "half_logits": 5,
}


def _make_case(kind: str, g: torch.Generator) -> dict:
    k = 0 if kind == "k0" else K
    scale = 1.0 + 3.0 * torch.rand((), generator=g).item()
    target = torch.randn(B, k + 1, V, generator=g) * scale
    density = 0.05 + 0.85 * torch.rand(B, k + 1, 1, generator=g)
    allowed = torch.rand(B, k + 1, V, generator=g) < density
    temps = torch.tensor([0.0, 0.3, 0.7, 1.0, 1.6])[torch.randint(0, 5, (B,), generator=g)]
    if kind in ("greedy", "greedy_ties"):
        temps = torch.zeros(B)
    if kind == "greedy_ties":
        target = torch.randint(-2, 3, (B, k + 1, V), generator=g).float()  # many exact ties
    if kind == "single_allowed":
        allowed = torch.zeros(B, k + 1, V, dtype=torch.bool)
        allowed.scatter_(-1, torch.randint(0, V, (B, k + 1, 1), generator=g), True)
    if kind != "empty_position":  # at least one allowed token everywhere
        allowed.scatter_(-1, torch.randint(0, V, (B, k + 1, 1), generator=g), True)
    else:
        allowed[torch.randint(0, B, (), generator=g), torch.randint(0, k + 1, (), generator=g)] = False
    zeros_k, ones_p = torch.zeros(B, dtype=torch.long), torch.ones(B)

    # Draft: correlated with the target so that acceptances happen.
    noise = 0.3 + 1.5 * torch.rand((), generator=g).item()
    draft_logits = target[:, :k] + noise * torch.randn(B, k, V, generator=g)
    if kind == "p_eq_q":
        draft_logits = target[:, :k]
    q = effective_probs(draft_logits, allowed[:, :k], temps, zeros_k, ones_p)
    if kind == "forbidden_draft" and torch.rand((), generator=g).item() < 0.5:
        # an unmasked draft: q > 0 on forbidden tokens too
        q = effective_probs(draft_logits, torch.ones_like(allowed[:, :k]), temps, zeros_k, ones_p)

    if k:
        safe_q = q.clone()
        safe_q[safe_q.sum(-1) == 0] = 1.0  # empty rows: any token
        tokens = torch.multinomial(safe_q.reshape(-1, V), 1, generator=g).reshape(B, k)
    else:
        tokens = torch.zeros(B, 0, dtype=torch.long)
    if kind == "forbidden_draft":
        forbidden_scores = torch.rand(B, k, V, generator=g) + (~allowed[:, :k]).float() * 2
        tokens = forbidden_scores.argmax(-1)  # a forbidden token wherever one exists
    if kind == "p_eq_q":
        # one row draws a q = 0 token at a random position: rejection where p == q (zero residual)
        row, pos = torch.randint(0, B, (), generator=g), torch.randint(0, k, (), generator=g)
        zero_q = (q[row, pos] == 0).nonzero().flatten()
        if len(zero_q):
            tokens[row, pos] = zero_q[0]
    if kind == "small_q":
        tiny = 10.0 ** (-torch.randint(8, 31, (B, k), generator=g).double())
        q = q.double()
        q.scatter_(-1, tokens.unsqueeze(-1), tiny.unsqueeze(-1))
        q = (q / q.sum(-1, keepdim=True)).float()
        # and in some rows make the target's p(x) tiny too, so the ratio is not simply 1
        low = torch.rand(B, k, generator=g) < 0.5
        target[:, :k].scatter_(-1, tokens.unsqueeze(-1), torch.where(low, -30.0, 0.0).unsqueeze(-1) + target[:, :k].gather(-1, tokens.unsqueeze(-1)))

    udtype = torch.float64 if torch.rand((), generator=g).item() < 0.3 else torch.float32
    uniforms = torch.rand(B, k + 1, generator=g, dtype=udtype)
    if kind == "half_logits":
        target = target.half()
        q = q.half()
    bitmask = pack_bitmask(allowed)
    if kind == "random" and torch.rand((), generator=g).item() < 0.3:
        bitmask[..., -1] |= -(1 << (V % 32))  # garbage in the padding bits past V: ignored
    return dict(
        kind=kind,
        target_logits=target.contiguous(),
        draft_probs=q.contiguous(),
        draft_tokens=tokens.contiguous(),
        bitmask=bitmask,
        temperature=temps,
        top_k=zeros_k,
        top_p=ones_p,
        uniforms=uniforms,
    )


#: Kernel tilings the cases rotate through: one chunk per row, and several chunks and blocks per
#: row (which exercises the cross-chunk combination and the cross-block prefix of the draw).
LAUNCHES = ({"chunk": 512, "block": 512, "draw_block": 512}, {"chunk": 256, "block": 128, "draw_block": 128})


def make_cases(seed: int = 20260501) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    cases = [_make_case(kind, g) for kind, n in KINDS.items() for _ in range(n)]
    for n, case in enumerate(cases):
        case["launch"] = LAUNCHES[n % 4 == 3]
    return cases


ARG_NAMES = ("target_logits", "draft_probs", "draft_tokens", "bitmask", "temperature", "top_k", "top_p", "uniforms")

_WORKER = textwrap.dedent(
    """
    import os, sys, time
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch
    torch.set_num_threads(1)
    from constrained_spec.sampling.kernels import get_verifier
    verify = get_verifier("triton")
    data = torch.load(sys.argv[1])
    names = data["arg_names"]
    out = {"accepted": [], "next_token": [], "accept_prob": []}
    t0 = time.time()
    for case in data["cases"]:
        res = verify(*[case[n] for n in names], **case["launch"])
        out["accepted"].append(res.accepted)
        out["next_token"].append(res.next_token)
        out["accept_prob"].append(res.accept_prob)
    out["seconds"] = time.time() - t0
    torch.save(out, sys.argv[2])
    """
)

#: The interpreter is slow (~0.2 s per verify call); the cases are split over this many workers.
WORKERS = 2


def run_triton_workers(cases: list[dict], tmp_path: Path) -> dict:
    """Run the Triton path on ``cases`` in interpreter subprocesses; the outputs, in order."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    procs = []
    for w in range(WORKERS):
        src, dst = tmp_path / f"cases{w}.pt", tmp_path / f"out{w}.pt"
        torch.save({"cases": cases[w::WORKERS], "arg_names": ARG_NAMES}, src)
        procs.append((subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(src), str(dst)],
            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ), dst))
    parts = []
    for proc, dst in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-4000:]
        parts.append(torch.load(dst))
    merged: dict = {key: [None] * len(cases) for key in ("accepted", "next_token", "accept_prob")}
    for w, part in enumerate(parts):
        for key in merged:
            merged[key][w::WORKERS] = part[key]
    merged["seconds"] = sum(part["seconds"] for part in parts)
    return merged


def run_triton_on_device(cases: list[dict], device: str) -> dict:
    """Run the compiled Triton path on ``cases`` on ``device`` (a GPU); the outputs, on the CPU, in order."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        pytest.fail("TRITON_INTERPRET is set: the device run must execute the compiled kernels")
    if not torch.cuda.is_available():
        pytest.fail(f"CONSTRAINED_SPEC_TEST_DEVICE={device} but torch sees no CUDA device")
    assert resolve_backend("auto") == "triton", "auto must pick the fused kernel on CUDA"
    verify = get_verifier("triton")
    out: dict = {"accepted": [], "next_token": [], "accept_prob": []}
    t0 = time.time()
    for case in cases:
        res = verify(*[case[n].to(device) for n in ARG_NAMES], **case["launch"])
        assert res.accepted.device.type == "cuda"
        out["accepted"].append(res.accepted.cpu())
        out["next_token"].append(res.next_token.cpu())
        out["accept_prob"].append(res.accept_prob.cpu())
    out["seconds"] = time.time() - t0
    return out


@pytest.mark.skipif(not HAS_TRITON and TEST_DEVICE == "cpu", reason="triton is not installed")
@pytest.mark.slow  # ~35 s in Triton's interpreter on 2 cores: make test-slow (and gpu_check.sh on a GPU)
def test_triton_matches_torch_reference(tmp_path: Path) -> None:
    cases = make_cases()

    start = time.time()
    out = run_triton_workers(cases, tmp_path) if TEST_DEVICE == "cpu" else run_triton_on_device(cases, TEST_DEVICE)

    rows = exact_rows = 0
    tolerated: list[str] = []
    mismatches: list[str] = []
    for n, case in enumerate(cases):
        ref = reference_verify(*[case[a] for a in ARG_NAMES])
        got = VerifyResult(out["accepted"][n], out["next_token"][n], out["accept_prob"][n])
        assert got.accepted.dtype == torch.long and got.next_token.dtype == torch.long
        assert got.accept_prob.shape == ref.accept_prob.shape and got.accept_prob.dtype == torch.float32
        torch.testing.assert_close(got.accept_prob, ref.accept_prob, rtol=2e-5, atol=1e-6)
        cmp = compare_with_reference(case, got, ref)
        rows += cmp["rows"]
        exact_rows += cmp["identical"]
        tolerated += [f"case {n} ({case['kind']}) {line}" for line in cmp["tolerated"]]
        mismatches += [f"case {n} ({case['kind']}) {line}" for line in cmp["mismatches"]]
        if case["kind"] in ("greedy", "greedy_ties"):  # greedy is exact: it only compares logits
            assert torch.equal(got.accepted, ref.accepted) and torch.equal(got.next_token, ref.next_token), n

    summary = (
        f"{len(cases)} cases, {rows} rows: {exact_rows} identical, {len(tolerated)} tolerated boundary "
        f"cases, {len(mismatches)} mismatches; "
        + (f"interpreter {out['seconds']:.1f}s summed over {WORKERS} workers" if TEST_DEVICE == "cpu" else f"compiled on {TEST_DEVICE} {out['seconds']:.1f}s")
        + f", {time.time() - start:.1f}s wall"
    )
    print(summary, *tolerated, sep="\n")
    assert not mismatches, summary + "\n" + "\n".join(mismatches)
    assert len(tolerated) <= max(1, rows // 100), summary + "\n" + "\n".join(tolerated)
    assert len(cases) >= 200


def test_boundary_tolerance_is_not_silent() -> None:
    """The tolerance of the equality test accepts only differences at a rounding boundary."""
    case = make_cases()[0]
    args = [case[a] for a in ARG_NAMES]
    ref = reference_verify(*args)
    vocab = case["target_logits"].shape[-1]
    allowed = unpack_bitmask(case["bitmask"], vocab)
    for r in range(B):
        acc, nxt = int(ref.accepted[r]), int(ref.next_token[r])
        assert boundary_reason(case, r, ref, acc, nxt) is None  # no difference at all
        u = float(case["uniforms"][r, min(acc, K - 1)])
        if abs(u - float(ref.accept_prob[r, min(acc, K - 1)])) > 1e-3:  # a wrong accepted length
            other = acc + 1 if acc < K else acc - 1
            assert boundary_reason(case, r, ref, other, nxt) is None
        forbidden = (~allowed[r, acc]).nonzero().flatten()
        if len(forbidden):  # a forbidden token is never a tolerated draw
            assert boundary_reason(case, r, ref, acc, int(forbidden[0])) is None
    # and a genuine boundary is recognised: put u_k exactly on a cdf step of row 0
    r = 0
    acc = int(ref.accepted[r])
    p = effective_probs(case["target_logits"][r : r + 1], allowed[r : r + 1], *[case[n][r : r + 1] for n in ("temperature", "top_k", "top_p")])[0, acc]
    q = case["draft_probs"][r, acc].float() if acc < K else torch.zeros_like(p)
    dist = residual(p, q) if float((p - q).clamp_min(0).sum()) > RESIDUAL_EPS else p
    support = dist.nonzero().flatten()
    if len(support) >= 2:
        cdf = torch.cumsum(dist.double(), 0)
        edited = dict(case, uniforms=case["uniforms"].clone().double())
        edited["uniforms"][r, K] = float(cdf[support[0]] / cdf[-1])
        ref2 = reference_verify(*[edited[a] for a in ARG_NAMES])
        assert int(ref2.accepted[r]) == acc  # only the draw's uniform moved
        nxt = int(ref2.next_token[r])
        assert nxt in (int(support[0]), int(support[1]))
        other = int(support[1]) if nxt == int(support[0]) else int(support[0])
        assert boundary_reason(edited, r, ref2, acc, other) is not None
    else:  # pragma: no cover - the fixed seed gives a row with support
        pytest.fail("the fixed case has no row with two tokens of mass")


def test_triton_verify_falls_back_to_torch_for_top_k_top_p(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton", reason="triton is not installed")
    from constrained_spec.sampling.kernels import triton_verify

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # a batch whose every row filters launches no kernel
    case = make_cases()[0]
    case["top_k"] = torch.tensor([2, 5, 0])  # every row filters (a mixed batch: tests/sampling/test_batch_row_independence.py)
    case["top_p"] = torch.tensor([1.0, 1.0, 0.9])
    args = [case[a] for a in ARG_NAMES]
    assert triton_verify.uses_filters(case["top_k"], case["top_p"])
    ref = reference_verify(*args)
    got = triton_verify.verify(*args)
    assert torch.equal(got.accepted, ref.accepted) and torch.equal(got.next_token, ref.next_token)
    assert torch.equal(got.accept_prob, ref.accept_prob)
