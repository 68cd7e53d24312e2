"""Linear layers with fp16 weights packed for fbgemm: fp32 activations and accumulation.

On a CPU without fast half-precision matmul (AVX2 only), the weights of a 0.5-1.5B model are read
from memory on every forward, and MKL's fp32 GEMM for a few rows (a speculative verify of k+1
tokens) costs about as many weight reads as rows. fbgemm's fp16 GEMM reads the weights once for up
to ~8 rows, at half the bytes. Measured on this project's 2-core AVX2 CPU (one cached forward,
~200 tokens of context): Qwen2.5-Coder-1.5B 328 / 909 ms for 1 / 5 new tokens in fp32 against
116 / 165 ms packed; the 0.5B 131 / 361 ms against 53 / 74 ms (``benchmarks/dtype_probe.py``).

The model this gives is the fp32 model with each linear weight rounded to fp16 (max logit change
~0.04 on the 1.5B); target-only and speculative decoding use the same packed model, so exactness is
about this model. Biases, embeddings and norms stay fp32.
"""

from __future__ import annotations

from typing import Any

import torch

from .errors import ModelLoadError


def packing_available() -> bool:
    """True where torch has fbgemm's fp16 linear (x86 CPU builds)."""
    return "fbgemm" in torch.backends.quantized.supported_engines and hasattr(
        torch.ops.quantized, "linear_prepack_fp16"
    )


class PackedFp16Linear(torch.nn.Module):
    """``y = x W^T + b`` with ``W`` stored as packed fp16; ``x``, ``b`` and ``y`` are fp32.

    ``weight`` keeps an fp16 copy only where asked (``keep_weight``): the draft's output head reads
    rows of it to compute logits for a few allowed tokens (``HFModel.extend_last``).
    """

    def __init__(self, linear: torch.nn.Linear, keep_weight: bool = False) -> None:
        super().__init__()
        w = linear.weight.detach()
        if w.device.type != "cpu" or w.dtype != torch.float32:
            raise ModelLoadError(f"fp16 weight packing needs fp32 CPU weights, got {w.dtype} on {w.device}")
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        b = None if linear.bias is None else linear.bias.detach().float()
        self.register_buffer("bias", b, persistent=False)
        self._packed = torch.ops.quantized.linear_prepack_fp16(w, b)
        self.weight = w.half() if keep_weight else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.quantized.linear_dynamic_fp16(x.reshape(-1, shape[-1]).float(), self._packed)
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, fp16 packed"


def pack_linears(model: Any) -> int:
    """Replace every ``nn.Linear`` of a CPU fp32 model by :class:`PackedFp16Linear`; return how many.

    The output head keeps an fp16 copy of its weight for restricted-head logits. Tied input
    embeddings stay fp32 (a lookup reads one row; they are not on the matmul path).
    """
    if not packing_available():
        raise ModelLoadError("fp16 weight packing needs a torch build with fbgemm (x86 CPU)")
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, PackedFp16Linear(child, keep_weight=child is head))
                count += 1
    return count
