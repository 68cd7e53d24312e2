"""Fused grammar-mask-and-verify in Triton: the same function as :func:`constrained_spec.sampling.acceptance.verify`.

The reference is :mod:`constrained_spec.sampling.acceptance` (re-exported by :mod:`.torch_verify`); this
module computes the same ``VerifyResult`` with **two kernel launches per verification step** and
no host round-trip before the accepted lengths are known (the outputs stay on the device):

1. ``_stats_kernel``, grid ``(B, k+1, ceil(V / chunk))``: one program per (row, position,
   vocabulary chunk). It unpacks the int32 bitmask on the fly (bit ``v % 32`` of word ``v // 32``),
   masks forbidden tokens to ``-inf``, divides by the temperature, and streams its chunk in blocks
   keeping an online max / sum of ``exp`` (the softmax normaliser) and the first masked argmax.
   Splitting the vocabulary keeps the GPU busy when ``B * (k+1)`` is small.
2. ``_verify_draw_kernel``, grid ``(B,)``: combines the chunk partials of every position (max,
   normaliser, first argmax), writes ``accept_prob[b, i] = min(1, p_i(x_i) / q_i(x_i))`` (0 where
   ``q_i(x_i) = 0``; in greedy rows ``p`` is the point mass on the masked argmax), finds the first
   rejection ``j`` (``u_i >= accept_prob_i``; ``j = k`` when all are kept), then draws the next token
   at position ``j`` by inverse CDF: pass one sums the residual ``max(0, p_j - q_j)`` (``q`` is taken
   as zero at ``j == k``, which makes it ``p_k``: the bonus token), pass two scans the chosen
   distribution (the residual, or ``p_j`` when the residual mass is ``<= RESIDUAL_EPS``) with a
   float64 running prefix and stops at the first token whose cumulative mass exceeds
   ``u_k * total``. Greedy rows (temperature 0) skip both passes: their draw is the masked argmax
   (or ``V - 1`` for a position with no allowed token, which is what the reference's draw over an
   all-zero row returns).

Only allowed tokens carry mass in ``p``, and a token with zero mass is never returned (the scan
requires ``dist[v] > 0`` at the hit, so float64 rounding inside a block's prefix scan cannot land
on a zero-mass token, e.g. a grammar-forbidden one).

**Top-k / top-p are not in the kernel.** The rows that have ``top_k > 0`` or ``top_p < 1`` are
verified by the torch reference, the others by the kernels (decided per row, so a row's results
never depend on its neighbours: a row that does not filter gets, bit for bit, what it gets alone,
whatever the other rows of its batch ask for; the reference's filter pass leaves such rows
untouched, so the split changes none of its own rows either). Deciding reads ``top_k`` /
``top_p``; pass ``filters=False`` (or keep those tensors on the CPU) to avoid a device sync.

Exactness: the probabilities are float32 as in the reference, but computed differently (a
chunked online softmax whose normaliser is accumulated in float64, vs ``torch.softmax``, whose own
error grows with V: ~1e-7 relative at V = 300, ~1e-5 on the CPU at V ~ 150k; a blocked float64
prefix vs a sequential float64 cumsum), so they agree to that rounding, not bit for bit. The
accepted lengths and the drawn tokens are equal except when a uniform falls within that rounding
of a decision boundary: ``u_i`` close to ``accept_prob_i``, ``u_k * total`` close to a
cumulative-mass step, or a residual mass close to ``RESIDUAL_EPS``
(:func:`.torch_verify.boundary_reason` recognises exactly these, with explicit margins). The last
one is the only kind seen in the tests, and only where ``p == q`` exactly and the drafted token has
``q = 0`` (a forced rejection): the reference's residual is then exactly 0, while any other
computation of ``p`` differs from torch's by its float32 normalisation error (~1e-7 at V = 300:
the size of ``RESIDUAL_EPS`` itself), so the fallback to ``p`` may or may not trigger. Greedy rows
only compare logits and are exact. On NVIDIA GPUs ``exp`` is libdevice's ``expf`` (``tl.exp``
would be the approximate ``ex2``); the CPU interpreter uses numpy's.

Interpreter: ``TRITON_INTERPRET=1`` runs the kernels on CPU tensors (slowly; for tests). It must be
set before triton is first imported in the process.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from constrained_spec.errors import ConstrainedSpecError
from constrained_spec.sampling.acceptance import RESIDUAL_EPS, dense_draft_probs
from constrained_spec.sampling.acceptance import verify_call as torch_verify_call
from constrained_spec.sampling.verifier import VerifyCall, VerifyResult, verifier_of

try:  # triton is optional: the torch path works without it
    import triton
    import triton.language as tl

    HAS_TRITON = True
    try:  # accurate expf (``tl.exp`` lowers to the approximate ex2 on NVIDIA GPUs)
        from triton.language.extra import libdevice

        _LIBDEVICE_OK = True
    except ImportError:  # pragma: no cover
        libdevice = None
        _LIBDEVICE_OK = False
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None
    tl = None
    libdevice = None
    HAS_TRITON = False
    _LIBDEVICE_OK = False

#: Vocabulary block each program streams per step (power of two).
DEFAULT_BLOCK = 1024
#: Vocabulary chunk of one statistics program (a multiple of the block; V / chunk programs per row).
DEFAULT_CHUNK = 8192
#: Block of the per-row draw program (it streams the chosen position twice).
DEFAULT_DRAW_BLOCK = 2048
STATS_NUM_WARPS = 4
DRAW_NUM_WARPS = 8
#: Number of kernel launches of one :func:`verify` call on the Triton path.
LAUNCHES_PER_VERIFY = 2


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
            "CPU interpreter, set before triton is imported); use backend='torch' (or 'auto')"
        )


# --------------------------------------------------------------------------------------------
# Kernel bodies. They are plain functions here and wrapped with ``triton.jit`` on first use (see
# ``_kernels``): ``triton.jit`` decides between compiling and interpreting when it runs, so
# importing this module never fixes the mode. (triton's own jitted helpers are decided when triton
# is imported, which is why TRITON_INTERPRET must be set before that.)
# --------------------------------------------------------------------------------------------


def _stats_kernel(
    logits_ptr,  # [B, K+1, V] any float dtype, contiguous
    bitmask_ptr,  # [B, K+1, W] int32, contiguous
    temp_ptr,  # [B] float
    pm_ptr,  # [B, K+1, S] float32 out: chunk max of masked logits / T (-inf: nothing allowed)
    ps_ptr,  # [B, K+1, S] float64 out: chunk sum of exp(logit / T - chunk max)
    pidx_ptr,  # [B, K+1, S] int32 out: first index of the chunk max
    pany_ptr,  # [B, K+1, S] int32 out: 1 when the chunk allows some token
    V,
    W,
    K,
    S,
    CHUNK: tl.constexpr,
    BLOCK: tl.constexpr,
    PRECISE_EXP: tl.constexpr,
):
    b = tl.program_id(0)
    i = tl.program_id(1)
    c = tl.program_id(2)
    row = b * (K + 1) + i
    logits_row = logits_ptr + row.to(tl.int64) * V
    mask_row = bitmask_ptr + row.to(tl.int64) * W

    temp = tl.load(temp_ptr + b).to(tl.float32)
    tdiv = tl.where(temp == 0.0, 1.0, temp)  # greedy rows use the raw logits (argmax only)

    lanes = tl.arange(0, BLOCK)
    c0 = c * CHUNK
    m = float("-inf")
    s = tl.full((), 0.0, dtype=tl.float64)  # float64: the normaliser must not add a bias of its own
    best_idx = c0
    any_vec = tl.full([BLOCK], 0, dtype=tl.int1)
    for it in range(0, CHUNK, BLOCK):
        offs = c0 + it + lanes
        inb = offs < V
        words = tl.load(mask_row + (offs >> 5), mask=inb, other=0)
        allowed = ((words >> (offs & 31)) & 1) != 0  # words past V load as 0
        x = tl.load(logits_row + offs, mask=allowed, other=float("-inf")).to(tl.float32)
        sx = x / tdiv
        bmax, barg = tl.reduce((sx, lanes), 0, _ARGMAX)
        take = bmax > m  # strict: an earlier block wins ties (first index, like torch.argmax)
        best_idx = tl.where(take, c0 + it + barg, best_idx)
        m_new = tl.maximum(m, bmax)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        # m: a Python float before the loop, a Triton tensor in it (a loop-carried value mypy cannot follow)
        rescale = tl.exp(m.to(tl.float64) - m_safe.to(tl.float64))  # type: ignore[attr-defined]  # float64 exp: accurate
        if PRECISE_EXP:
            ev = libdevice.exp(sx - m_safe)
        else:
            ev = tl.exp(sx - m_safe)
        s = s * rescale + tl.reduce(ev.to(tl.float64), 0, _SUM)
        m = m_new
        any_vec = any_vec | allowed

    slot = row * S + c
    tl.store(pm_ptr + slot, m)
    tl.store(ps_ptr + slot, s)
    tl.store(pidx_ptr + slot, best_idx)
    tl.store(pany_ptr + slot, tl.reduce(any_vec.to(tl.int32), 0, _MAX))


def _verify_draw_kernel(
    logits_ptr,  # [B, K+1, V]
    bitmask_ptr,  # [B, K+1, W] int32
    q_ptr,  # [B, K, V] any float dtype (a dummy when K == 0)
    tokens_ptr,  # [B, K] int64 (a dummy when K == 0)
    temp_ptr,  # [B]
    unif_ptr,  # [B, K+1] float (any float dtype)
    pm_ptr,  # [B, K+1, S] chunk partials from _stats_kernel
    ps_ptr,
    pidx_ptr,
    pany_ptr,
    acc_out_ptr,  # [B, max(K, 1)] float32 out: accept_prob
    accepted_out_ptr,  # [B] int64 out
    next_out_ptr,  # [B] int64 out
    V,
    W,
    K,
    S,
    eps,
    BLOCK: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_K1: tl.constexpr,
    PRECISE_EXP: tl.constexpr,
):
    b = tl.program_id(0)
    temp = tl.load(temp_ptr + b).to(tl.float32)
    greedy = temp == 0.0
    tdiv = tl.where(greedy, 1.0, temp)
    # All positions 0..K at once (vectors over positions): combine the chunk partials into each
    # position's max / softmax normaliser / first argmax, then accept_prob_i = min(1, p_i(x_i) /
    # q_i(x_i)) for the drafted positions i < K.
    kv = tl.arange(0, BLOCK_K1)
    k_in = kv <= K
    drafted = kv < K
    rows = b * (K + 1) + kv
    svec = tl.arange(0, BLOCK_S)
    poff = rows[:, None] * S + svec[None, :]
    pmask = k_in[:, None] & (svec < S)[None, :]
    pm = tl.load(pm_ptr + poff, mask=pmask, other=float("-inf"))
    ps = tl.load(ps_ptr + poff, mask=pmask, other=0.0)
    pidx = tl.load(pidx_ptr + poff, mask=pmask, other=V)
    pany = tl.load(pany_ptr + poff, mask=pmask, other=0)
    mx = tl.reduce(pm, 1, _MAX)
    m = tl.where(mx == float("-inf"), 0.0, mx)
    scale = tl.exp(pm.to(tl.float64) - m[:, None].to(tl.float64))
    s = tl.reduce(tl.where(pm > float("-inf"), ps * scale, 0.0), 1, _SUM)  # float64
    amax = tl.reduce(tl.where(pm == mx[:, None], pidx, V), 1, _MIN)  # first chunk with the max
    any_allowed = tl.reduce(pany, 1, _MAX)

    slot = b * K + kv
    tok = tl.load(tokens_ptr + slot, mask=drafted, other=0).to(tl.int32)
    word = tl.load(bitmask_ptr + rows.to(tl.int64) * W + (tok >> 5), mask=k_in, other=0)
    tok_allowed = ((word >> (tok & 31)) & 1) != 0
    lx = tl.load(logits_ptr + rows.to(tl.int64) * V + tok, mask=k_in, other=0.0).to(tl.float32)
    if PRECISE_EXP:
        e_tok = libdevice.exp(lx / tdiv - m)
    else:
        e_tok = tl.exp(lx / tdiv - m)
    s_ok = s > 0.0
    p_soft = tl.where(tok_allowed & s_ok, (e_tok.to(tl.float64) / tl.where(s_ok, s, 1.0)).to(tl.float32), 0.0)
    p_greedy = tl.where((tok == amax) & (any_allowed != 0), 1.0, 0.0)
    px = tl.where(greedy, p_greedy, p_soft)
    qx = tl.load(q_ptr + slot.to(tl.int64) * V + tok, mask=drafted, other=0.0).to(tl.float32)
    ratio = tl.where(qx > 0.0, tl.minimum(px / tl.maximum(qx, 1e-30), 1.0), 0.0)
    tl.store(acc_out_ptr + slot, ratio, mask=drafted)

    # Keep x_i while u_i < accept_prob_i (compared in float64: exact for a float32 accept_prob
    # and float32 or float64 uniforms, like the reference's promoted comparison); j is the first
    # rejected position, or K (the bonus) when all are kept.
    u = tl.load(unif_ptr + b * (K + 1) + kv, mask=k_in, other=0.0).to(tl.float64)
    stop = ((u >= ratio.to(tl.float64)) | (kv == K)) & k_in
    j = tl.reduce(tl.where(stop, kv, K), 0, _MIN)
    at_j = kv == j  # exactly one lane: sums below just pick that lane's value
    j_m = tl.reduce(tl.where(at_j, m, 0.0), 0, _SUM)
    j_s = tl.reduce(tl.where(at_j, s, 0.0), 0, _SUM)
    j_amax = tl.reduce(tl.where(at_j, amax, 0), 0, _SUM)
    j_any = tl.reduce(tl.where(at_j, any_allowed, 0), 0, _SUM)
    tl.store(accepted_out_ptr + b, j.to(tl.int64))

    row = b * (K + 1) + j
    u_draw = tl.load(unif_ptr + b * (K + 1) + K).to(tl.float64)
    if greedy:
        # p is a point mass on the masked argmax; so is the residual whenever it is drawn from.
        nxt = tl.where(j_any != 0, j_amax, V - 1)
    else:
        s_pos = j_s > 0.0
        inv_s = 1.0 / tl.where(s_pos, j_s, 1.0)  # float64
        q_len = tl.where(j < K, V, 0)  # q is zero at the bonus position (j == K)
        logits_row = logits_ptr + row.to(tl.int64) * V
        mask_row = bitmask_ptr + row.to(tl.int64) * W
        q_row = q_ptr + (b * K + j).to(tl.int64) * V
        lanes = tl.arange(0, BLOCK)

        # Pass 1: residual mass (float32, as the reference decides on it) and the float64 totals
        # of both candidate distributions, plus the last index carrying mass (a fallback).
        mass = 0.0
        tot_r = tl.full((), 0.0, dtype=tl.float64)
        tot_p = tl.full((), 0.0, dtype=tl.float64)
        last_r = tl.full([BLOCK], -1, dtype=tl.int32)
        last_p = tl.full([BLOCK], -1, dtype=tl.int32)
        for start in range(0, V, BLOCK):
            offs = start + lanes
            inb = offs < V
            words = tl.load(mask_row + (offs >> 5), mask=inb, other=0)
            allowed = ((words >> (offs & 31)) & 1) != 0  # words past V load as 0
            x = tl.load(logits_row + offs, mask=allowed, other=float("-inf")).to(tl.float32)
            if PRECISE_EXP:
                ev = libdevice.exp(x / tdiv - j_m)
            else:
                ev = tl.exp(x / tdiv - j_m)
            p = tl.where(allowed, (ev.to(tl.float64) * inv_s).to(tl.float32), 0.0)
            p = tl.where(s_pos, p, 0.0)
            qv = tl.load(q_row + offs, mask=offs < q_len, other=0.0).to(tl.float32)
            r = tl.maximum(p - qv, 0.0)
            mass += tl.reduce(r, 0, _SUM)
            tot_r += tl.reduce(r.to(tl.float64), 0, _SUM)
            tot_p += tl.reduce(p.to(tl.float64), 0, _SUM)
            last_r = tl.maximum(last_r, tl.where(r > 0.0, offs, -1))
            last_p = tl.maximum(last_p, tl.where(p > 0.0, offs, -1))

        use_r = mass > eps
        total = tl.where(use_r, tot_r, tot_p)
        last = tl.reduce(tl.where(use_r, last_r, last_p), 0, _MAX)
        # as the reference: a u that rounds up to 1 stays off the zero-mass tail
        target = tl.minimum(u_draw * total, total * (1.0 - 1e-12))

        # Pass 2: inverse CDF, stopping at the block that holds the hit. The running prefix is
        # accumulated exactly as `total` was (the same block sums in the same order).
        found = V
        prefix = tl.full((), 0.0, dtype=tl.float64)
        start = 0
        while (start < V) & (found == V):
            offs = start + lanes
            inb = offs < V
            words = tl.load(mask_row + (offs >> 5), mask=inb, other=0)
            allowed = ((words >> (offs & 31)) & 1) != 0  # words past V load as 0
            x = tl.load(logits_row + offs, mask=allowed, other=float("-inf")).to(tl.float32)
            if PRECISE_EXP:
                ev = libdevice.exp(x / tdiv - j_m)
            else:
                ev = tl.exp(x / tdiv - j_m)
            p = tl.where(allowed, (ev.to(tl.float64) * inv_s).to(tl.float32), 0.0)
            p = tl.where(s_pos, p, 0.0)
            qv = tl.load(q_row + offs, mask=offs < q_len, other=0.0).to(tl.float32)
            r = tl.maximum(p - qv, 0.0)
            d = tl.where(use_r, r, p)
            d64 = d.to(tl.float64)
            cdf = prefix + tl.associative_scan(d64, 0, _SUM)
            # d > 0: a zero-mass token (e.g. a forbidden one) is never returned, even where
            # rounding inside the block's scan is not monotone.
            hit = (cdf > target) & (d > 0.0)
            found = tl.minimum(found, tl.reduce(tl.where(hit, offs, V), 0, _MIN))
            prefix += tl.reduce(d64, 0, _SUM)
            start += BLOCK
        nxt = tl.where(found < V, found, tl.where(last >= 0, last, V - 1))

    tl.store(next_out_ptr + b, nxt.to(tl.int64))


# Reductions are written as ``tl.reduce`` / ``tl.associative_scan`` with the combine functions
# ``tl.sum`` / ``tl.max`` / ``tl.cumsum`` use internally (same code on the GPU). Calling them
# directly skips a nested jit call, which the CPU interpreter makes very slow. The combine
# functions are private to triton, so each has a public-API fallback with the same semantics.


def _sum_combine(a, b):
    return a + b


def _max_combine(a, b):
    return tl.maximum(a, b)


def _min_combine(a, b):
    return tl.minimum(a, b)


def _argmax_left_combine(value1, index1, value2, index2):
    gt = (value1 > value2) | ((value1 == value2) & (index1 < index2))
    return tl.where(gt, value1, value2), tl.where(gt, index1, index2)


def _combine_fns() -> dict:
    std = getattr(tl, "standard", None)
    own = {
        "SUM": _sum_combine,
        "MAX": _max_combine,
        "MIN": _min_combine,
        "ARGMAX": _argmax_left_combine,
    }
    names = {
        "SUM": "_sum_combine",
        "MAX": "_elementwise_max",
        "MIN": "_elementwise_min",
        "ARGMAX": "_argmax_combine_tie_break_left",
    }
    return {key: getattr(std, names[key], None) or triton.jit(own[key]) for key in own}


_SUM = _MAX = _MIN = _ARGMAX = None  # set by _kernels() before the kernels are jitted


#: mode -> (stats, verify-draw) jitted kernels: triton ships no type information (no py.typed), so
#: a jitted kernel (launched as ``kernel[grid](...)``) is Any to mypy
_KERNEL_CACHE: dict[bool, tuple[Any, Any]] = {}


def _kernels() -> tuple[Any, Any]:
    """The jitted (or interpreted) ``(stats, verify-draw)`` kernels, built once per mode."""
    mode = interpret_mode()
    if mode not in _KERNEL_CACHE:
        globals().update({f"_{key}": fn for key, fn in _combine_fns().items()})
        _KERNEL_CACHE[mode] = (
            triton.jit(_stats_kernel),
            triton.jit(_verify_draw_kernel),
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


def filtering_rows(top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """bool [B]: the rows that ask for top-k or top-p (those rows take the torch path)."""
    return (top_k > 0) | (top_p < 1.0)


def uses_filters(top_k: torch.Tensor, top_p: torch.Tensor) -> bool:
    """True when some row asks for top-k or top-p (then those rows take the torch path).

    Reads the values: a device sync when the tensors live on the GPU.
    """
    return bool(filtering_rows(top_k, top_p).any())


def verify_call(call: VerifyCall, *, block: int = DEFAULT_BLOCK, chunk: int = DEFAULT_CHUNK, draw_block: int = DEFAULT_DRAW_BLOCK) -> VerifyResult:
    """Same contract as :func:`constrained_spec.sampling.acceptance.verify_call`, fused in two Triton launches.

    ``call.filters``: whether any row uses top-k / top-p. ``None`` inspects ``top_k`` / ``top_p``
    (a sync if they are on the GPU); ``True`` sends the rows that filter to the torch reference
    and the others to the kernels (reading which rows filter: a sync); ``False`` asserts that no
    row filters (the caller's promise; the values are then not read).
    """
    _require_triton()
    if call.filters is None or call.filters:
        rows = filtering_rows(call.top_k, call.top_p).cpu()
        if bool(rows.all()):
            return torch_verify_call(call)
        if bool(rows.any()):
            return _split_verify(call, rows, block=block, chunk=chunk, draw_block=draw_block)
    return _fused_verify(call, block=block, chunk=chunk, draw_block=draw_block)


def _take_rows(t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``t``'s rows ``rows`` (long [n], on the CPU), on ``t``'s device."""
    return t[rows.to(t.device)]


def _split_verify(call: VerifyCall, rows: torch.Tensor, *, block: int, chunk: int, draw_block: int) -> VerifyResult:
    """A batch whose ``rows`` (bool [B], on the CPU) filter: those rows by the torch reference, the
    others by the kernels; each row's results are those of its own path alone.

    The kernels run over the whole batch (their programs are per row; the outputs of the rows
    that filter are replaced), so only the filtering rows are gathered."""
    fused = _fused_verify(call, block=block, chunk=chunk, draw_block=draw_block)
    picked = rows.nonzero().flatten()
    ref = torch_verify_call(call.map(lambda t: _take_rows(t, picked)))
    return VerifyResult(accepted=_put_rows(fused.accepted, picked, ref.accepted), next_token=_put_rows(fused.next_token, picked, ref.next_token),
                        accept_prob=_put_rows(fused.accept_prob, picked, ref.accept_prob))


def _put_rows(out: torch.Tensor, rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``out`` with its rows ``rows`` (long [n], on the CPU) set to ``values`` (in place)."""
    out[rows.to(out.device)] = values.to(device=out.device, dtype=out.dtype)
    return out


def _fused_verify(call: VerifyCall, *, block: int = DEFAULT_BLOCK, chunk: int = DEFAULT_CHUNK, draw_block: int = DEFAULT_DRAW_BLOCK) -> VerifyResult:
    """The two kernel launches over every row, top-k / top-p not applied (see :func:`verify_call`)."""
    target_logits, draft_probs, draft_tokens, bitmask, temperature, _, _, uniforms = call.args()
    draft_probs = dense_draft_probs(draft_probs, draft_tokens, call.point_mass)  # the kernel reads dense q

    batch, positions, vocab = target_logits.shape
    k = positions - 1
    words = bitmask.shape[-1]
    if words * 32 < vocab:
        raise ValueError(f"bitmask has {words} words, fewer than ceil({vocab}/32)")
    if tuple(bitmask.shape[:2]) != (batch, positions):
        raise ValueError(f"bitmask shape {tuple(bitmask.shape)} does not match logits {tuple(target_logits.shape)}")
    _check_device(target_logits)
    device = target_logits.device

    # Everything on the logits' device (the small tensors often come from the host).
    logits = target_logits.contiguous()
    mask = bitmask.to(device=device, dtype=torch.int32, non_blocking=True).contiguous()
    temp = temperature.to(device, non_blocking=True).contiguous()
    unif = uniforms.to(device, non_blocking=True).contiguous()
    if k:
        q = draft_probs.to(device, non_blocking=True).contiguous()
        tokens = draft_tokens.to(device, non_blocking=True).contiguous()
    else:  # valid pointers that are never read
        q = logits.new_zeros(1)
        tokens = torch.zeros(1, dtype=torch.long, device=device)

    chunk = max(16, min(chunk, triton.next_power_of_2(vocab)))
    block = max(16, min(block, chunk))
    draw_block = max(16, min(draw_block, triton.next_power_of_2(vocab)))
    splits = triton.cdiv(vocab, chunk)
    pm = torch.empty(batch, positions, splits, dtype=torch.float32, device=device)
    ps = torch.empty(batch, positions, splits, dtype=torch.float64, device=device)
    pidx = torch.empty(batch, positions, splits, dtype=torch.int32, device=device)
    pany = torch.empty_like(pidx)
    acc = torch.empty(batch, max(k, 1), dtype=torch.float32, device=device)
    accepted = torch.empty(batch, dtype=torch.long, device=device)
    next_token = torch.empty(batch, dtype=torch.long, device=device)

    stats_kernel, draw_kernel = _kernels()
    precise = _LIBDEVICE_OK and not interpret_mode()
    stats_kernel[(batch, positions, splits)](
        logits, mask, temp, pm, ps, pidx, pany, vocab, words, k, splits,
        CHUNK=chunk, BLOCK=block, PRECISE_EXP=precise, num_warps=STATS_NUM_WARPS,
    )
    draw_kernel[(batch,)](
        logits, mask, q, tokens, temp, unif, pm, ps, pidx, pany, acc, accepted, next_token,
        vocab, words, k, splits, RESIDUAL_EPS,
        BLOCK=draw_block, BLOCK_S=triton.next_power_of_2(splits), BLOCK_K1=triton.next_power_of_2(k + 1),
        PRECISE_EXP=precise, num_warps=DRAW_NUM_WARPS,
    )
    accept_prob = acc[:, :k] if k else acc[:, :0]
    return VerifyResult(accepted=accepted, next_token=next_token, accept_prob=accept_prob)


#: the fused verifier: ``verify(target_logits, draft_probs, draft_tokens, bitmask, temperature, top_k,
#: top_p, uniforms, point_mass=None, *, filters=None, block=..., chunk=..., draw_block=...)``
#: (:func:`verify_call` in the verifier convention)
verify = verifier_of(verify_call)
verify.takes_filters = True  # type: ignore[attr-defined]  # see kernels._auto_verify
