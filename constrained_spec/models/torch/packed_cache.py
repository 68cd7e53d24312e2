"""The packed cache of the packed dtypes that the CPU loop uses (``fp16w``, ``int8w``: the defaults on
x86 CPUs).

:func:`load_packed` dequantizes the GGUF once, packs it and keeps the packed form
(:data:`PACKED_FILE`: each linear weight as fbgemm holds it, fp16 or int8 with per-row scales, and
the other parameters in fp32) with the config and the tokenizer (``tokenizer.json``: loads in about a
second, against 14-18 s of GGUF tokenizer parsing). Later loads build the model with empty (meta)
parameters and fill it from that file: no fp32 weight is made or kept (only fbgemm's own packing runs
again: its packed layout cannot be saved from Python, and it is most of a load). The fp32 conversion
that older versions kept (9 GB for the default pair) is deleted.

A packed folder is loaded only when its metadata (:data:`PACKED_META`, written last) names this
model, dtype, torch version and format and its file has the recorded size, header and tensor shapes;
otherwise it is rebuilt, with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
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
from constrained_spec.models.store.shared_tokenizers import shared_tokenizer
from constrained_spec.models.store.sources import ModelSource
from constrained_spec.models.torch.convert import clear_quantizer, converted_ok
from constrained_spec.models.torch.dtypes import PACKED_TAGS, concrete_dtype

__all__ = ["PACKED_FILE", "PACKED_FORMAT", "PACKED_META", "ensure_packed", "load_packed", "packed_dir"]

log = logging.getLogger(__name__)
logger = logging.getLogger("constrained_spec")

#: the version of the packed cache's layout; a folder of another version is never loaded
PACKED_FORMAT = 1
PACKED_FILE = "packed.safetensors"
PACKED_META = "constrained_spec_packed.json"  # written last: the folder's completion marker

#: safetensors' names of the dtypes the packed cache stores
_ST_DTYPES = {"float16": "F16", "float32": "F32", "float64": "F64", "int8": "I8", "bfloat16": "BF16"}


class _CacheInvalid(Exception):
    """A packed cache folder that must not be loaded (incomplete, stale, corrupt or of another format)."""


def _torch_tag() -> str:
    import torch

    return re.sub(r"[^0-9A-Za-z.]+", "_", torch.__version__)


def packed_dir(name: str, dtype: Any = "auto", cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the packed cache of a short name lives for a packed dtype (``fp16w``/``int8w``).

    The name holds the model, the dtype, the torch version (fbgemm's packing and quantization
    belong to it) and :data:`PACKED_FORMAT`: ``packed/<name>-<dtype>-torch<version>-f<format>``.
    """
    src = known_source(name)
    tag = concrete_dtype(dtype, src.role)
    if tag not in PACKED_TAGS:
        raise ModelLoadError(f"{tag} is not a packed dtype; use one of {', '.join(PACKED_TAGS)}")
    return _root(cache_dir) / "packed" / f"{src.name}-{tag}-torch{_torch_tag()}-f{PACKED_FORMAT}"


def _write_safetensors(path: Path, tensors: dict[str, Any]) -> int:
    """Write ``tensors`` in the safetensors format, one tensor at a time (no second copy of the
    whole model in memory, as ``safetensors.torch.save_file`` makes); fsync; return the bytes."""
    import torch

    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for key, t in tensors.items():
        dt = _ST_DTYPES[str(t.dtype).replace("torch.", "")]
        size = t.numel() * t.element_size()
        header[key] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for t in tensors.values():
            if t.numel():
                f.write(memoryview(t.detach().contiguous().view(-1).view(torch.uint8).numpy()))
        f.flush()
        os.fsync(f.fileno())
    return 8 + len(raw) + offset


def _linear_paths(model: Any, cls: type) -> dict[str, Any]:
    return {name: m for name, m in model.named_modules() if isinstance(m, cls)}


def _save_packed(folder: Path, model: Any, tokenizer: Any, src: ModelSource, tag: str, origin: str) -> None:
    """Write a packed model (every linear a packed layer, the rest fp32) into ``folder``: the
    packed layers' stored tensors and the other parameters in one safetensors file, the config,
    the tokenizer (``tokenizer.json``: a fast load) and, last, the metadata that marks it complete."""
    import torch
    import transformers

    from constrained_spec.models.torch.packed_linear import PACKED

    model.config.dtype = torch.float32
    kind = PACKED_TAGS[tag]
    layers = _linear_paths(model, PACKED[kind])
    tensors: dict[str, Any] = {}
    manifest: dict[str, Any] = {}
    for path, layer in layers.items():
        stored = layer.stored_tensors()
        manifest[path] = {"in": layer.in_features, "out": layer.out_features, "bias": layer.bias is not None,
                          "weight_half": "weight_half" in stored}
        tensors.update({f"{path}.{k}": v for k, v in stored.items()})
    params = {}
    for key, t in model.state_dict().items():
        if t.dtype != torch.float32:
            raise ModelLoadError(f"packed cache: {key} is {t.dtype}, expected fp32")
        params[key] = t
    clash = set(params) & set(tensors)
    if clash:
        raise ModelLoadError(f"packed cache: names used twice: {sorted(clash)[:3]}")
    tensors.update(params)
    check_room(folder, sum(t.numel() * t.element_size() for t in tensors.values()) + (64 << 20), f"the packed {tag} cache of {src.name}")
    nbytes = _write_safetensors(folder / PACKED_FILE, tensors)
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    meta = {
        "format": PACKED_FORMAT,
        "name": src.name,
        "role": src.role,
        "dtype": tag,
        "packing": kind,
        "gguf_file": src.gguf_filename,
        "gguf_sha256": src.sha256,
        "converted_from": origin,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "file_bytes": nbytes,
        "layers": manifest,
        "params": {k: list(v.shape) for k, v in params.items()},
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    meta["files"] = record_folder(folder)  # what loads check (size, mtime, sha256)
    (folder / PACKED_META).write_text(json.dumps(meta) + "\n")
    fsync_tree(folder)


def _packed_meta(folder: Path, src: ModelSource, tag: str) -> dict[str, Any]:
    """The metadata of a complete packed folder for this model, dtype, torch and format, else raise."""
    import torch

    try:
        meta = json.loads((folder / PACKED_META).read_text())
    except FileNotFoundError:
        raise _CacheInvalid("no completion marker") from None
    except (OSError, ValueError) as exc:
        raise _CacheInvalid(f"unreadable metadata: {exc}") from None
    want = {"format": PACKED_FORMAT, "name": src.name, "dtype": tag, "gguf_sha256": src.sha256,
            "torch_version": torch.__version__}
    for key, value in want.items():
        if not isinstance(meta, dict) or meta.get(key) != value:
            raise _CacheInvalid(f"{key} is {meta.get(key) if isinstance(meta, dict) else None!r}, not {value!r}")
    try:
        size = (folder / PACKED_FILE).stat().st_size
    except OSError as exc:
        raise _CacheInvalid(f"no weights file: {exc}") from None
    if size != meta.get("file_bytes"):
        raise _CacheInvalid(f"{PACKED_FILE} has {size} bytes, expected {meta.get('file_bytes')} (truncated?)")
    if "files" in meta:  # folders written before the files were recorded are checked by size alone
        verdict = check_folder(folder, meta["files"])
        if not verdict.ok:
            raise _CacheInvalid(verdict.reason)
        if verdict.rehashed:  # moved or copied: same bytes, new mtimes; recorded so later loads stay cheap
            meta = {**meta, "files": refreshed(folder, meta["files"])}
            replace_json(folder / PACKED_META, meta)
    return meta


def _empty_model(folder: Path) -> Any:
    """The model of ``folder``'s config with its parameters on the meta device (no memory, no
    random init); buffers computed from the config (rotary frequencies) are real."""
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    with init_empty_weights(include_buffers=False):
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


def _load_packed_folder(folder: Path, meta: dict[str, Any], keep_head_weight: bool, workers: int | None = None) -> tuple[Any, Any]:
    """Load a packed folder: an empty model whose linears become packed layers built from the stored
    fp16 / int8 weights (in ``workers`` threads: fbgemm's packing is most of the time, and it runs
    without the GIL), and whose other parameters are the stored fp32 tensors. Raises
    :class:`_CacheInvalid` when the file does not hold what the model needs."""
    import torch
    from safetensors import safe_open

    from constrained_spec.models.torch.packed_linear import PACKED, file_mappings, release_pages

    cls = PACKED[meta["packing"]]
    model = _empty_model(folder)
    head = model.get_output_embeddings()
    linears = {p: m for p, m in model.named_modules() if type(m) is torch.nn.Linear}
    if set(linears) != set(meta["layers"]):
        raise _CacheInvalid("the stored layers are not the model's linear layers")
    owned = {f"{p}.{n}" for p in linears for n, _ in linears[p].named_parameters(recurse=False)}
    params = {k: v for k, v in model.state_dict().items() if k not in owned}
    try:
        f = safe_open(str(folder / PACKED_FILE), framework="pt")
        keys = set(f.keys())
    except Exception as exc:  # noqa: BLE001 - safetensors' error types vary by version
        raise _CacheInvalid(f"unreadable {PACKED_FILE}: {exc}") from None
    expected: set[str] = set(params)
    for path, lin in linears.items():
        info = meta["layers"][path]
        if (info["in"], info["out"], info["bias"]) != (lin.in_features, lin.out_features, lin.bias is not None):
            raise _CacheInvalid(f"layer {path} has another shape in the cache")
        names = cls.expected_tensors(lin.out_features, lin.in_features, lin.bias is not None)
        expected |= {f"{path}.{k}" for k in names} | ({f"{path}.weight_half"} if info["weight_half"] else set())
    if keys != expected:
        raise _CacheInvalid(f"{len(keys ^ expected)} tensors missing or unexpected, e.g. {sorted(keys ^ expected)[:3]}")

    mapped = file_mappings()  # the file's pages are let go once copied (else they count as resident)

    def build(path: str, lin: Any, tensors: dict[str, Any]) -> Any:
        layer = cls.from_stored(tensors, lin.in_features, lin.out_features, keep_weight=keep_head_weight and lin is head)
        for t in tensors.values():
            release_pages(t, mapped)
        return layer

    def read(name: str, shape: Any = None) -> Any:
        t = f.get_tensor(name)
        if shape is not None and tuple(t.shape) != tuple(shape):
            raise _CacheInvalid(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
        return t

    from concurrent.futures import ThreadPoolExecutor

    workers = max(1, workers or torch.get_num_threads())
    modules = dict(model.named_modules())
    try:
        with ThreadPoolExecutor(workers) as pool:
            pending = []
            # largest first: the output head alone packs for seconds, so it must not come last
            for path, lin in sorted(linears.items(), key=lambda kv: -kv[1].in_features * kv[1].out_features):
                prefix = f"{path}."
                tensors = {k[len(prefix):]: read(k) for k in sorted(keys) if k.startswith(prefix) and "." not in k[len(prefix):]}
                pending.append((path, pool.submit(build, path, lin, tensors)))
                while len(pending) > 2 * workers:  # bound the stored tensors waiting in memory
                    _install(modules, *_done(pending.pop(0)))
            for item in pending:
                _install(modules, *_done(item))
        for key, ref in params.items():  # copied out of the file mapping, which is let go on return
            stored = read(key, ref.shape)
            _set_tensor(model, key, stored.clone())
            release_pages(stored, mapped)
    except ModelLoadError as exc:
        raise _CacheInvalid(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - a damaged file surfaces as safetensors' or torch's own errors
        raise _CacheInvalid(f"{type(exc).__name__}: {exc}") from None
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):
        raise _CacheInvalid("some parameters were not in the cache")
    model.eval()
    try:
        tokenizer = shared_tokenizer(folder)
    except Exception as exc:  # noqa: BLE001
        raise _CacheInvalid(f"tokenizer: {exc}") from None
    return model, tokenizer


def _done(item: tuple[str, Any]) -> tuple[str, Any]:
    path, future = item
    return path, future.result()


def _install(modules: dict[str, Any], path: str, layer: Any) -> None:
    parent_name, _, child = path.rpartition(".")
    setattr(modules[parent_name], child, layer)


def _set_tensor(model: Any, key: str, value: Any) -> None:
    import torch

    module_name, _, attr = key.rpartition(".")
    module = model.get_submodule(module_name)
    if attr in module._parameters:
        module._parameters[attr] = torch.nn.Parameter(value, requires_grad=module._parameters[attr].requires_grad)
    elif attr in module._buffers:
        module._buffers[attr] = value
    else:
        raise _CacheInvalid(f"{key} is neither a parameter nor a buffer of the model")


def _fp32_source(src: ModelSource, root: Path, progress: bool) -> tuple[Any, Any, str]:
    """The fp32 model and tokenizer to pack: an existing fp32 conversion (faster to read), else the
    GGUF dequantized by transformers."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fp32 = root / "converted" / f"{src.name}-fp32"
    if converted_ok(fp32, src, "fp32"):
        model = AutoModelForCausalLM.from_pretrained(fp32, dtype=torch.float32, local_files_only=True)
        return model, AutoTokenizer.from_pretrained(fp32, local_files_only=True), f"converted/{fp32.name}"
    gguf = fetch_gguf(src.name, root, progress)
    if progress:
        logger.info(f"converting {src.name} from GGUF (dequantizes once; a minute or two) ...")
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except Exception as exc:
        raise ModelLoadError(f"transformers could not load {gguf}: {exc}") from exc
    return model, tokenizer, f"gguf/{gguf.name}"


def _drop_stale(folder: Path, src: ModelSource, tag: str) -> None:
    """Remove what a packed build replaces: packed folders of this model and dtype for another torch
    version or format, and the fp32 conversion (the intermediate that older versions kept, 2.4 / 6.7
    GB for the default pair; ``--dtype fp32`` makes it again from the GGUF)."""
    for old in folder.parent.glob(f"{src.name}-{tag}-torch*"):
        if old != folder and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    fp32 = folder.parent.parent / "converted" / f"{src.name}-fp32"
    if fp32.is_dir():
        shutil.rmtree(fp32, ignore_errors=True)


def _build_packed(folder: Path, src: ModelSource, tag: str, progress: bool) -> tuple[Any, Any]:
    """Make the packed folder from the fp32 weights (under the caller's lock); return the packed model
    (with the output head's fp16 copy kept) and the tokenizer."""
    from constrained_spec.models.torch.packed_linear import pack_linears

    root = folder.parent.parent
    model, tokenizer, origin = _fp32_source(src, root, progress)
    clear_quantizer(model)
    model.eval()
    pack_linears(model, keep_head_weight=True, weights=PACKED_TAGS[tag])
    if progress:
        logger.info(f"writing the packed {tag} cache of {src.name} ...")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    chmod_default(tmp, 0o777)
    try:
        _save_packed(tmp, model, tokenizer, src, tag, origin)
        publish(tmp, folder)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) or no_space(exc):
            raise write_error(exc, tmp / PACKED_FILE, f"the packed {tag} cache of {src.name}") from exc
        raise
    _drop_stale(folder, src, tag)
    return model, tokenizer


def load_packed(
    name: str,
    cache_dir: str | os.PathLike[str] | None = None,
    dtype: Any = "auto",
    role: str | None = None,
    progress: bool = True,
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a short name in a packed dtype (``fp16w``/``int8w``), from the packed
    cache; the cache is built first when it is missing, incomplete, of another torch version or
    format, or damaged (a warning says why). ``role`` "target" drops the output head's fp16 copy."""
    src = known_source(name)
    tag = concrete_dtype(dtype, src.role)  # as for every short name, "auto" follows the model's own role
    folder = packed_dir(src.name, tag, cache_dir)
    keep_head = (role or src.role) != "target"

    def attempt() -> tuple[Any, Any] | None:
        try:
            meta = _packed_meta(folder, src, tag)
            return _load_packed_folder(folder, meta, keep_head)
        except _CacheInvalid as exc:
            if folder.exists():
                log.warning("packed cache %s is not usable (%s); rebuilding it", folder, exc)
            return None

    if folder.exists() and (hit := attempt()) is not None:
        return hit
    with file_lock(_root(cache_dir) / "locks" / f"packed-{src.name}-{tag}.lock"):
        if folder.exists() and (hit := attempt()) is not None:  # another process built it meanwhile
            return hit
        model, tokenizer = _build_packed(folder, src, tag, progress)
    if not keep_head:
        head = model.get_output_embeddings()
        if getattr(head, "weight", None) is not None:
            head.weight = None
    return model, tokenizer


def ensure_packed(
    name: str,
    cache_dir: str | os.PathLike[str] | None = None,
    dtype: Any = "auto",
    progress: bool = True,
) -> Path:
    """Return the packed cache folder of a short name in a packed dtype, building it if needed."""
    src = known_source(name)
    tag = concrete_dtype(dtype, src.role)
    folder = packed_dir(src.name, tag, cache_dir)
    try:
        _packed_meta(folder, src, tag)
        return folder
    except _CacheInvalid:
        pass
    with file_lock(_root(cache_dir) / "locks" / f"packed-{src.name}-{tag}.lock"):
        try:
            _packed_meta(folder, src, tag)
        except _CacheInvalid:
            model, _ = _build_packed(folder, src, tag, progress)
            del model
    return folder
