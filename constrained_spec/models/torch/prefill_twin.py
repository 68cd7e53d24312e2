"""A second copy of a model's linear weights in another dtype, used only to prefill prompts.

On a CPU with AVX512-BF16 a prompt's prefill (many rows per forward: compute-bound) is faster with
bf16 matmuls, while decoding (one to a few rows: bound by reading the weights) is faster with fp16
weights packed for fbgemm (``fp16w``). Measured here (``benchmarks/dtype_probe.py``, one thread): a
64-token chunk of the 1.5B costs 2.15 s in fp16w and 1.23 s in bf16; one decode token 136 ms
against 338 ms. :func:`prefill_twin` gives the base model (no output head: a prefill keeps no
logits) with each linear layer replaced by a :class:`CastLinear` holding the weight in the
prefill dtype; every other module (embeddings, norms, rotary, attention) is the decode model's own,
shared by reference. Activations between the linears stay in the decode model's dtype, so the keys
and values the twin writes have the decode cache's dtype and shapes and the first decode forward
continues from them (``HFModel.prefill``).

What this changes: for a draft, only speed (the draft's q is whatever it computes; the construction
is exact for any q). For a target, the prompt's keys and values (and so every later logit) are
those of the twin's matmuls: the target becomes "bf16 prefill + fp16w decode". Target-only and
speculative decoding prefill the target through the same twin, so greedy identity between the
modes holds for this model as it did before.

Measured on this project's AVX512-BF16 host, one thread (``benchmarks/prefill_probe.py``,
2026-12-01,
``docs/results/2026-12-01-prefill-probe``): the 1.5B target prefills 100 / 500 / 1000 tokens in 2.95 / 15.3 /
31.2 s with its fp16w weights and 1.60 / 8.2 / 15.2 s through the bf16 twin (2.62 GB more); its KV
moves by at most 0.35 (of |KV| up to 357) and the next-token logits by 0.027. The int8w draft is
faster in its own weights (3.3 s against 4.8 s for 1000 tokens). On the held-out workload
(2026-12-01, one thread, bf16 prefill against the decode weights) every greedy output stayed token for token
the same and requests got 1.27x (target-only) / 1.31x (speculative) faster, median per prompt.
On a CPU without native bf16 matmuls (AVX2 only) bf16 is slower: the option stays opt-in.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any

import torch

from constrained_spec.config import PREFILL_DTYPES  # the one list (config imports no torch)
from constrained_spec.errors import ConfigError

__all__ = ["PREFILL_DTYPES", "CastLinear", "attach_prefill", "prefill_twin", "twin_bytes"]

_TORCH = {"bf16": torch.bfloat16, "fp32": torch.float32}

#: twins built per (model, dtype) while the model lives: Generators sharing a model share its twin
_TWINS: weakref.WeakKeyDictionary[Any, dict[str, torch.nn.Module]] = weakref.WeakKeyDictionary()


class CastLinear(torch.nn.Module):
    """``y = x W^T + b`` with ``W`` held in its own dtype: ``x`` is cast to it for the matmul, ``y``
    cast back to ``x``'s dtype, the bias (kept in fp32) added there."""

    weight: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.register_buffer("weight", weight, persistent=False)
        self.register_buffer("bias", bias, persistent=False)
        self.out_features, self.in_features = weight.shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(x.to(self.weight.dtype), self.weight).to(x.dtype)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.weight.dtype}"


def _dense(layer: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The fp32 weight and bias of a plain or packed linear layer."""
    from constrained_spec.models.torch.packed_linear import PACKED

    if isinstance(layer, tuple(PACKED.values())):
        packed: Any = layer
        return packed.dense_weight(), packed.bias
    if isinstance(layer, torch.nn.Linear):
        return layer.weight.detach().float(), None if layer.bias is None else layer.bias.detach().float()
    raise ConfigError(f"prefill twin: cannot read the weight of a {type(layer).__name__}")


def _is_linear(module: torch.nn.Module) -> bool:
    from constrained_spec.models.torch.packed_linear import PACKED

    return type(module) is torch.nn.Linear or isinstance(module, tuple(PACKED.values()))


def _clone_tree(module: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """``module`` with its linear layers as :class:`CastLinear` in ``dtype``: a subtree without
    linears is the module itself, a module above linears a shallow copy (its parameters shared)."""
    if _is_linear(module):
        w, b = _dense(module)
        return CastLinear(w.to(dtype).contiguous(), None if b is None else b.float().clone())
    if not any(_is_linear(m) for m in module.modules()):
        return module
    twin = copy.copy(module)
    twin._modules = {name: None if child is None else _clone_tree(child, dtype)
                     for name, child in module._modules.items()}
    return twin


def prefill_twin(model: Any, dtype: str) -> torch.nn.Module:
    """The base model of ``model`` (a transformers causal LM, plain or with packed linears) whose
    linear layers hold their weights in ``dtype`` ("bf16" or "fp32"); built once per model and
    dtype while the model lives. Raises :class:`ConfigError` for an unknown dtype or a model that
    is not on the CPU (the lever is for CPU prefill)."""
    if dtype not in _TORCH:
        raise ConfigError(f"unknown prefill dtype {dtype!r}; choose from {', '.join(PREFILL_DTYPES)}")
    base = model.base_model
    device = next(base.parameters()).device
    if device.type != "cpu":
        raise ConfigError(f"prefill_dtype is a CPU lever; this model is on {device} (load it in bf16 there instead)")
    twins = _TWINS.setdefault(model, {})
    if dtype not in twins:
        with torch.no_grad():
            twins[dtype] = _clone_tree(base, _TORCH[dtype]).eval()
    return twins[dtype]


def twin_bytes(twin: torch.nn.Module) -> int:
    """Bytes held by the twin's own weights (the shared modules not counted)."""
    total = 0
    for m in twin.modules():
        if isinstance(m, CastLinear):
            total += m.weight.numel() * m.weight.element_size() + (0 if m.bias is None else m.bias.numel() * 4)
    return total


def attach_prefill(model: Any, dtype: str, split: int = 0) -> int:
    """Make ``model`` (a :class:`~constrained_spec.models.torch.hf.HFModel`) prefill through a twin in
    ``dtype`` ("same": its own weights) in forwards of ``split`` tokens (0: one); return the bytes
    the twin's weights hold (0 for "same"). A model that is not an HFModel takes only the defaults."""
    from constrained_spec.models.torch.hf import HFModel

    if dtype not in PREFILL_DTYPES:
        raise ConfigError(f"unknown prefill dtype {dtype!r}; choose from {', '.join(PREFILL_DTYPES)}")
    if not isinstance(split, int) or split < 0:
        raise ConfigError(f"prefill_split must be an integer >= 0, got {split!r}")
    if not isinstance(model, HFModel):
        if dtype != "same" or split:
            raise ConfigError(f"prefill_dtype / prefill_split need a transformers model, not {type(model).__name__}")
        return 0
    twin = None if dtype == "same" else prefill_twin(model.model, dtype)
    model.set_prefill(twin, split)
    return 0 if twin is None else twin_bytes(twin)
