"""Verification backends: the torch reference and fused Triton kernels.

``get_verifier(backend)`` returns a callable with the signature of
:func:`constrained_spec.sampling.acceptance.verify`.

Backends:

* ``"torch"``  — :mod:`.torch_verify` (the reference math itself), any device;
* ``"triton"`` — :mod:`.triton_verify` (two launches per verify step; the rows that use top-k /
  top-p go to the torch path, decided row by row, so no row's results depend on its neighbours).
  Needs triton and CUDA, or ``TRITON_INTERPRET=1`` (CPU interpreter, slow, for tests); otherwise
  asking for it raises :class:`~constrained_spec.errors.ConstrainedSpecError`;
* ``"auto"``   — Triton when ``torch.cuda.is_available()`` and triton imports, else torch
  (on a CUDA machine it still sends non-CUDA tensors to torch; ``auto`` never picks the
  interpreter).
"""

from __future__ import annotations

from typing import Callable

import torch

from constrained_spec.errors import ConstrainedSpecError
from constrained_spec.sampling.kernels import torch_verify

BACKENDS = ("auto", "torch", "triton")

__all__ = ["BACKENDS", "get_verifier", "resolve_backend"]


def _triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(backend: str = "auto") -> str:
    """``"auto"`` / ``"torch"`` / ``"triton"`` -> the concrete backend, checking that it can run."""
    if backend not in BACKENDS:
        raise ConstrainedSpecError(f"unknown kernel backend {backend!r}; choose one of {BACKENDS}")
    if backend == "auto":
        return "triton" if torch.cuda.is_available() and _triton_importable() else "torch"
    if backend == "triton":
        from constrained_spec.sampling.kernels import triton_verify

        triton_verify._require_triton()  # clear ConstrainedSpecError when it cannot run here
    return backend


def get_verifier(backend: str = "auto") -> Callable:
    """A ``verify(target_logits, draft_probs, draft_tokens, bitmask, temperature, top_k, top_p,
    uniforms, point_mass=None) -> VerifyResult`` for ``backend``.

    ``"auto"`` on a CUDA machine returns a dispatcher that sends CUDA logits to the Triton kernels
    and logits on any other device (a model kept on the CPU) to the torch path; a forced
    ``"triton"`` raises on non-CUDA logits instead (unless interpreting).
    """
    chosen = resolve_backend(backend)
    if chosen == "triton":
        from constrained_spec.sampling.kernels import triton_verify

        return triton_verify.verify if backend == "triton" else _auto_verify
    return torch_verify.verify


def _auto_verify(target_logits, *args, point_mass=None, **kwargs):
    """``auto`` on a CUDA machine: Triton for CUDA logits, the torch path otherwise."""
    if target_logits.is_cuda:
        from constrained_spec.sampling.kernels import triton_verify

        return triton_verify.verify(target_logits, *args, point_mass, **kwargs)
    return torch_verify.verify(target_logits, *args, point_mass)


#: the verifiers that take ``filters=`` (whether any row uses top-k / top-p): a caller that knows it
#: on the host passes it, so the fused kernel does not read it off the device (a host sync)
_auto_verify.takes_filters = True  # type: ignore[attr-defined]
