"""Integrity of the model cache's files: what a file was when it was verified, and whether it still is.

A cache file's :class:`FileRecord` (size, mtime, sha256) is taken when the file is written and
verified. A load compares size and mtime only (one ``stat``: cheap); a file whose size differs is
damaged (truncated, swapped); one whose size matches but mtime does not is hashed again and trusted
only if its sha256 is the recorded one (a copied cache keeps working, a file written into in place
does not). :func:`write_error` turns a failed write (a full disk above all) into one
:class:`~constrained_spec.errors.ModelLoadError` line; :func:`check_room` refuses a write that cannot
fit before it starts; :func:`fsync_tree` makes a finished folder durable before it is renamed into place.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from constrained_spec.errors import ModelLoadError

__all__ = ["FileRecord", "Verdict", "check_folder", "check_room", "fsync_tree", "model_file", "no_space", "record_folder", "refreshed", "replace_json", "verify_file", "write_error"]

_BUF = 1 << 22
#: errnos of a write that failed for want of space
_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BUF):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class FileRecord:
    """A file as it was verified: its size, modification time (ns) and sha256."""

    size: int
    mtime_ns: int
    sha256: str

    @classmethod
    def of(cls, path: str | os.PathLike[str], sha256: str | None = None) -> FileRecord:
        """The record of ``path`` now (hashed unless ``sha256`` is given)."""
        st = Path(path).stat()
        return cls(st.st_size, st.st_mtime_ns, sha256 or _sha256(Path(path)))

    def as_json(self) -> dict[str, Any]:
        return {"size": self.size, "mtime_ns": self.mtime_ns, "sha256": self.sha256}

    @classmethod
    def from_json(cls, data: Any) -> FileRecord | None:
        """The record in ``data``, or None where it is not one."""
        try:
            return cls(int(data["size"]), int(data["mtime_ns"]), str(data["sha256"]))
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Verdict:
    """Whether a file still is what its record says: ``ok``; ``rehashed`` where its mtime changed
    and its sha256 was checked again; ``reason``: why not, in words, where not ``ok``."""

    ok: bool
    rehashed: bool = False
    reason: str = ""


def verify_file(path: str | os.PathLike[str], record: FileRecord) -> Verdict:
    """Compare ``path`` with ``record``: size and mtime (a ``stat``); the sha256 only where the size
    matches and the mtime does not."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        return Verdict(False, reason=f"{path.name} is missing ({exc.strerror})")
    if st.st_size != record.size:
        return Verdict(False, reason=f"{path.name} has {st.st_size} bytes, {record.size} when verified (truncated or replaced)")
    if st.st_mtime_ns == record.mtime_ns:
        return Verdict(True)
    actual = _sha256(path)
    if actual != record.sha256:
        return Verdict(False, True, f"{path.name} changed since it was verified (sha256 {actual[:12]}..., {record.sha256[:12]}... when verified)")
    return Verdict(True, True)


def model_file(name: str) -> bool:
    """Whether a cache folder's file ``name`` holds the model: its weights (``*.safetensors``, their
    index) or its ``config.json``. The tokenizer's files are not recorded: a damaged one fails to load
    (and the folder is rebuilt), and the shared tokenizers tell edited ones apart by their content."""
    return name.endswith((".safetensors", ".safetensors.index.json")) or name == "config.json"


def record_folder(folder: Path) -> dict[str, dict[str, Any]]:
    """The records of the model files (:func:`model_file`) under ``folder``, by path relative to
    it (``/``-separated), as JSON."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_file() and not path.is_symlink() and model_file(path.name):
            out[name] = FileRecord.of(path).as_json()
    return out


def check_folder(folder: Path, records: Any) -> Verdict:
    """Whether each file recorded in ``records`` (from :func:`record_folder`) is still what it was."""
    if not isinstance(records, dict) or not records:
        return Verdict(False, reason="no file records")
    rehashed = False
    for name, data in records.items():
        record = FileRecord.from_json(data)
        if record is None:
            return Verdict(False, reason=f"unreadable record of {name}")
        verdict = verify_file(folder / name, record)
        if not verdict.ok:
            return verdict
        rehashed |= verdict.rehashed
    return Verdict(True, rehashed)


def refreshed(folder: Path, records: dict[str, Any]) -> dict[str, Any]:
    """``records`` with each file's mtime as it is now (call only once :func:`check_folder` passed:
    the sha256 stays the verified one), so that later checks are a ``stat`` again."""
    return {name: {**data, "mtime_ns": (folder / name).stat().st_mtime_ns} for name, data in records.items()}


def replace_json(path: Path, data: Any) -> bool:
    """Replace the JSON file ``path`` whole (written aside, then renamed); False where it cannot be
    written (a read-only or full cache keeps the old file, and nothing else is left)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


def fsync_tree(folder: Path) -> None:
    """fsync every file under ``folder``, then the folder itself (before it is renamed into place)."""
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - a platform whose folders cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - a filesystem that does not sync folders
        pass
    finally:
        os.close(fd)


def check_room(folder: Path, need: int, what: str) -> None:
    """Raise :class:`ModelLoadError` (one line) when the disk of ``folder`` has less than ``need``
    bytes free: ``what`` would not fit."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free < need:
        raise ModelLoadError(f"not enough disk space for {what}: it needs {_mb(need)}, {_mb(free)} free in {folder}; "
                             "free some space or point CONSTRAINED_SPEC_CACHE at a larger disk")


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed for want of space: an ``OSError`` (ENOSPC, EDQUOT,
    EFBIG), or a library's wrapper of one (safetensors reports ``IoError(... StorageFull ...)``)."""
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return True
    text = str(exc)
    return "No space left on device" in text or "StorageFull" in text or "Disk quota exceeded" in text


def write_error(exc: BaseException, path: Path, what: str) -> ModelLoadError:
    """The one-line :class:`ModelLoadError` of a write of ``what`` to ``path`` that failed with ``exc``
    (nothing of the write is kept: the caller removes its temporary file)."""
    if no_space(exc):
        return ModelLoadError(f"no space left on the disk of {path.parent} while writing {what}; nothing was kept. "
                              "Free some space or point CONSTRAINED_SPEC_CACHE at a larger disk, then run again")
    if isinstance(exc, OSError) and exc.strerror:
        detail = exc.strerror
    else:
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
    return ModelLoadError(f"could not write {what} to {path}: {detail}; nothing was kept")


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"
