"""Forward costs measured on this host, cached on disk per host, models, runtime and threads.

The draft plan (``engine.draft_plan``, ``engine.plan_costs``) weighs what the draft model costs
against what it saves, in units of one target forward; those ratios are the host's, the runtime's
and the models' (a verify of 6 tokens costs 1.98x one token with fp16w torch on an AVX512 CPU, about
1.4x on an AVX2 one; llama.cpp's Q4_K grows about linearly). They are measured once, right after a
load, and kept here: a later load with the same key reads them, so it times nothing and decides the
same way (a seed gives the same sample run after run on that host).

The key (:func:`cost_key`): the host (CPU model string, the instruction-set flags that change the
kernels, core count, machine), the runtime and its version (torch or llama.cpp), each model's
identity (class, name or file, shape, weight dtypes and layouts) and the thread count. One small
JSON file per key under ``<cache root>/host-costs/`` (:func:`constrained_spec.paths.cache_root`:
``cache_dir``, else ``$CONSTRAINED_SPEC_CACHE``, else the user cache folder), holding the key itself,
the figures and the date measured. A file that is unreadable, of another format, or whose key
differs is treated as absent (measured again and overwritten); deleting the folder resets it all.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from constrained_spec.paths import cache_root

__all__ = ["COST_FOLDER", "FORMAT", "cost_key", "cost_path", "host_fingerprint", "model_identity", "read_costs", "write_costs"]

#: the folder under the cache root
COST_FOLDER = "host-costs"
#: the file format (a file of another format is measured again)
FORMAT = 1
#: CPU flags that change which kernels run (a host with the same model string may lack them)
_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16",
          "amx_int8", "asimd", "sve")


def _cpuinfo() -> tuple[str, list[str]]:
    """The CPU's model string and its flags of :data:`_FLAGS` (Linux; elsewhere platform's)."""
    model, flags = platform.processor() or "", set()
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return model, []
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "hardware", "cpu model") and value.strip():
            model = value.strip()
        elif name in ("flags", "features"):
            flags |= set(value.split())
        if model and flags:
            break
    return model, sorted(flags & set(_FLAGS))


def host_fingerprint() -> dict[str, Any]:
    """What identifies this host's CPU for cost purposes: model string, kernel-relevant flags, cores, machine."""
    model, flags = _cpuinfo()
    return {"cpu": model, "flags": flags, "cores": os.cpu_count() or 0, "machine": platform.machine()}


def model_identity(model: Any) -> str:
    """A model's identity for its costs: a GGUF's file name and size (llama.cpp), else the wrapped
    module's class, name, shape and the dtypes and classes of its weights (torch). Random weights of
    the same shape share an identity: costs depend on the shape and layout, not the values."""
    weights = getattr(model, "weights", None)
    if weights is not None and hasattr(weights, "path"):
        path = Path(weights.path)
        size = path.stat().st_size if path.exists() else 0
        return f"gguf:{path.name}:{size}"
    inner = getattr(model, "model", model)
    config = getattr(model, "config", None) or getattr(inner, "config", None)
    parts = [type(inner).__name__, Path(str(getattr(config, "_name_or_path", "") or "")).name]
    parts += [str(getattr(config, name, "")) for name in ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")]
    try:
        params = list(inner.parameters()) + list(inner.buffers())
        parts.append(str(sum(p.numel() for p in params)))
        parts.append("/".join(sorted({str(p.dtype).replace("torch.", "") for p in params})))
        parts.append("/".join(sorted({type(m).__name__ for m in inner.modules() if "linear" in type(m).__name__.lower()})))
    except (AttributeError, TypeError):
        pass
    return ":".join(parts)


def runtime_identity(model: Any) -> str:
    """The runtime running ``model`` and its version: ``llamacpp <version>`` or ``torch <version>``."""
    if hasattr(getattr(model, "weights", None), "path"):
        try:
            import llama_cpp

            return f"llamacpp {getattr(llama_cpp, '__version__', '?')}"
        except ImportError:
            return "llamacpp ?"
    import torch

    return f"torch {torch.__version__}"


def _threads(model: Any) -> int:
    threads = getattr(getattr(model, "weights", None), "threads", None)
    if threads is not None:
        return int(threads)
    import torch

    return torch.get_num_threads()


def cost_key(target: Any, draft: Any, what: str) -> dict[str, Any]:
    """The key of a target/draft pair's costs on this host (``what``: the measurement's name and version)."""
    return {"format": FORMAT, "what": what, "host": host_fingerprint(), "runtime": runtime_identity(target),
            "threads": _threads(target), "target": model_identity(target), "draft": model_identity(draft),
            "device": str(getattr(target, "device", "cpu"))}


def cost_path(key: dict[str, Any], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The file holding ``key``'s figures."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_root(cache_dir) / COST_FOLDER / f"{digest}.json"


def read_costs(key: dict[str, Any], cache_dir: str | os.PathLike[str] | None = None) -> tuple[dict[str, Any], str] | None:
    """The figures cached for ``key`` and the date they were measured; None where there are none,
    the file cannot be read or parsed, or it holds another key."""
    path = cost_path(key, cache_dir)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("figures"), dict):
        return None
    return data["figures"], str(data.get("measured", ""))


def write_costs(key: dict[str, Any], figures: dict[str, Any], measured: str, cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Cache ``figures`` for ``key`` (written whole, then renamed into place); None where the
    cache folder cannot be written (the figures still serve this process)."""
    path = cost_path(key, cache_dir)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"key": key, "figures": figures, "measured": measured}, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    except OSError:  # a full disk: no half file is left behind
        tmp.unlink(missing_ok=True)
        return None
    return path
