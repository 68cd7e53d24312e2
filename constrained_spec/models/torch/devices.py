"""Where the models run: the ``--device`` names (``auto``, ``cpu``, ``cuda``, ``cuda:N``), what
``auto`` resolves to here, and which dtypes each device can load.

Light: nothing here imports torch at import time (the command line checks ``--device`` before
torch is loaded); :func:`resolve_device` and :func:`dtype_for_device` import it when called.
"""

from __future__ import annotations

from typing import Any

from constrained_spec.config import DEVICE_HELP, is_cuda, normalize_device
from constrained_spec.errors import ConfigError

__all__ = ["DEVICE_HELP", "dtype_for_device", "is_cuda", "normalize_device", "resolve_device", "same_device"]

def resolve_device(device: Any = "auto") -> str:
    """The concrete device a name means on this machine: ``"cpu"`` or ``"cuda:N"``.

    ``auto`` is CUDA (the current device) when ``torch.cuda.is_available()``, else the CPU. Asking
    for CUDA where torch sees none, or for a device index past the last one, is a ConfigError
    that says what torch sees.
    """
    import torch

    name = normalize_device(device)
    if name == "cpu":
        return "cpu"
    available = torch.cuda.is_available()
    if name == "auto":
        return f"cuda:{torch.cuda.current_device()}" if available else "cpu"
    if not available:
        built = getattr(torch.version, "cuda", None)
        why = f"torch {torch.__version__} was built without CUDA" if built is None else \
            f"torch {torch.__version__} (CUDA {built}) sees no GPU (driver missing, or CUDA_VISIBLE_DEVICES hides them)"
        raise ConfigError(f"device {name!r} was asked for but CUDA is not available: {why}; use --device cpu or auto")
    index = int(name.split(":", 1)[1]) if ":" in name else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise ConfigError(f"device {name!r} was asked for but torch sees {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
    return f"cuda:{index}"


def same_device(a: Any, b: Any) -> bool:
    """Whether two devices are the same, ``cuda`` meaning the current CUDA device."""
    import torch

    def canonical(d: Any) -> Any:
        d = torch.device(d)
        if d.type == "cuda" and d.index is None:
            return torch.device("cuda", torch.cuda.current_device())
        return d

    return bool(canonical(a) == canonical(b))


def dtype_for_device(dtype: Any, role: str, device: str) -> str:
    """The concrete dtype tag a model of ``role`` loads in on the resolved ``device``.

    ``auto`` follows :func:`~constrained_spec.models.torch.dtypes.auto_dtype` for that device (bf16 or
    fp16 on CUDA; fbgemm-packed on the CPU). The packed tags (``fp16w``, ``int8w``) are fbgemm
    layouts that run on the CPU only: asked for on CUDA they are a ConfigError naming the ones that work.
    """
    from constrained_spec.models.torch.dtypes import PACKED_TAGS, auto_dtype, normalize_dtype

    tag = normalize_dtype(dtype)
    if tag == "auto":
        return auto_dtype(role, device)
    if is_cuda(device) and tag in PACKED_TAGS:
        raise ConfigError(f"dtype {tag!r} is a CPU-only layout (linear weights packed for fbgemm) and cannot run on {device}; "
                          "on CUDA use bf16, fp16, fp32 or auto (bf16 where the GPU supports it)")
    return tag
