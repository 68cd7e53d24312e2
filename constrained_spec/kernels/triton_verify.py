"""Fused grammar-mask-and-verify in Triton: the same function as :func:`speculative.verify`.

The reference is :mod:`constrained_spec.speculative` (re-exported by :mod:`.torch_verify`); this
module computes the same ``VerifyResult`` with two kernel launches per verification step and no
host round-trip before the accepted lengths are known:

1. ``_stats_kernel``, grid ``(B, k+1)``: one program per (row, position). It unpacks the int32
   bitmask on the fly (bit ``v % 32`` of word ``v // 32``), masks forbidden tokens to ``-inf``,
   divides by the temperature, and streams the vocabulary in blocks keeping an online max / sum
   (the softmax normaliser) and the first masked argmax (greedy). For drafted positions ``i < k``
   it then writes ``accept_prob[b, i] = min(1, p_i(x_i) / q_i(x_i))`` (0 where ``q_i(x_i) = 0``;
   in greedy rows ``p`` is the point mass on the masked argmax).
2. ``_draw_kernel``, grid ``(B,)``: finds the first rejection ``j`` (``u_i >= accept_prob_i``) from
   the values kernel 1 wrote, then draws the next token at position ``j`` by inverse CDF:
   pass one sums the residual ``max(0, p_j - q_j)`` (``q`` is taken as zero when ``j == k``, which
   makes the residual ``p_k``: the bonus token), pass two scans the chosen distribution (the
   residual, or ``p_j`` when the residual mass is ``<= RESIDUAL_EPS``) with a float64 running
   prefix and returns the first token whose cumulative mass exceeds ``u_k * total``. Greedy rows
   skip both passes: their draw is always the masked argmax (or ``V - 1`` for a row with no
   allowed token, exactly what the reference's draw over an all-zero row returns).

Only allowed tokens carry mass in ``p`` and a token with zero mass is never returned (the scan
requires ``dist[v] > 0`` at the hit, so float64 rounding inside a block's prefix sum cannot land
on a zero-mass token, e.g. a grammar-forbidden one).

Top-k / top-p: **not in the kernel.** A batch in which any row has ``top_k > 0`` or
``top_p < 1`` is verified entirely by the torch reference (decided per batch, not per row: the
reference's filter pass is batch-wide and slightly changes the tail of rows that do not ask for
filtering, so splitting a batch would not reproduce it). Deciding needs the values of ``top_k`` /
``top_p``; pass ``filters=False`` (or keep those two tensors on the CPU) to avoid a device sync.

Exactness: the probabilities are computed in float32 like the reference, but with a different
summation order (blocked online softmax vs torch's softmax, blocked float64 prefix vs a sequential
float64 cumsum), so they agree to float32 rounding, not bit for bit. The accepted lengths and the
drawn token agree exactly except when a uniform falls within that rounding of a decision
boundary: ``u_i`` within ~1e-6 (relative) of ``accept_prob_i``, ``u_k * total`` within ~1e-6 of a
cumulative-mass boundary, or a residual mass within rounding of ``RESIDUAL_EPS``. Greedy rows
(and thus ``temperature == 0``) are exact: they only compare logits.
"""

from __future__ import annotations

import math
import os
from typing import Callable

import torch

from ..errors import ConstrainedSpecError
from ..speculative import RESIDUAL_EPS, VerifyResult
from ..speculative import verify as torch_verify

try:  # triton is optional: the torch path works without it
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None
    tl = None
    HAS_TRITON = False

#: Vocabulary block each program streams per step (power of two).
DEFAULT_BLOCK = 1024
#: Number of kernel launches of one :func:`verify` call on the Triton path.
LAUNCHES_PER_VERIFY = 2
#: Number of kernel launches of one :func:`mask_logits` call.
LAUNCHES_PER_MASK = 1


def interpret_mode() -> bool:
    """True when Triton kernels run in the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def triton_available() -> bool:
    """True when the Triton path can run here: triton imports and there is CUDA or the interpreter."""
    return HAS_TRITON and (torch.cuda.is_available() or interpret_mode())


def _require_triton() -> None:
    if not HAS_TRITON:
        raise ConstrainedSpecError(
            "the 'triton' kernel backend was requested but triton is not installed; "
            "use backend='torch' (or 'auto')"
        )
    if not (torch.cuda.is_available() or interpret_mode()):
        raise ConstrainedSpecError(
            "the 'triton' kernel backend needs a CUDA device (or TRITON_INTERPRET=1 for the slow "
            "CPU interpreter, set before the first kernel call); use backend='torch' (or 'auto')"
        )


# --------------------------------------------------------------------------------------------
# Kernel bodies. They are plain functions here and wrapped with ``triton.jit`` on first use (see
# ``_kernels``), because ``triton.jit`` decides between compiling and interpreting when it runs,
# from TRITON_INTERPRET: doing it lazily lets a caller (a test) set the variable after import.
# --------------------------------------------------------------------------------------------


def _stats_kernel(
    logits_ptr,  # [B, K+1, V] any float dtype, contiguous
    bitmask_ptr,  # [B, K+1, W] int32, contiguous
    q_ptr,  # [B, K, V] any float dtype, contiguous (a dummy when K == 0)
    tokens_ptr,  # [B, K] int64 (dummy when K == 0)
    temp_ptr,  # [B] float
    m_out_ptr,  # [B, K+1] float32: masked max of logits / T (0 where the row is all -inf)
    s_out_ptr,  # [B, K+1] float32: sum of exp(logit / T - m) over allowed tokens
    amax_out_ptr,  # [B, K+1] int32: first masked argmax
    any_out_ptr,  # [B, K+1] int32: 1 when the position allows some token
    acc_out_ptr,  # [B, K] float32: accept_prob
    V,
    W,
    K,
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0)
    i = tl.program_id(1)
    row = b * (K + 1) + i
    logits_row = logits_ptr + row.to(tl.int64) * V
    mask_row = bitmask_ptr + row.to(tl.int64) * W

    temp = tl.load(temp_ptr + b).to(tl.float32)
    greedy = temp == 0.0
    tdiv = tl.where(greedy, 1.0, temp)

    lanes = tl.arange(0, BLOCK)
    m = float("-inf")
    s = 0.0
    best = float("-inf")
    best_idx = 0
    any_allowed = 0
    for start in range(0, V, BLOCK):
        offs = start + lanes
        inb = offs < V
        words = tl.load(mask_row + (offs >> 5), mask=inb, other=0)
        allowed = (((words >> (offs & 31)) & 1) != 0) & inb
        x = tl.load(logits_row + offs, mask=allowed, other=float("-inf")).to(tl.float32)
        x = tl.where(allowed, x, float("-inf"))
        sx = x / tdiv
        bmax, barg = tl.max(sx, 0, return_indices=True, return_indices_tie_break_left=True)
        take = bmax > best  # strict: an earlier block wins ties (first index, like torch.argmax)
        best_idx = tl.where(take, start + barg, best_idx)
        best = tl.where(take, bmax, best)
        m_new = tl.maximum(m, bmax)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        s = s * tl.exp(m - m_safe) + tl.sum(tl.exp(sx - m_safe), 0)
        m = m_new
        any_allowed = tl.maximum(any_allowed, tl.max(allowed.to(tl.int32), 0))

    m_fin = tl.where(m == float("-inf"), 0.0, m)
    tl.store(m_out_ptr + row, m_fin)
    tl.store(s_out_ptr + row, s)
    tl.store(amax_out_ptr + row, best_idx)
    tl.store(any_out_ptr + row, any_allowed)

    if i < K:
        slot = b * K + i
        tok = tl.load(tokens_ptr + slot).to(tl.int32)
        word = tl.load(mask_row + (tok >> 5))
        tok_allowed = ((word >> (tok & 31)) & 1) != 0
        lx = tl.load(logits_row + tok).to(tl.float32)
        e = tl.exp(lx / tdiv - m_fin)
        p_soft = tl.where(tok_allowed & (s > 0.0), e / tl.where(s > 0.0, s, 1.0), 0.0)
        p_greedy = tl.where((tok == best_idx) & (any_allowed != 0), 1.0, 0.0)
        px = tl.where(greedy, p_greedy, p_soft)
        qx = tl.load(q_ptr + slot.to(tl.int64) * V + tok).to(tl.float32)
        ratio = tl.where(qx > 0.0, tl.minimum(px / tl.maximum(qx, 1e-30), 1.0), 0.0)
        tl.store(acc_out_ptr + slot, ratio)


def _draw_kernel(
    logits_ptr,  # [B, K+1, V]
    bitmask_ptr,  # [B, K+1, W] int32
    q_ptr,  # [B, K, V] (dummy when K == 0)
    temp_ptr,  # [B]
    unif_ptr,  # [B, K+1] float (any float dtype)
    acc_ptr,  # [B, K] float32 (dummy when K == 0)
    m_ptr,
    s_ptr,
    amax_ptr,
    any_ptr,
    accepted_out_ptr,  # [B] int64
    next_out_ptr,  # [B] int64
    V,
    W,
    K,
    eps,
    BLOCK: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    b = tl.program_id(0)

    # First rejection: keep x_i while u_i < accept_prob_i (compared in float64, which is exact
    # for the float32 accept_prob and for float32 or float64 uniforms, as the reference's
    # promoted comparison is).
    ks = tl.arange(0, BLOCK_K)
    kin = ks < K
    a = tl.load(acc_ptr + b * K + ks, mask=kin, other=0.0).to(tl.float64)
    u = tl.load(unif_ptr + b * (K + 1) + ks, mask=kin, other=0.0).to(tl.float64)
    rejected = (u >= a) & kin
    j = tl.min(tl.where(rejected, ks, K), 0)
    tl.store(accepted_out_ptr + b, j.to(tl.int64))

    row = b * (K + 1) + j
    u_draw = tl.load(unif_ptr + b * (K + 1) + K).to(tl.float64)
    temp = tl.load(temp_ptr + b).to(tl.float32)
    greedy = temp == 0.0
    any_allowed = tl.load(any_ptr + row)

    if greedy:
        # p is a point mass on the masked argmax; so is the residual whenever it is drawn from.
        nxt = tl.where(any_allowed != 0, tl.load(amax_ptr + row), V - 1)
    else:
        tdiv = tl.where(greedy, 1.0, temp)
        m = tl.load(m_ptr + row)
        s = tl.load(s_ptr + row)
        s_pos = s > 0.0
        s_div = tl.where(s_pos, s, 1.0)
        q_len = tl.where(j < K, V, 0)  # q is zero at the bonus position (j == K)
        logits_row = logits_ptr + row.to(tl.int64) * V
        mask_row = bitmask_ptr + row.to(tl.int64) * W
        q_row = q_ptr + (b * K + j).to(tl.int64) * V
        lanes = tl.arange(0, BLOCK)

        # Pass 1: residual mass (float32, as the reference decides on it) and the float64 totals
        # of both candidate distributions, plus the last index carrying mass (a fallback).
        mass = 0.0
        tot_r = tl.zeros((), dtype=tl.float64)
        tot_p = tl.zeros((), dtype=tl.float64)
        last_r = -1
        last_p = -1
        for start in range(0, V, BLOCK):
            offs = start + lanes
            inb = offs < V
            words = tl.load(mask_row + (offs >> 5), mask=inb, other=0)
            allowed = (((words >> (offs & 31)) & 1) != 0) & inb
            x = tl.load(logits_row + offs, mask=allowed, other=float("-inf")).to(tl.float32)
            x = tl.where(allowed, x, float("-inf"))
            p = tl.where(allowed, tl.exp(x / tdiv - m) / s_div, 0.0)
            p = tl.where(s_pos, p, 0.0)
            qv = tl.load(q_row + offs, mask=offs < q_len, other=0.0).to(tl.float32)
            r = tl.maximum(p - qv, 0.0)
            mass += tl.sum(r, 0)
            tot_r += tl.sum(r.to(tl.float64), 0)
            tot_p += tl.sum(p.to(tl.float64), 0)
            last_r = tl.maximum(last_r, tl.max(tl.where(r > 0.0, offs, -1), 0))
            last_p = tl.maximum(last_p, tl.max(tl.where(p > 0.0, offs, -1), 0))

        use_r = mass > eps
        total = tl.where(use_r, tot_r, tot_p)
        last = tl.where(use_r, last_r, last_p)
        target = u_draw * total

        # Pass 2: inverse CDF. The running prefix is accumulated exactly as `total` was, so the
        # prefix after the last block equals `total` bit for bit.
        found = V
        prefix = tl.zeros((), dtype=tl.float64)
        for start in range(0, V, BLOCK):
            offs = start + lanes
            inb = offs < V
            words = tl.load(mask_row + (offs >> 5), mask=inb, other=0)
            allowed = (((words >> (offs & 31)) & 1) != 0) & inb
            x = tl.load(logits_row + offs, mask=allowed, other=float("-inf")).to(tl.float32)
            x = tl.where(allowed, x, float("-inf"))
            p = tl.where(allowed, tl.exp(x / tdiv - m) / s_div, 0.0)
            p = tl.where(s_pos, p, 0.0)
            qv = tl.load(q_row + offs, mask=offs < q_len, other=0.0).to(tl.float32)
            r = tl.maximum(p - qv, 0.0)
            d = tl.where(use_r, r, p)
            d64 = d.to(tl.float64)
            cdf = prefix + tl.cumsum(d64, 0)
            hit = (cdf > target) & (d > 0.0)
            found = tl.minimum(found, tl.min(tl.where(hit, offs, V), 0))
            prefix += tl.sum(d64, 0)
        nxt = tl.where(found < V, found, tl.where(last >= 0, last, V - 1))

    tl.store(next_out_ptr + b, nxt.to(tl.int64))


def _mask_kernel(
    src_ptr,  # [R, V]
    dst_ptr,  # [R, V] (may alias src)
    bitmask_ptr,  # [R, W] int32
    V,
    W,
    src_stride,
    dst_stride,
    mask_stride,
    BLOCK: tl.constexpr,
):
    r = tl.program_id(0)
    blk = tl.program_id(1)
    offs = blk * BLOCK + tl.arange(0, BLOCK)
    inb = offs < V
    words = tl.load(bitmask_ptr + r.to(tl.int64) * mask_stride + (offs >> 5), mask=inb, other=0)
    allowed = ((words >> (offs & 31)) & 1) != 0
    x = tl.load(src_ptr + r.to(tl.int64) * src_stride + offs, mask=inb)
    y = tl.where(allowed, x, float("-inf"))
    tl.store(dst_ptr + r.to(tl.int64) * dst_stride + offs, y.to(dst_ptr.dtype.element_ty), mask=inb)


_KERNEL_CACHE: dict[bool, tuple[Callable, Callable, Callable]] = {}


def _kernels() -> tuple[Callable, Callable, Callable]:
    """The jitted (or interpreted) kernels, built once per mode."""
    mode = interpret_mode()
    if mode not in _KERNEL_CACHE:
        _KERNEL_CACHE[mode] = (
            triton.jit(_stats_kernel),
            triton.jit(_draw_kernel),
            triton.jit(_mask_kernel),
        )
    return _KERNEL_CACHE[mode]


def _check_device(t: torch.Tensor) -> None:
    if interpret_mode():
        if t.device.type != "cpu":
            raise ConstrainedSpecError("TRITON_INTERPRET=1 runs kernels on CPU tensors only")
    elif t.device.type != "cuda":
        raise ConstrainedSpecError(
            f"the Triton kernels need CUDA tensors, got a tensor on {t.device} "
            "(set TRITON_INTERPRET=1 to interpret them on the CPU)"
        )


def uses_filters(top_k: torch.Tensor, top_p: torch.Tensor) -> bool:
    """True when some row asks for top-k or top-p (then the batch takes the torch path).

    Reads the values: a device sync when the tensors live on the GPU.
    """
    return bool(((top_k > 0) | (top_p < 1.0)).any())


def verify(
    target_logits: torch.Tensor,
    draft_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    bitmask: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    uniforms: torch.Tensor,
    *,
    filters: bool | None = None,
    block: int = DEFAULT_BLOCK,
) -> VerifyResult:
    """Same contract as :func:`constrained_spec.speculative.verify`, fused in two Triton launches.

    ``filters``: whether any row uses top-k / top-p. ``None`` inspects ``top_k`` / ``top_p``
    (a sync if they are on the GPU); ``True`` sends the batch to the torch reference; ``False``
    asserts that no row filters (the caller's promise; the values are then not read).
    """
    _require_triton()
    if filters is None:
        filters = uses_filters(top_k, top_p)
    if filters:
        return torch_verify(
            target_logits, draft_probs, draft_tokens, bitmask, temperature, top_k, top_p, uniforms
        )

    batch, positions, vocab = target_logits.shape
    k = positions - 1
    words = bitmask.shape[-1]
    if words * 32 < vocab:
        raise ValueError(f"bitmask has {words} words, fewer than ceil({vocab}/32)")
    if tuple(bitmask.shape[:2]) != (batch, positions):
        raise ValueError(f"bitmask shape {tuple(bitmask.shape)} does not match logits {tuple(target_logits.shape)}")
    _check_device(target_logits)
    device = target_logits.device

    logits = target_logits.contiguous()
    mask = bitmask.to(torch.int32).contiguous()
    temp = temperature.contiguous()
    unif = uniforms.contiguous()
    if k:
        q = draft_probs.contiguous()
        tokens = draft_tokens.contiguous()
    else:  # valid pointers that are never read
        q = logits.new_zeros(1)
        tokens = torch.zeros(1, dtype=torch.long, device=device)

    f32 = dict(dtype=torch.float32, device=device)
    m = torch.empty(batch, positions, **f32)
    s = torch.empty(batch, positions, **f32)
    amax = torch.empty(batch, positions, dtype=torch.int32, device=device)
    anyv = torch.empty(batch, positions, dtype=torch.int32, device=device)
    acc = torch.empty(batch, max(k, 1), **f32)
    accepted = torch.empty(batch, dtype=torch.long, device=device)
    next_token = torch.empty(batch, dtype=torch.long, device=device)

    stats_kernel, draw_kernel, _ = _kernels()
    block = max(16, min(block, triton.next_power_of_2(vocab)))
    stats_kernel[(batch, positions)](
        logits, mask, q, tokens, temp, m, s, amax, anyv, acc, vocab, words, k, BLOCK=block
    )
    draw_kernel[(batch,)](
        logits, mask, q, temp, unif, acc, m, s, amax, anyv, accepted, next_token,
        vocab, words, k, RESIDUAL_EPS,
        BLOCK=block, BLOCK_K=triton.next_power_of_2(max(k, 1)),
    )
    accept_prob = acc[:, :k] if k else acc.new_zeros(batch, 0)
    return VerifyResult(accepted=accepted, next_token=next_token, accept_prob=accept_prob)


def mask_logits(
    logits: torch.Tensor, bitmask: torch.Tensor, *, inplace: bool = False, block: int = DEFAULT_BLOCK
) -> torch.Tensor:
    """Forbidden tokens -> ``-inf`` (one launch). logits [..., V], bitmask int32 [..., ceil(V/32)].

    ``inplace=True`` writes into ``logits`` (which must then be contiguous in its last dim) and
    returns it; otherwise returns a new tensor.
    """
    _require_triton()
    _check_device(logits)
    vocab = logits.shape[-1]
    words = bitmask.shape[-1]
    if words * 32 < vocab:
        raise ValueError(f"bitmask has {words} words, fewer than ceil({vocab}/32)")
    if tuple(bitmask.shape[:-1]) != tuple(logits.shape[:-1]):
        raise ValueError(f"bitmask shape {tuple(bitmask.shape)} does not match logits {tuple(logits.shape)}")
    rows = math.prod(logits.shape[:-1])
    if inplace:
        if logits.stride(-1) != 1:
            raise ValueError("in-place masking needs logits contiguous in the vocabulary dimension")
        dst = logits
        src2 = logits.view(rows, vocab) if rows else logits.reshape(0, vocab)
    else:
        src2 = logits.reshape(rows, vocab)
        if src2.stride(-1) != 1:
            src2 = src2.contiguous()
        dst = torch.empty_like(logits, memory_format=torch.contiguous_format)
    dst2 = dst.view(rows, vocab)
    mask2 = bitmask.to(torch.int32).reshape(rows, words)
    if mask2.stride(-1) != 1:
        mask2 = mask2.contiguous()
    if rows == 0 or vocab == 0:
        return dst
    block = max(16, min(block, triton.next_power_of_2(vocab)))
    _, _, kernel = _kernels()
    kernel[(rows, triton.cdiv(vocab, block))](
        src2, dst2, mask2, vocab, words, src2.stride(0), dst2.stride(0), mask2.stride(0), BLOCK=block
    )
    return dst
