"""GGUF -> safetensors conversion for the unpacked dtypes (``fp32``, ``bf16``, ``fp16``).

:func:`ensure_converted` dequantizes the fetched GGUF once with transformers (or casts an existing
fp32 conversion) and saves a safetensors folder: model, tokenizer and :data:`META_FILE`, which
records what the folder holds. The folder is written aside and renamed into place under a file lock.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.store.cache import cache_dir as _root
from constrained_spec.models.store.cache import chmod_default, file_lock, known_source, publish
from constrained_spec.models.store.fetch import fetch_gguf
from constrained_spec.models.store.integrity import check_folder, check_room, fsync_tree, no_space, record_folder, refreshed, replace_json, write_error
from constrained_spec.models.store.sources import ModelSource
from constrained_spec.models.torch.dtypes import concrete_dtype, storage_dtype, torch_dtype_of

__all__ = ["META_FILE", "clear_quantizer", "converted_dir", "converted_ok", "ensure_converted"]

META_FILE = "constrained_spec_model.json"
_META_VERSION = 1

logger = logging.getLogger("constrained_spec")


def converted_dir(
    name: str, dtype: Any = "auto", cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Where the converted safetensors folder of a short name and dtype lives (may not exist yet)."""
    src = known_source(name)
    return _root(cache_dir) / "converted" / f"{src.name}-{storage_dtype(concrete_dtype(dtype, src.role))}"


def _read_meta(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / META_FILE).read_text())
    except (OSError, ValueError):
        return None


def converted_ok(folder: Path, src: ModelSource, tag: str) -> bool:
    """Whether ``folder`` is a complete conversion of ``src`` in ``tag``, its files as they were
    written (size and mtime, the sha256 where only the mtime changed; :mod:`.integrity`). A damaged
    folder is reported in a warning (the caller converts again). Folders written before the files were
    recorded are checked for their metadata and ``config.json`` only."""
    meta = _read_meta(folder)
    if not (
        meta
        and meta.get("gguf_sha256") == src.sha256
        and meta.get("dtype") == tag
        and (folder / "config.json").is_file()
    ):
        return False
    if "files" not in meta:
        return True
    verdict = check_folder(folder, meta["files"])
    if not verdict.ok:
        logger.warning(f"converted model {folder} is damaged ({verdict.reason}); converting it again")
        return False
    if verdict.rehashed:  # moved or copied: same bytes, new mtimes; record them so later loads stay cheap
        _write_meta(folder, {**meta, "files": refreshed(folder, meta["files"])})
    return True


def _write_meta(folder: Path, meta: dict[str, Any]) -> None:
    replace_json(folder / META_FILE, meta)


def clear_quantizer(model: Any) -> None:
    """Drop the GGUF quantizer marks so that ``save_pretrained`` writes plain (dequantized) weights."""
    model.hf_quantizer = None
    model.is_quantized = False
    for cfg in (model.config, *[getattr(model.config, k) for k in getattr(model.config, "sub_configs", {})]):
        if cfg is None:
            continue
        if hasattr(cfg, "quantization_config"):
            try:
                delattr(cfg, "quantization_config")
            except AttributeError:
                cfg.quantization_config = None


def ensure_converted(
    name: str,
    cache_dir: str | os.PathLike[str] | None = None,
    dtype: Any = "auto",
    progress: bool = True,
) -> Path:
    """Return a safetensors folder (model + tokenizer) of a short name in ``dtype``, making it if needed.

    The GGUF is fetched (:func:`fetch_gguf`) and dequantized once; an existing fp32 conversion is
    used as the source instead when it exists (it holds the dequantized weights exactly). The folder
    records what it holds in ``constrained_spec_model.json`` (``dtype``, the GGUF sha256, versions).
    It is written to a temporary folder and renamed into place under a file lock.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = known_source(name)
    tag = storage_dtype(concrete_dtype(dtype, src.role))
    root = _root(cache_dir)
    folder = root / "converted" / f"{src.name}-{tag}"
    if converted_ok(folder, src, tag):
        return folder
    with file_lock(root / "locks" / f"converted-{src.name}-{tag}.lock"):
        if converted_ok(folder, src, tag):
            return folder
        fp32 = root / "converted" / f"{src.name}-fp32"
        t0 = time.perf_counter()
        if tag != "fp32" and converted_ok(fp32, src, "fp32"):
            origin = f"converted/{fp32.name}"
            if progress:
                logger.info(f"casting {src.name} fp32 -> {tag} ...")
            model = AutoModelForCausalLM.from_pretrained(
                fp32, dtype=torch_dtype_of(tag), local_files_only=True
            )
            tokenizer = AutoTokenizer.from_pretrained(fp32, local_files_only=True)
        else:
            gguf = fetch_gguf(src.name, root, progress)
            origin = f"gguf/{gguf.name}"
            if progress:
                logger.info(f"converting {src.name} from GGUF to {tag} safetensors "
                    "(dequantizes once; takes a minute or two) ...")
            try:
                tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
                model = AutoModelForCausalLM.from_pretrained(
                    gguf.parent, gguf_file=gguf.name, dtype=torch.float32
                )
            except Exception as exc:
                raise ModelLoadError(f"transformers could not load {gguf}: {exc}") from exc
            clear_quantizer(model)
            if tag != "fp32":
                model = model.to(torch_dtype_of(tag))
        load_s = time.perf_counter() - t0
        clear_quantizer(model)
        model.config.dtype = torch_dtype_of(tag)

        folder.parent.mkdir(parents=True, exist_ok=True)
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        check_room(folder.parent, weights + (64 << 20), f"the {tag} conversion of {src.name}")
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
        chmod_default(tmp, 0o777)
        try:
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            import transformers

            meta = {
                "meta_version": _META_VERSION,
                "name": src.name,
                "title": src.title,
                "role": src.role,
                "dtype": tag,
                "torch_dtype": str(torch_dtype_of(tag)).replace("torch.", ""),
                "gguf_file": src.gguf_filename,
                "gguf_sha256": src.sha256,
                "converted_from": origin,
                "packages": list(src.packages),
                "vocab_size": src.vocab_size,
                "architecture": type(model).__name__,
                "num_parameters": int(sum(p.numel() for p in model.parameters())),
                "transformers_version": transformers.__version__,
                "torch_version": torch.__version__,
                "load_seconds": round(load_s, 1),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            del model
            meta["files"] = record_folder(tmp)  # what loads check (size, mtime, sha256)
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
            fsync_tree(tmp)
            publish(tmp, folder)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError) or no_space(exc):
                raise write_error(exc, tmp / "model.safetensors", f"the {tag} conversion of {src.name}") from exc
            raise
        return folder

