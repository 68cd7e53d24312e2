"""Which runtime runs a model given by spec: ``torch`` (transformers) or ``llamacpp`` (llama.cpp on a GGUF).

Light on purpose (the config imports it): nothing here loads torch or the llama.cpp library.
"""

from __future__ import annotations

import importlib.util
import logging
import os

from constrained_spec.config import RUNTIMES
from constrained_spec.errors import ConfigError

__all__ = ["CPU_DEFAULT", "RUNTIMES", "gguf_spec", "llamacpp_installed", "resolve_runtime"]

logger = logging.getLogger("constrained_spec")


#: what ``auto`` picks on the CPU for a GGUF-backed spec (a short offline name or a ``.gguf`` file),
#: by measurement on the held-out workload (docs/llamacpp.md; 2026-12-03, 2 threads, greedy, one
#: interleaved run on the 2-core AVX2 host: the default mode on llama.cpp 1.18x end to end (p50) and
#: 1.45x in decode against the default mode on torch, 3.1 GB against 6.3 GB, loads in 8 s against 49 s)
CPU_DEFAULT = "llamacpp"

_warned: set[str] = set()


def llamacpp_installed() -> bool:
    """Whether the ``llama_cpp`` package (llama-cpp-python) is installed (found, not imported)."""
    return importlib.util.find_spec("llama_cpp") is not None


def gguf_spec(spec: str) -> bool:
    """Whether ``spec`` names a GGUF: a short offline name (not shadowed by a local path) or a ``.gguf`` file."""
    from constrained_spec.models.store.sources import lookup

    if lookup(spec) is not None and not os.path.exists(spec):
        return True
    return spec.lower().endswith(".gguf") and os.path.isfile(os.path.expanduser(spec))


def resolve_runtime(runtime: str, spec: str, device: str, dtype: str = "auto", batched: bool = False) -> str:
    """The concrete runtime (``torch`` / ``llamacpp``) for ``spec`` on the resolved ``device``.

    ``llamacpp`` asked for runs on the CPU only and takes the GGUF as stored (``dtype`` must stay
    ``auto``). ``auto`` picks :data:`CPU_DEFAULT` for a GGUF-backed spec on the CPU with ``dtype="auto"``
    and no continuous batching (``batched``: at 8 clients on the held-out prompts, 2026-12-04, llama.cpp's
    rows gave 5.80 tok/s against torch's 6.60, docs/results/2026-12-04-concurrency-heldout-llamacpp-vs-torch),
    torch otherwise; where that default is ``llamacpp`` but llama-cpp-python is not installed, it
    falls back to torch with a one-line warning.
    """
    if runtime not in RUNTIMES:
        raise ConfigError(f"unknown runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
    if runtime == "torch":
        return "torch"
    if runtime == "llamacpp":
        if device != "cpu":
            raise ConfigError(f"the llamacpp runtime runs on the CPU only, not on {device}: use runtime='torch' there")
        if str(dtype) != "auto":
            raise ConfigError(f"dtype {dtype!r} applies to the torch runtime; llamacpp runs the GGUF as stored (leave dtype auto)")
        return "llamacpp"
    if CPU_DEFAULT != "llamacpp" or batched or device != "cpu" or str(dtype) != "auto" or not gguf_spec(spec):
        return "torch"
    if not llamacpp_installed():
        if "missing" not in _warned:
            _warned.add("missing")
            logger.warning("llama-cpp-python is not installed: running on torch (slower on this CPU; `make install-llamacpp` builds it)")
        return "torch"
    return "llamacpp"
