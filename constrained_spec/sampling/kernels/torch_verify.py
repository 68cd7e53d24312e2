"""The torch path of the kernels package: the reference itself, plus comparison helpers.

``verify`` *is* :func:`constrained_spec.sampling.acceptance.verify` (re-exported, not re-implemented), so
there is one definition of the math; the Triton kernels in :mod:`.triton_verify` are tested
against it (:func:`compare_with_reference`).
"""

from __future__ import annotations

import torch

from constrained_spec.sampling.acceptance import VerifyResult, verify
from constrained_spec.sampling.distribution import unpack_bitmask

__all__ = ["VerifyResult", "verify"]


# ------------------------------------------------------------------------------------------
# Comparing another implementation with the reference (tests and benchmarks use this).
# ------------------------------------------------------------------------------------------

#: A differing decision is tolerated only this close to its boundary (see :func:`boundary_reason`).
ACCEPT_MARGIN = 2e-5  # |u_i - accept_prob_i| (torch's CPU softmax alone is off by ~1e-5 at V ~ 150k)
CDF_MARGIN = 2e-5  # |cdf - u * total|, relative to the total
EPS_MARGIN = 2e-7  # |residual mass - RESIDUAL_EPS|


def boundary_reason(
    inputs: dict, row: int, ref: VerifyResult, got_accepted: int, got_next: int
) -> str | None:
    """Why ``(got_accepted, got_next)`` may differ from ``ref`` at ``row``: a float-rounding boundary.

    ``inputs`` maps verify's argument names to the tensors both implementations were given.
    Returns a description when the difference sits within rounding of a decision boundary, and
    None when it is a real mismatch (or when there is no difference). Tolerated cases:

    * acceptance: ``u_i`` within ``ACCEPT_MARGIN`` of the reference's ``accept_prob_i`` at the first
      position where the two decisions differ;
    * residual fallback: the residual mass within ``EPS_MARGIN`` of ``RESIDUAL_EPS``;
    * draw: ``u_k * total`` within ``CDF_MARGIN`` (relative) of every cumulative mass between the two
      tokens, and the other token has mass (a zero-mass token is never tolerated).
    """
    from constrained_spec.sampling.acceptance import RESIDUAL_EPS, residual
    from constrained_spec.sampling.distribution import effective_probs

    ref_acc, ref_next = int(ref.accepted[row]), int(ref.next_token[row])
    u = inputs["uniforms"][row].double().cpu()
    if got_accepted != ref_acc:
        i = min(got_accepted, ref_acc)
        gap = abs(float(u[i]) - float(ref.accept_prob[row, i]))
        return f"acceptance boundary at position {i}: |u - a| = {gap:.2e}" if gap <= ACCEPT_MARGIN else None
    if got_next == ref_next:
        return None
    logits = inputs["target_logits"][row : row + 1]
    vocab = logits.shape[-1]
    k = inputs["draft_tokens"].shape[1]
    allowed = unpack_bitmask(inputs["bitmask"][row : row + 1], vocab)
    params = [inputs[n][row : row + 1] for n in ("temperature", "top_k", "top_p")]
    p = effective_probs(logits, allowed, *params)[0, ref_acc]
    q = inputs["draft_probs"][row, ref_acc].float() if ref_acc < k else torch.zeros_like(p)
    mass = float((p - q).clamp_min(0).sum())
    if k and abs(mass - RESIDUAL_EPS) <= EPS_MARGIN:
        return f"residual mass {mass:.2e} within {EPS_MARGIN:g} of RESIDUAL_EPS"
    dist = residual(p, q) if k else p
    cdf = torch.cumsum(dist.double(), 0)
    target = min(float(u[k]) * float(cdf[-1]), float(cdf[-1]) * (1 - 1e-12))
    lo, hi = sorted((ref_next, got_next))
    worst = float((cdf[lo:hi] - target).abs().max()) / max(float(cdf[-1]), 1e-300)
    if bool(dist[got_next] > 0) and worst <= CDF_MARGIN:
        return f"cdf boundary between tokens {lo} and {hi}: |cdf - u*total| <= {worst:.2e} (relative)"
    return None


def compare_with_reference(inputs: dict, got: VerifyResult, ref: VerifyResult | None = None) -> dict:
    """Row-by-row comparison of ``got`` with the reference on the same ``inputs``.

    Returns ``{"rows", "identical", "tolerated": [str], "mismatches": [str], "accept_prob_max_abs"}``.
    """
    names = ("target_logits", "draft_probs", "draft_tokens", "bitmask", "temperature", "top_k", "top_p", "uniforms")
    if ref is None:
        ref = verify(*[inputs[n] for n in names])
    acc_ref, nxt_ref = ref.accepted.cpu(), ref.next_token.cpu()
    acc_got, nxt_got = got.accepted.cpu(), got.next_token.cpu()
    out: dict = {"rows": int(acc_ref.shape[0]), "identical": 0, "tolerated": [], "mismatches": []}
    diff = (got.accept_prob.float().cpu() - ref.accept_prob.float().cpu()).abs()
    out["accept_prob_max_abs"] = float(diff.max()) if diff.numel() else 0.0
    for r in range(out["rows"]):
        a, t = int(acc_got[r]), int(nxt_got[r])
        if a == int(acc_ref[r]) and t == int(nxt_ref[r]):
            out["identical"] += 1
            continue
        line = f"row {r}: reference (accepted {int(acc_ref[r])}, next {int(nxt_ref[r])}) vs (accepted {a}, next {t})"
        reason = boundary_reason(inputs, r, ref, a, t)
        (out["tolerated"] if reason else out["mismatches"]).append(f"{line}: {reason}" if reason else line)
    return out
