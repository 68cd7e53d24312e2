"""The effective distribution at one position, defined in one place.

Order (the same for the target's p and the draft's q):

1. grammar mask: forbidden tokens get probability 0;
2. temperature: logits / T (T = 0 means greedy: a point mass on the masked argmax);
3. top-k: keep the k most likely allowed tokens (stable order breaks ties by token id);
4. top-p: keep the smallest most-likely-first prefix whose mass reaches top_p (at least one token);
5. renormalise.

Everything here is pure tensor math in float32 or wider; it knows nothing of models or grammars.
Batched parameters are tensors of shape [B] broadcast over the position axis.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

from constrained_spec.errors import SamplingError

NEG_INF = float("-inf")


@dataclass(frozen=True)
class SamplingPolicy:
    """Per-request sampling settings. ``temperature == 0`` selects greedy decoding."""

    temperature: float = 1.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def as_tensors(self, batch: int, device: torch.device | str = "cpu") -> "PolicyTensors":
        """The policy as the [B] tensors the batched math takes."""
        return PolicyTensors(
            temperature=torch.full((batch,), float(self.temperature), device=device),
            top_k=torch.full((batch,), int(self.top_k), dtype=torch.long, device=device),
            top_p=torch.full((batch,), float(self.top_p), device=device),
        )


@dataclass(frozen=True)
class PolicyTensors:
    """Batched sampling parameters, each of shape [B]."""

    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """int32 words [..., ceil(V/32)] -> bool [..., V]; bit i of word w allows token 32*w + i."""
    shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(*bitmask.shape[:-1], -1)[..., :vocab_size].bool()


def pack_bitmask(allowed: torch.Tensor) -> torch.Tensor:
    """bool [..., V] -> int32 words [..., ceil(V/32)] (the inverse of :func:`unpack_bitmask`)."""
    vocab = allowed.shape[-1]
    words = (vocab + 31) // 32
    padded = torch.zeros(*allowed.shape[:-1], words * 32, dtype=torch.int64, device=allowed.device)
    padded[..., :vocab] = allowed.long()
    weights = torch.ones(32, dtype=torch.int64, device=allowed.device) << torch.arange(32, device=allowed.device)
    packed = (padded.reshape(*allowed.shape[:-1], words, 32) * weights).sum(-1)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed)
    return packed.to(torch.int32)


def _bcast(param: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[B] -> [B, 1, ..., 1] matching ``like``'s rank."""
    return param.reshape(param.shape[0], *([1] * (like.dim() - 1)))


def effective_probs(
    logits: torch.Tensor,
    allowed: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
    *,
    all_greedy: bool | None = None,
    filters: bool | None = None,
) -> torch.Tensor:
    """The policy's distribution over the vocabulary.

    logits [B, ..., V] (any float dtype), allowed bool [B, ..., V], parameters [B].
    Returns float32 probabilities [B, ..., V] that sum to 1 over allowed tokens (a row with no
    allowed token at all returns zeros; callers treat that as an empty language).

    ``all_greedy`` (every row greedy: True, none: False) and ``filters`` (some row uses top-k or
    top-p): what a caller knows on the host; None reads them from the tensors, a host sync each
    when they live on a GPU. A wrong hint gives a wrong distribution: pass only what the policy says.
    """
    logits = logits.float().masked_fill(~allowed, NEG_INF)
    temp = _bcast(temperature.float(), logits)
    greedy = temp == 0
    any_greedy = bool(greedy.any()) if all_greedy is None else all_greedy
    if any_greedy and (all_greedy or bool(greedy.all())):  # fast path: no softmax needed for point masses
        point = torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
        return point * allowed.any(-1, keepdim=True)
    scaled = logits / torch.where(greedy, torch.ones_like(temp), temp) if any_greedy else logits / temp
    probs = torch.softmax(scaled, dim=-1).nan_to_num_(nan=0.0)  # a row with nothing allowed -> zeros

    if bool(((top_k > 0) | (top_p < 1.0)).any()) if filters is None else filters:
        k = _bcast(top_k, logits)
        p_cut = _bcast(top_p.double(), logits)
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        ranks = torch.arange(probs.shape[-1], device=probs.device)
        keep_sorted = (k == 0) | (ranks < k)
        kept = (sorted_probs * keep_sorted).double()
        kept = kept / kept.sum(-1, keepdim=True).clamp_min(1e-30)
        mass_before = torch.cumsum(kept, dim=-1) - kept
        keep_sorted = keep_sorted & ((mass_before < p_cut) | (ranks == 0))
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        cut = probs * keep
        total = cut.sum(-1, keepdim=True)
        cut = torch.where(total > 0, cut / total.clamp_min(1e-30), cut)
        # only the rows that filter are renormalised: a row without top-k or top-p keeps its softmax bit for bit,
        # whatever its neighbours in the batch ask for (dividing by a total of 1 - 1e-7 would move it)
        row_filters = _bcast((top_k > 0) | (top_p < 1.0), logits)
        probs = torch.where(row_filters, cut, probs)

    if any_greedy:  # point mass on the first masked argmax
        point = torch.zeros_like(scaled).scatter_(-1, scaled.argmax(-1, keepdim=True), 1.0)
        point = point * allowed.any(-1, keepdim=True)
        probs = torch.where(greedy, point, probs)
    return probs


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    """The explicit random generator of one request: seeded from ``seed`` when given (the same
    seed reproduces the same sample), else from fresh OS entropy (never the global torch RNG)."""
    return torch.Generator(device=device).manual_seed(seed if seed is not None else secrets.randbits(63))


def draw(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw from (possibly unnormalised) probs [..., V] with uniforms [...] in [0, 1).

    A token with zero mass is never drawn; a row with no mass at all raises
    :class:`~constrained_spec.errors.SamplingError` (there is nothing to draw). Uses float64
    cumulative sums.
    """
    cdf = torch.cumsum(probs.double(), dim=-1)
    if not bool((cdf[..., -1] > 0).all()):
        raise SamplingError("cannot draw from a distribution with no mass (every token has probability 0)")
    # u is in [0, 1); clamping keeps a u that rounded up to 1.0 off the zero-mass tail
    target = (uniforms.double().unsqueeze(-1) * cdf[..., -1:]).minimum(cdf[..., -1:] * (1 - 1e-12))
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    return idx.clamp_max(probs.shape[-1] - 1)
