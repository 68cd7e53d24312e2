"""Model dtypes: the ``--dtype`` names and their normal forms, the torch dtype each tag is loaded in,
and what ``auto`` picks for a model role.

Light: nothing here imports torch at import time (the command line reads :data:`DTYPE_CHOICES`
and :func:`normalize_dtype` before torch is loaded).
"""

from __future__ import annotations

from typing import Any

from constrained_spec.config import DTYPE_CHOICES, PACKED_TAGS, normalize_dtype
from constrained_spec.errors import ModelLoadError

__all__ = [
    "DTYPE_CHOICES",
    "PACKED_TAGS",
    "auto_dtype",
    "concrete_dtype",
    "normalize_dtype",
    "storage_dtype",
    "torch_dtype_of",
]

def torch_dtype_of(tag: str) -> Any:
    """The torch dtype that a tag's model is loaded in (that of :func:`storage_dtype`)."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[storage_dtype(tag)]


def storage_dtype(tag: str) -> str:
    """The dtype of a tag's converted (transformers) folder: ``fp32`` for ``fp16w``/``int8w``, whose
    packing starts from the fp32 weights (the packed cache itself holds fp16 / int8)."""
    return "fp32" if tag in PACKED_TAGS else tag


def auto_dtype(role: str = "target", device: str | None = None) -> str:
    """The dtype that ``dtype="auto"`` picks for a role ("draft" or "target") on ``device`` (a
    device name; None: where ``device="auto"`` would load, CUDA when torch sees a GPU).

    On CUDA: ``bf16`` where the GPU supports it (Ampere and later), else ``fp16`` (fbgemm packing
    is CPU-only, and fp32 would double the bytes every forward reads). On the CPU: where fbgemm is
    available, ``int8w`` for a draft and ``fp16w`` otherwise; else fp32.

    int8w for drafts, measured on this project's CPU with one thread (``python
    benchmarks/dtype_probe.py --models qwen2.5-coder-0.5b --dtypes fp16w int8w --threads 1 --new 1 2 6``):
    the 0.5B's forward of 1 / 2 / 6 tokens costs 69 / 75 / 90 ms against 97 / 113 / 143 ms in fp16w
    (0.63-0.71x). Its logits move more (activations are rounded per call), which can only lower
    acceptance: the draft's q is whatever it computes, and the construction is exact for any q.
    On the 8 bench prompts (greedy, k5 + grammar + lookup) acceptance stayed within a token per
    prompt and the draft's seconds fell to 0.7-0.9x. A target is never int8 unless asked: its
    rounding would change the distribution that the output follows.

    fp16w (fp16 weights packed for fbgemm, fp32 activations), measured on this project's CPU with 2
    threads, one cached forward of 1 / 3 / 5 / 8 new tokens on ~200 tokens of context:
    1.5B 116 / 151 / 165 / 260 ms against fp32 328 / 1060 / 909 / 853 ms; 0.5B 53 / 71 / 74 / 107 ms
    against 131 / 384 / 361 / 294 ms. It is faster for every role and block size: MKL's fp32 GEMM
    re-reads the weights for each of a few rows, fbgemm reads half the bytes once. The rounding
    moves the 1.5B's logits by at most ~0.04 (greedy choices unchanged on the probe); target-only and
    speculative decoding use the same packed model. The older fp32 / bf16 measurements:

    Measured with ``python benchmarks/dtype_probe.py`` (one cached forward on ~200 tokens of context):

    * this project's CPU (AMD EPYC, AVX2 only: no AVX512-BF16, no AMX), ``--threads 1``, CPU ms
      per forward of n = 1 / 2 / 3 / 5 / 9 tokens, fp32 vs bf16:
      0.5B 158 / 288 / 406 / 373 / 438 vs 144 / 243 / 361 / 544 / 939;
      1.5B 419 / 835 / 1141 / 1184 / 1356 vs 377 / 661 / 961 / 1555 / 2740.
      bf16 saves about 10% on 1-3 tokens and costs 30-100% more on 5-9-token verifies.
    * a CPU with AMX (MODELS.md): bf16 makes a verify of up to 9 tokens cost about one
      single-token forward (target ~260-300 ms against fp32 323 / 591 / 750 ms for 1 / 4 / 9 tokens);
      the draft's single-token forwards cost the same in both.
    * exactness: the logits of one 5- or 9-token forward differ from the same tokens fed one at a
      time by at most ~1e-4 in fp32 but ~0.16-0.19 in bf16, enough to flip greedy choices at
      near-ties, so greedy speculative output can part from greedy target-only output in bf16.

    So fp32 for the target (exact greedy identity, and cheaper verifies on AVX2) and fp32 for the
    draft too: bf16 would save ~10% of its single-token forwards here (nothing on AMX), within the
    noise of a busy machine and at some risk to acceptance. ``dtype="bf16"`` stays available: for
    the target on an AMX CPU it buys much cheaper verifies at the price of exactness.
    """
    if role not in {"draft", "target", "single"}:
        raise ModelLoadError(f"unknown model role {role!r}; use 'draft' or 'target'")
    import torch

    from constrained_spec.models.torch.packed_linear import packing_available

    on_cuda = torch.cuda.is_available() if device is None else str(device).startswith("cuda")
    if on_cuda:
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp16"
    if not packing_available():
        return "fp32"
    return "int8w" if role == "draft" and packing_available("int8") else "fp16w"


def concrete_dtype(dtype: Any, role: str) -> str:
    """The tag that ``dtype`` names, ``auto`` replaced by :func:`auto_dtype`'s pick for ``role``."""
    tag = normalize_dtype(dtype)
    return auto_dtype(role) if tag == "auto" else tag
