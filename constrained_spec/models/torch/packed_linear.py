"""Linear layers with weights packed for fbgemm: fp16 weights (fp32 activations and accumulation),
or int8 weights (activations quantized to int8 per call), for CPU decoding.

On a CPU without fast half-precision matmul (AVX2 only), the weights of a 0.5-1.5B model are read
from memory on every forward, and MKL's fp32 GEMM for a few rows (a speculative verify of k+1
tokens) costs about as many weight reads as rows. fbgemm's fp16 GEMM reads the weights once for up
to ~8 rows, at half the bytes. Measured on this project's 2-core AVX2 CPU (one cached forward,
~200 tokens of context): Qwen2.5-Coder-1.5B 328 / 909 ms for 1 / 5 new tokens in fp32 against
116 / 165 ms packed; the 0.5B 131 / 361 ms against 53 / 74 ms (``benchmarks/dtype_probe.py``).

The model this gives is the fp32 model with each linear weight rounded to fp16 (max logit change
~0.04 on the 1.5B); target-only and speculative decoding use the same packed model, so exactness is
about this model. Biases, embeddings and norms stay fp32.

int8 (``int8w``, for drafts): per-output-channel int8 weights, each call's activations quantized
to int8 (one scale per call) and accumulated in int32 by fbgemm. Half the bytes of fp16 again; on
this CPU, one thread, a 0.5B layer costs 0.6-0.75x its fp16 time and the 152k-row output head
0.5-0.6x (``benchmarks/dtype_probe.py``). The rounding is coarser (about 2% relative error per
layer), which is harmless for a draft: speculative decoding is exact for any proposal
distribution, so a rougher draft costs acceptance, never correctness. The target stays fp16w.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from constrained_spec.errors import ModelLoadError


def packing_available(weights: str = "fp16") -> bool:
    """True where torch has fbgemm's packed linear for ``weights`` ("fp16" or "int8"; x86 CPU builds)."""
    op = {"fp16": "linear_prepack_fp16", "int8": "linear_prepack"}[weights]
    return "fbgemm" in torch.backends.quantized.supported_engines and hasattr(torch.ops.quantized, op)


class _PackedLinear(torch.nn.Module):
    """``y = x W^T + b`` with ``W`` packed for fbgemm (:meth:`_pack`, :meth:`_matmul` per kind);
    ``x``, ``b`` and ``y`` are fp32.

    ``weight`` keeps an fp16 copy only where asked (``keep_weight``): the draft's output head reads
    rows of it to compute logits for a few allowed tokens (``HFModel.extend_last``).
    """

    kind = ""
    bias: torch.Tensor | None  # a buffer (not saved with the module's state)

    def __init__(self, linear: torch.nn.Linear, keep_weight: bool = False) -> None:
        super().__init__()
        w = linear.weight.detach()
        if w.device.type != "cpu" or w.dtype != torch.float32:
            raise ModelLoadError(f"{self.kind} weight packing needs fp32 CPU weights, got {w.dtype} on {w.device}")
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        b = None if linear.bias is None else linear.bias.detach().float()
        self.register_buffer("bias", b, persistent=False)
        self._packed = self._pack(w, b)
        self.weight = w.half() if keep_weight else None

    def _pack(self, w: torch.Tensor, b: torch.Tensor | None) -> Any:
        raise NotImplementedError

    # -- storing the packed form (models.torch.packed_cache) -----------------------------------

    #: the stored tensors of this kind: name -> (dtype, shape as a function of (out, in))
    STORED: ClassVar[dict[str, tuple[torch.dtype, Any]]] = {}

    def stored_tensors(self) -> dict[str, torch.Tensor]:
        """The tensors :meth:`from_stored` rebuilds this layer from, bit for bit: the weight as
        fbgemm holds it (fp16, or int8 with its per-row scales), the bias if any, and ``weight_half``
        (the fp16 copy of :attr:`weight`) where one is kept and differs from the stored fp16 weight."""
        out = self._stored_weight()
        if self.bias is not None:
            out["bias"] = self.bias.contiguous()
        if self.weight is not None and not ("weight" in out and torch.equal(out["weight"], self.weight)):
            out["weight_half"] = self.weight.contiguous()
        return out

    def _stored_weight(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def _pack_stored(self, tensors: dict[str, torch.Tensor]) -> Any:
        raise NotImplementedError

    @classmethod
    def expected_tensors(cls, out_features: int, in_features: int, bias: bool) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
        """Name -> (dtype, shape) of the tensors a stored layer of this shape must have (the
        optional ``weight_half`` aside), to check a cache before it is loaded."""
        want = {k: (dt, shape(out_features, in_features)) for k, (dt, shape) in cls.STORED.items()}
        if bias:
            want["bias"] = (torch.float32, (out_features,))
        return want

    @classmethod
    def from_stored(
        cls, tensors: dict[str, torch.Tensor], in_features: int, out_features: int, keep_weight: bool = False
    ) -> _PackedLinear:
        """The layer :meth:`stored_tensors` gave, rebuilt without an fp32 weight: fbgemm packs the
        stored fp16 / int8 weight directly (its packed layout itself cannot be saved from Python).

        Raises :class:`ModelLoadError` when a tensor is missing or has the wrong dtype or shape.
        """
        want = cls.expected_tensors(out_features, in_features, "bias" in tensors)
        for name, (dtype, shape) in want.items():
            t = tensors.get(name)
            if t is None or t.dtype != dtype or tuple(t.shape) != shape:
                got = None if t is None else (t.dtype, tuple(t.shape))
                raise ModelLoadError(f"stored {cls.kind} layer: {name} should be {dtype} {shape}, got {got}")
        half = tensors.get("weight_half")
        if half is not None and (half.dtype != torch.float16 or tuple(half.shape) != (out_features, in_features)):
            raise ModelLoadError(f"stored {cls.kind} layer: weight_half has {half.dtype} {tuple(half.shape)}")
        layer = cls.__new__(cls)
        torch.nn.Module.__init__(layer)
        layer.in_features = in_features
        layer.out_features = out_features
        # small tensors that fbgemm keeps by reference are copied: the stored ones may be views of a
        # memory-mapped file; the weight itself fbgemm copies into its own layout
        tensors = {k: v.clone() if k in ("bias", "weight_scales") else v for k, v in tensors.items()}
        layer.register_buffer("bias", tensors.get("bias"), persistent=False)
        layer._packed = layer._pack_stored(tensors)
        layer.weight = None
        if keep_weight:
            kept = half if half is not None else tensors.get("weight")
            if kept is None:
                raise ModelLoadError(f"stored {cls.kind} layer has no fp16 copy of its weight to keep")
            layer.weight = kept.clone()
        return layer

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def dense_weight(self) -> torch.Tensor:
        """The weight fbgemm holds, as an fp32 tensor [out, in] (fp16 values, or int8 times the row
        scales): what a copy of this layer in another dtype starts from (``models.torch.prefill_twin``)."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = self._matmul(x.reshape(-1, shape[-1]).float())
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, {self.kind} packed"


class PackedFp16Linear(_PackedLinear):
    """A linear layer with fp16 weights packed for fbgemm; fp32 activations and accumulation."""

    kind = "fp16"

    STORED: ClassVar[dict[str, tuple[torch.dtype, Any]]] = {"weight": (torch.float16, lambda n, k: (n, k))}

    def _pack(self, w: torch.Tensor, b: torch.Tensor | None) -> Any:
        return torch.ops.quantized.linear_prepack_fp16(w, b)

    def _stored_weight(self) -> dict[str, torch.Tensor]:
        w, _ = torch.ops.quantized.linear_unpack_fp16(self._packed)  # fp32 holding fbgemm's fp16 values
        return {"weight": w.half().contiguous()}

    def _pack_stored(self, tensors: dict[str, torch.Tensor]) -> Any:
        # fbgemm takes the fp16 tensor as is: the values it holds are the stored ones
        return torch.ops.quantized.linear_prepack_fp16(tensors["weight"], tensors.get("bias"))

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.quantized.linear_dynamic_fp16(x, self._packed)

    def dense_weight(self) -> torch.Tensor:
        w, _ = torch.ops.quantized.linear_unpack_fp16(self._packed)
        return w.float()


class PackedInt8Linear(_PackedLinear):
    """A linear layer with int8 weights (one scale per output row) packed for fbgemm; ``x`` is
    quantized to int8 on each call (fbgemm's dynamic linear), accumulated in int32."""

    kind = "int8"

    def _pack(self, w: torch.Tensor, b: torch.Tensor | None) -> Any:
        import warnings

        scales = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
        zero_points = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # quantized tensors are deprecated but still fbgemm's input
            warnings.simplefilter("ignore")
            qweight = torch.quantize_per_channel(w, scales, zero_points, 0, torch.qint8)
            return torch.ops.quantized.linear_prepack(qweight, b)

    STORED: ClassVar[dict[str, tuple[torch.dtype, Any]]] = {
        "weight_int8": (torch.int8, lambda n, k: (n, k)),
        "weight_scales": (torch.float64, lambda n, k: (n,)),
    }

    def _stored_weight(self) -> dict[str, torch.Tensor]:
        q, _ = torch.ops.quantized.linear_unpack(self._packed)
        return {"weight_int8": q.int_repr().contiguous(), "weight_scales": q.q_per_channel_scales().contiguous()}

    def _pack_stored(self, tensors: dict[str, torch.Tensor]) -> Any:
        import warnings

        scales = tensors["weight_scales"]
        zero_points = torch.zeros(scales.shape[0], dtype=torch.long)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qweight = torch._make_per_channel_quantized_tensor(tensors["weight_int8"], scales, zero_points, 0)
            return torch.ops.quantized.linear_prepack(qweight, tensors.get("bias"))

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        # reduce_range: 7-bit activations, so AVX2's 16-bit pair sums cannot saturate
        return torch.ops.quantized.linear_dynamic(x, self._packed, True)

    def dense_weight(self) -> torch.Tensor:
        q, _ = torch.ops.quantized.linear_unpack(self._packed)
        return q.dequantize().float()


#: the packed linear class for each ``weights`` kind
PACKED = {"fp16": PackedFp16Linear, "int8": PackedInt8Linear}


def pack_linears(model: Any, keep_head_weight: bool = True, weights: str = "fp16") -> int:
    """Replace every ``nn.Linear`` of a CPU fp32 model by a packed linear (:class:`PackedFp16Linear`,
    or :class:`PackedInt8Linear` for ``weights="int8"``); return how many.

    The output head keeps an fp16 copy of its weight for restricted-head logits unless
    ``keep_head_weight`` is False (a target never needs it). Tied input
    embeddings stay fp32 (a lookup reads one row; they are not on the matmul path). Weights that
    transformers left memory-mapped from the safetensors file are let go as they are packed and
    the remaining tensors copied out of the mapping, so the fp32 file does not stay resident
    beside the packed copy (peak memory about the packed model plus one fp32 layer).
    """
    if weights not in PACKED:
        raise ModelLoadError(f"unknown weight packing {weights!r}; use fp16 or int8")
    if not packing_available(weights):
        raise ModelLoadError(f"{weights} weight packing needs a torch build with fbgemm (x86 CPU)")
    packed_linear = PACKED[weights]
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    mapped = file_mappings()
    shared: dict[int, int] = {}  # storage -> how many parameters use it (tied weights must not be let go)
    for t in model.parameters():
        key = t.untyped_storage().data_ptr()
        shared[key] = shared.get(key, 0) + 1
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, name, packed_linear(child, keep_weight=keep_head_weight and child is head))
                if shared.get(child.weight.untyped_storage().data_ptr(), 0) == 1:
                    release_pages(child.weight, mapped)
                count += 1
    for t in [*model.parameters(), *model.buffers()]:
        if _inside(t, mapped):  # copy out of the file mapping, then let the mapped pages go
            old = t.data
            t.data = old.clone()
            release_pages(old, mapped)
    return count


def file_mappings() -> list[tuple[int, int]]:
    """Address ranges of this process that map a file (Linux; empty elsewhere)."""
    try:
        with open("/proc/self/maps") as f:
            lines = f.readlines()
    except OSError:
        return []
    ranges = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[5].startswith("/"):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            ranges.append((lo, hi))
    return ranges


def _inside(t: torch.Tensor, ranges: list[tuple[int, int]]) -> bool:
    start = t.data_ptr()
    end = start + t.numel() * t.element_size()
    return t.numel() > 0 and any(lo <= start and end <= hi for lo, hi in ranges)


def release_pages(t: torch.Tensor, ranges: list[tuple[int, int]]) -> None:
    """Drop from this process the resident pages lying wholly inside a file-mapped tensor that is no
    longer used (MADV_DONTNEED: a later read would fault them in again from the file)."""
    if not _inside(t, ranges):
        return
    import ctypes
    import mmap

    page = mmap.PAGESIZE
    start = t.data_ptr()
    lo = -(-start // page) * page
    hi = (start + t.numel() * t.element_size()) // page * page
    if hi > lo:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), 4)  # MADV_DONTNEED
        except (OSError, AttributeError):
            pass
