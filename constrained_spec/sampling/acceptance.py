"""Speculative verification: the pure math, on tensors with a batch dimension.

Given the target's logits at k+1 positions, the draft's effective distributions q at the k drafted
positions, the drafted tokens, the grammar bitmask of every position and uniforms, decide how many
drafted tokens are kept and which token follows them:

* p_i = effective_probs(target_logits_i, mask_i, policy)  (grammar mask first: forbidden -> p = 0)
* drafted token x_i is kept with probability min(1, p_i(x_i) / q_i(x_i)), in order;
* at the first rejection j the next token is drawn from norm(max(0, p_j - q_j)), which can only
  hold allowed tokens because p_j does;
* when all k are kept the next token is drawn from p_k (the bonus token).

Greedy is the same construction with point masses (p and q are one-hot on their masked argmax), so
the draft is kept exactly while it equals the target's masked argmax and the correction is that
argmax. This module is the reference implementation; ``kernels/`` holds a fused GPU version of the
same function with the same contract.
"""

from __future__ import annotations

import torch

from constrained_spec.sampling.distribution import draw, effective_probs, unpack_bitmask
from constrained_spec.sampling.verifier import VerifyCall, VerifyResult, verifier_of

__all__ = ["RESIDUAL_EPS", "VerifyResult", "acceptance_probs", "dense_draft_probs", "first_rejection", "residual", "verify", "verify_call"]

#: Residual mass below this (relative) is treated as numerically zero: the draw falls back to p.
RESIDUAL_EPS = 1e-7


def acceptance_probs(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, point_mass: torch.Tensor | None = None) -> torch.Tensor:
    """min(1, p(x)/q(x)) for drafted tokens x [B, k]; p, q [B, k, V]. q(x) = 0 gives 0.
    ``point_mass`` bool [B, k]: rows whose q is the point mass at x (q(x) = 1; their q row is unused)."""
    px = p.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    qx = q.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    if point_mass is not None:
        qx = torch.where(point_mass, torch.ones_like(qx), qx)
    ratio = torch.where(qx > 0, px / qx.clamp_min(1e-30), torch.zeros_like(px))
    return ratio.clamp(max=1.0)


def dense_draft_probs(draft_probs: torch.Tensor, draft_tokens: torch.Tensor, point_mass: torch.Tensor | None) -> torch.Tensor:
    """``draft_probs`` [B, k, V] with the point-mass rows written out as one-hot rows (a copy where
    any is flagged): for implementations that take dense q only. Off the CPU the flags are not
    read (that would be a host sync): the rows are written whatever they say."""
    if point_mass is None or (point_mass.device.type == "cpu" and not bool(point_mass.any())):
        return draft_probs
    one_hot = torch.zeros(draft_probs.shape, dtype=draft_probs.dtype, device=draft_probs.device)
    one_hot.scatter_(-1, draft_tokens.unsqueeze(-1), 1.0)
    return torch.where(point_mass.unsqueeze(-1), one_hot, draft_probs)


def first_rejection(accept_prob: torch.Tensor, u_accept: torch.Tensor) -> torch.Tensor:
    """Number of leading drafted tokens kept [B]: keep x_i while u_i < accept_prob_i."""
    rejected = u_accept >= accept_prob  # [B, k]
    k = accept_prob.shape[-1]
    idx = torch.arange(k, device=accept_prob.device).expand_as(rejected)
    first = torch.where(rejected, idx, torch.full_like(idx, k))
    return first.min(-1).values if k > 0 else torch.zeros(accept_prob.shape[0], dtype=torch.long)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)) [..., V]; where that mass is ~0 (p ~= q) it falls back to p."""
    r = (p - q).clamp_min(0.0)
    mass = r.sum(-1, keepdim=True)
    return torch.where(mass > RESIDUAL_EPS, r / mass.clamp_min(1e-30), p)


def verify_call(call: VerifyCall) -> VerifyResult:
    """Verify drafted blocks (``call``'s tensors: :class:`~.verifier.VerifyCall`).

    target_logits [B, k+1, V]; draft_probs [B, k, V] (the draft's effective, masked q);
    point_mass bool [B, k] (optional): rows drawn from a point mass at their drafted token, whose
    ``draft_probs`` row is not read (it may be any values, e.g. a broadcast zero row);
    draft_tokens long [B, k]; bitmask int32 [B, k+1, ceil(V/32)]; temperature/top_k/top_p [B];
    uniforms [B, k+1] in [0, 1): column i < k decides acceptance of token i, column k drives the
    inverse-CDF draw of the next token. k may be 0 (plain constrained sampling). ``filters`` is
    not read (this path applies top-k / top-p wherever a row asks for them).
    """
    target_logits, draft_probs, draft_tokens, bitmask, temperature, top_k, top_p, uniforms = call.args()
    point_mass = call.point_mass
    batch, positions, vocab = target_logits.shape
    k = positions - 1
    allowed = unpack_bitmask(bitmask, vocab)
    p = effective_probs(target_logits, allowed, temperature, top_k, top_p)  # [B, k+1, V]
    q = draft_probs.float()

    accept_prob = acceptance_probs(p[:, :k], q, draft_tokens, point_mass) if k else p.new_zeros(batch, 0)
    accepted = first_rejection(accept_prob, uniforms[:, :k])

    rows = torch.arange(batch, device=p.device)
    p_at = p[rows, accepted]  # [B, V]: p at the first rejection, or p_k for the bonus
    if k:
        q_pad = torch.cat([q, q.new_zeros(batch, 1, vocab)], dim=1)
        q_at = q_pad[rows, accepted]  # zero row when all were kept -> residual == p
        if point_mass is not None:  # the rejected token's q is its point mass
            flagged = torch.cat([point_mass, point_mass.new_zeros(batch, 1)], dim=1)[rows, accepted]
            token_at = torch.cat([draft_tokens, draft_tokens.new_zeros(batch, 1)], dim=1)[rows, accepted]
            one_hot = torch.zeros_like(p_at).scatter_(-1, token_at.unsqueeze(-1), 1.0)
            q_at = torch.where(flagged.unsqueeze(-1), one_hot, q_at)
        dist = residual(p_at, q_at)
    else:
        dist = p_at
    next_token = draw(dist, uniforms[:, k])
    return VerifyResult(accepted=accepted, next_token=next_token, accept_prob=accept_prob)


#: the reference verifier: ``verify(target_logits, draft_probs, draft_tokens, bitmask, temperature,
#: top_k, top_p, uniforms, point_mass=None)`` (:func:`verify_call` in the verifier convention)
verify = verifier_of(verify_call)
