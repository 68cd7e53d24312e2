"""The pure weight math of sequence-level constrained sampling (sequential Monte Carlo).

A particle is proposed by the engine's locally constrained distribution: at each position the
target's tempered distribution p_T(x | prefix) = softmax(logits / T) is masked to the allowed
tokens A and renormalised, q(x) = p_T(x) 1[x in A] / m with m = sum over A of p_T. Over a whole
sequence y (EOS included) the product of the proposal is Q(y) = P_T(y) / prod m, so the importance
weight of y for the target P_T(y | y in L) (up to its constant) is P_T(y) 1[y in L] / Q(y) = prod m:
the product of the allowed masses at the committed positions. That mass is what
:func:`allowed_log_mass` returns (in logs); a position with nothing allowed gets -inf (the particle
dies).

With top-k / top-p, the base model SMC conditions is the unconstrained sampler: P_{T,k,p}, each
position's tempered distribution cut to its top-k / top-p set over the whole vocabulary and
renormalised (what the request would sample without a grammar), so the target is
P_{T,k,p}(y | y in L). The engine's local mode applies the cut after the mask instead; SMC's
proposal must be the base masked and renormalised for the allowed mass to be its weight, so under
SMC the cut set of the full vocabulary (:func:`filter_keep`) is intersected with the grammar mask
and the verify runs with the cut off (``engine.smc``). The weight is then the allowed mass of the
cut distribution: sum over allowed x of P_{T,k,p}(x | prefix), exactly invariant 10. Greedy (T = 0)
is refused: the target P_T(y | L) is not defined by a point mass per position.

Also here: the effective sample size, the log-mean of weights (the normalising-constant factor of
an epoch) and systematic resampling with the request's seeded generator.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from constrained_spec.errors import ConfigError
from constrained_spec.sampling.distribution import effective_probs

__all__ = ["allowed_log_mass", "check_policy", "draw_index", "ess", "filter_keep", "log_mean_exp", "normalized", "systematic_resample"]


def check_policy(temperature: float, top_k: int, top_p: float) -> None:
    """Raise :class:`ConfigError` where SMC has no defined target: greedy."""
    if temperature <= 0:
        raise ConfigError("alignment='smc' samples P(y | y in L) and needs temperature > 0; greedy (temperature=0) "
                          "has no such distribution: use alignment='local' or set a temperature")


def filter_keep(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """bool [..., V]: the tokens the top-k / top-p cut of the *unmasked* tempered distribution keeps
    (every token where neither is set), by the engine's own cut (``effective_probs`` with
    everything allowed: stable order, at least one token)."""
    if top_k <= 0 and top_p >= 1.0:
        return torch.ones(logits.shape, dtype=torch.bool, device=logits.device)
    flat = logits.reshape(-1, logits.shape[-1])
    rows = flat.shape[0]
    probs = effective_probs(flat, torch.ones_like(flat, dtype=torch.bool),
                            torch.full((rows,), float(temperature), device=flat.device),
                            torch.full((rows,), int(top_k), dtype=torch.long, device=flat.device),
                            torch.full((rows,), float(top_p), device=flat.device), all_greedy=False, filters=True)
    return (probs > 0).reshape(logits.shape)


def allowed_log_mass(logits: torch.Tensor, allowed: torch.Tensor, temperature: float, top_k: int = 0,
                     top_p: float = 1.0) -> torch.Tensor:
    """log sum over allowed x of P_{T,k,p}(x), per row, in float64: P_{T,k,p} is softmax(logits / T)
    cut to :func:`filter_keep`'s set and renormalised (no cut: the whole softmax).

    logits [n, V] (any float dtype, any device), allowed bool [n, V]; returns float64 [n] on the
    CPU, -inf for a row with nothing allowed (or whose allowed tokens all have -inf logits or are cut)."""
    scaled = logits.double() / float(temperature)
    keep = filter_keep(logits, temperature, top_k, top_p)
    scaled = scaled.masked_fill(~keep, float("-inf"))
    total = torch.logsumexp(scaled, dim=-1)
    kept = torch.logsumexp(scaled.masked_fill(~allowed, float("-inf")), dim=-1)
    return (kept - total).cpu()


def log_mean_exp(log_weights: Sequence[float]) -> float:
    """log of the mean of exp(log_weights) (-inf when every weight is 0)."""
    if not log_weights:
        raise ValueError("no weights")
    top = max(log_weights)
    if top == float("-inf"):
        return top
    return top + math.log(sum(math.exp(w - top) for w in log_weights) / len(log_weights))


def normalized(log_weights: Sequence[float]) -> list[float]:
    """The weights exp(log_weights) normalised to sum to 1 (raises when every weight is 0)."""
    top = max(log_weights)
    if top == float("-inf"):
        raise ValueError("every weight is 0")
    raw = [math.exp(w - top) for w in log_weights]
    total = sum(raw)
    return [r / total for r in raw]


def ess(log_weights: Sequence[float]) -> float:
    """Effective sample size (sum w)^2 / sum w^2, in [1, N] (0 when every weight is 0)."""
    if max(log_weights) == float("-inf"):
        return 0.0
    w = normalized(log_weights)
    return 1.0 / sum(x * x for x in w)


def systematic_resample(log_weights: Sequence[float], generator: torch.Generator) -> list[int]:
    """N ancestor indices by systematic resampling: one uniform u from ``generator``, then the
    points (u + i) / N through the cumulative normalised weights; index i appears about N w_i
    times (floor or ceil), never an index of weight 0. Sorted ascending."""
    w = normalized(log_weights)
    n = len(w)
    u = float(torch.rand(1, generator=generator, dtype=torch.float64))
    out: list[int] = []
    cum, i = w[0], 0
    for j in range(n):
        point = (u + j) / n
        while point >= cum and i < n - 1:
            i += 1
            cum += w[i]
        while w[i] == 0.0 and i < n - 1:  # rounding at the top: never an index of weight 0
            i += 1
        if w[i] == 0.0:  # the tail rounded past the last positive weight: take it
            i = max(k for k in range(n) if w[k] > 0)
        out.append(i)
    return out


def draw_index(log_weights: Sequence[float], generator: torch.Generator) -> int:
    """One index drawn with probability proportional to exp(log_weights)."""
    w = normalized(log_weights)
    u = float(torch.rand(1, generator=generator, dtype=torch.float64))
    cum = 0.0
    last = max(k for k in range(len(w)) if w[k] > 0)
    for k, x in enumerate(w):
        cum += x
        if u < cum and x > 0:
            return k
    return last
