"""Sampling: the effective distribution (mask -> temperature -> top-k -> top-p -> renormalise), the
pure acceptance/residual math of speculative verification, and its kernels (``kernels/``)."""

from constrained_spec.sampling.acceptance import VerifyResult, verify
from constrained_spec.sampling.distribution import (
    PolicyTensors,
    SamplingPolicy,
    draw,
    effective_probs,
    make_generator,
    pack_bitmask,
    unpack_bitmask,
)

__all__ = ["PolicyTensors", "SamplingPolicy", "VerifyResult", "draw", "effective_probs", "make_generator",
           "pack_bitmask", "unpack_bitmask", "verify"]
