"""What a verifier is called with, and what it declares it can take.

A verifier has the signature of :func:`~constrained_spec.sampling.acceptance.verify`. A
:class:`VerifyCall` holds one call's arguments (the job a batch row hands across threads to the
coordinator, ``engine.batching``). A verifier that takes ``filters=`` (whether any row uses top-k /
top-p, known on the host, so a fused kernel need not read it off the device) declares it with a
``takes_filters = True`` attribute: :class:`TakesFilters`, read by :func:`takes_filters` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import torch

from constrained_spec.sampling.acceptance import VerifyResult

__all__ = ["TakesFilters", "VerifyCall", "takes_filters"]


@runtime_checkable
class TakesFilters(Protocol):
    """A verifier's declared capability: ``takes_filters`` True means it takes ``filters=``."""

    takes_filters: bool


def takes_filters(verifier: object) -> bool:
    """Whether ``verifier`` declares that it takes ``filters=`` (:class:`TakesFilters`)."""
    return isinstance(verifier, TakesFilters) and bool(verifier.takes_filters)


@dataclass(frozen=True)
class VerifyCall:
    """One verifier call over B rows, each a block of k drafted tokens (V: the vocabulary, W =
    ceil(V / 32) bitmask words); every tensor on the target's device.

    * ``target_logits`` [B, k+1, V]: the target's logits at each drafted position and the one after;
    * ``draft_probs`` float [B, k, V]: q of each position (a point-mass position's row is unused);
    * ``draft_tokens`` long [B, k];
    * ``bitmask`` int32 [B, k+1, W]: the grammar's allowed tokens at each position;
    * ``temperature`` float [B], ``top_k`` long [B], ``top_p`` float [B]: each row's policy;
    * ``uniforms`` [B, k+1]: one per drafted token, the last for the correction or bonus draw;
    * ``point_mass`` bool [B, k] or None: positions whose q is the point mass at the drafted token;
    * ``filters``: whether any row uses top-k / top-p, for a verifier that takes it (None: not said).
    """

    target_logits: torch.Tensor
    draft_probs: torch.Tensor
    draft_tokens: torch.Tensor
    bitmask: torch.Tensor
    temperature: torch.Tensor
    top_k: torch.Tensor
    top_p: torch.Tensor
    uniforms: torch.Tensor
    point_mass: torch.Tensor | None = None
    filters: bool | None = None

    @property
    def k(self) -> int:
        """The drafted tokens per row."""
        return int(self.draft_tokens.shape[1])

    def args(self) -> tuple[torch.Tensor, ...]:
        """The eight positional arguments, in the verifier's order."""
        return (self.target_logits, self.draft_probs, self.draft_tokens, self.bitmask, self.temperature, self.top_k,
                self.top_p, self.uniforms)

    def run(self, verifier: Callable[..., VerifyResult]) -> VerifyResult:
        """``verifier`` on this call (``filters=`` only where it declares it takes it)."""
        options: dict[str, Any] = {}
        if self.filters is not None and takes_filters(verifier):
            options["filters"] = self.filters
        return verifier(*self.args(), point_mass=self.point_mass, **options)
