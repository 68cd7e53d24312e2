"""What a verifier is called with, what it answers, and what it declares it can take.

A verifier is called as ``verifier(target_logits, draft_probs, draft_tokens, bitmask, temperature,
top_k, top_p, uniforms, point_mass=None, **options)``: the fields of :class:`VerifyCall`, in their
order, positional or by name. That convention is written once, here: an implementation is a
function of one :class:`VerifyCall` (``acceptance.verify_call``, ``triton_verify.verify_call``) and
:func:`verifier_of` gives it the convention. A :class:`VerifyCall` is also the job a batch row hands
across threads to the coordinator (``engine.batching``). A verifier that takes ``filters=``
(whether any row uses top-k / top-p, known on the host, so a fused kernel need not read it off the
device) declares it with a ``takes_filters = True`` attribute: :class:`TakesFilters`, read by
:func:`takes_filters` only.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import torch

__all__ = ["TakesFilters", "VerifyCall", "VerifyResult", "takes_filters", "verifier_of"]


@dataclass
class VerifyResult:
    """Outcome of verifying one block per sequence."""

    accepted: torch.Tensor  # long [B]: number of drafted tokens kept, 0..k
    next_token: torch.Tensor  # long [B]: correction (accepted < k) or bonus (accepted == k)
    accept_prob: torch.Tensor  # float32 [B, k]: min(1, p/q) of each drafted token


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

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> VerifyCall:
        """This call with ``fn`` applied to each of its tensors (``point_mass`` too, where given)."""
        point_mass = None if self.point_mass is None else fn(self.point_mass)
        return VerifyCall(fn(self.target_logits), fn(self.draft_probs), fn(self.draft_tokens), fn(self.bitmask), fn(self.temperature),
                          fn(self.top_k), fn(self.top_p), fn(self.uniforms), point_mass, self.filters)

    def run(self, verifier: Callable[..., VerifyResult]) -> VerifyResult:
        """``verifier`` on this call (``filters=`` only where it declares it takes it)."""
        options: dict[str, Any] = {}
        if self.filters is not None and takes_filters(verifier):
            options["filters"] = self.filters
        return verifier(*self.args(), point_mass=self.point_mass, **options)


#: the fields of :class:`VerifyCall`: the arguments a verifier takes by name
CALL_FIELDS = frozenset(f.name for f in dataclasses.fields(VerifyCall))
#: a verifier takes at most this many positional arguments (the eight tensors and ``point_mass``)
MAX_POSITIONAL = 9


def _convention() -> inspect.Signature:
    """The signature of every verifier: :class:`VerifyCall`'s fields (``filters`` by name only), then ``**options``."""
    kinds = {"filters": inspect.Parameter.KEYWORD_ONLY}
    params = [inspect.Parameter(f.name, kinds.get(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD), annotation=f.type,
                                default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default)
              for f in dataclasses.fields(VerifyCall)]
    return inspect.Signature([*params, inspect.Parameter("options", inspect.Parameter.VAR_KEYWORD)], return_annotation="VerifyResult")


def verifier_of(impl: Callable[..., VerifyResult], name: str = "verify") -> Callable[..., VerifyResult]:
    """``impl(call: VerifyCall, **options)`` as a verifier named ``name``: ``verifier(target_logits,
    draft_probs, draft_tokens, bitmask, temperature, top_k, top_p, uniforms, point_mass=None, *,
    filters=None, **options)``, its arguments (positional or by name) gathered into one
    :class:`VerifyCall`, the other keywords passed on to ``impl``."""

    def verifier(*args: Any, **kwargs: Any) -> VerifyResult:
        if len(args) > MAX_POSITIONAL:
            raise TypeError(f"{name}() takes at most {MAX_POSITIONAL} positional arguments ({len(args)} given)")
        named = {field: kwargs.pop(field) for field in CALL_FIELDS.intersection(kwargs)}
        return impl(VerifyCall(*args, **named), **kwargs)

    verifier.__name__ = verifier.__qualname__ = name
    verifier.__module__ = impl.__module__
    verifier.__doc__ = impl.__doc__
    verifier.__signature__ = _convention()  # type: ignore[attr-defined]  # what inspect and help() show
    return verifier
