"""Compile once: a regex -> a token-level automaton over one vocabulary (outlines-core ``Index``).

A :class:`CompiledAutomaton` is immutable after construction (its mask cache only memoises pure
functions of the state) and is safe to share between requests and threads. Per-request state lives
in :class:`constrained_spec.constraint.Matcher`.

Compiled indexes are cached on disk, keyed by the regex, the vocabulary fingerprint and the
outlines-core version; writes are atomic (temporary file + rename), so two processes filling the
cache at once are safe.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import pickle
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import CompileLimitError, EmptyLanguageError, GrammarError
from ..paths import cache_root
from ..vocab import TokenVocabulary

try:  # pragma: no cover - version string only
    from importlib.metadata import version as _pkg_version

    _OUTLINES_VERSION = _pkg_version("outlines-core")
except Exception:  # pragma: no cover
    _OUTLINES_VERSION = "unknown"


class CompiledAutomaton:
    """A regex compiled against a vocabulary: states, transitions, final states, token masks."""

    def __init__(self, regex: str, vocab: TokenVocabulary, index: Any, compile_seconds: float) -> None:
        self.regex = regex
        self.vocab = vocab
        self.index = index
        self.compile_seconds = compile_seconds
        self.initial_state: int = index.get_initial_state()
        self._final = frozenset(index.get_final_states())
        self._outlines_eos = vocab.eos_token_id
        self._words = (vocab.size + 31) // 32
        self._mask_cache: dict[int, torch.Tensor] = {}
        self._allowed_cache: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()
        if not self.allowed_ids(self.initial_state).size:
            raise EmptyLanguageError(
                f"the constraint admits no output this vocabulary can spell (regex {_short(regex)})"
            )

    # -- states -----------------------------------------------------------------------------
    def is_final(self, state: int) -> bool:
        return state in self._final

    def next_state(self, state: int, token_id: int) -> int | None:
        """The state after ``token_id``, or None if the token is not allowed there."""
        if token_id in self.vocab.eos_token_ids:
            return state if self.is_final(state) else None
        nxt = self.index.get_next_state(state, token_id)
        return nxt

    def allowed_ids(self, state: int) -> np.ndarray:
        """Sorted int64 array of the token ids allowed in ``state`` (EOS ids only when final)."""
        cached = self._allowed_cache.get(state)
        if cached is not None:
            return cached
        ids = self.index.get_allowed_tokens(state)
        arr = np.fromiter((i for i in ids if i != self._outlines_eos), dtype=np.int64)
        if self.is_final(state):
            arr = np.concatenate([arr, np.array(self.vocab.eos_token_ids, dtype=np.int64)])
        arr = np.unique(arr)
        with self._lock:
            self._allowed_cache[state] = arr
        return arr

    def bitmask(self, state: int) -> torch.Tensor:
        """int32 words [ceil(V/32)]: bit i of word w allows token 32*w + i. Cached per state."""
        cached = self._mask_cache.get(state)
        if cached is not None:
            return cached
        bits = np.zeros(self._words * 32, dtype=np.uint8)
        bits[self.allowed_ids(state)] = 1
        packed = np.packbits(bits, bitorder="little").view(np.int32)
        mask = torch.from_numpy(packed.copy())
        with self._lock:
            self._mask_cache[state] = mask
        return mask

    def single_allowed(self, state: int) -> int | None:
        """The one allowed token id if the grammar forces it, else None."""
        ids = self.allowed_ids(state)
        return int(ids[0]) if ids.size == 1 else None

    def accepts(self, token_ids: list[int]) -> bool:
        """True if the token sequence leads from the start to a final state."""
        state: int | None = self.initial_state
        for t in token_ids:
            state = self.next_state(state, t)
            if state is None:
                return False
        return self.is_final(state)

    @property
    def num_states(self) -> int:
        return len(self.index.get_transitions())


def _short(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _build_index(regex: str, vocab: TokenVocabulary) -> Any:
    from outlines_core import Index

    return Index(regex, vocab.to_outlines())


def _build_in_child(regex: str, vocab: TokenVocabulary, conn: Any) -> None:  # pragma: no cover - child
    try:
        conn.send(("ok", pickle.dumps(_build_index(regex, vocab))))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _build_with_timeout(regex: str, vocab: TokenVocabulary, timeout: float | None) -> Any:
    """Build the index; with a timeout the build runs in a forked child that is killed on expiry."""
    if timeout is None or "fork" not in mp.get_all_start_methods():
        return _build_index(regex, vocab)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_build_in_child, args=(regex, vocab, child), daemon=True)
    proc.start()
    child.close()
    if not parent.poll(timeout):
        proc.kill()
        proc.join()
        raise CompileLimitError(
            f"building the token automaton took longer than the {timeout:g} s compile timeout "
            f"(regex of {len(regex)} characters); simplify the schema or raise compile_timeout"
        )
    status, payload = parent.recv()
    proc.join()
    if status != "ok":
        raise GrammarError(f"could not compile the constraint {_short(regex)}: {payload}")
    return pickle.loads(payload)


class AutomatonCompiler:
    """Compiles regexes against one vocabulary, with an in-memory and an on-disk cache."""

    def __init__(
        self,
        vocab: TokenVocabulary,
        cache_dir: str | os.PathLike[str] | None = None,
        disk_cache: bool = True,
        compile_timeout: float | None = 120.0,
        max_regex_chars: int = 200_000,
    ) -> None:
        self.vocab = vocab
        self.disk_cache = disk_cache
        self.cache_dir = (cache_root(cache_dir) / "automata") if disk_cache else None
        self.compile_timeout = compile_timeout
        self.max_regex_chars = max_regex_chars
        self._memory: dict[str, CompiledAutomaton] = {}
        self._lock = threading.Lock()

    def key(self, regex: str) -> str:
        h = hashlib.sha256()
        for part in (regex, self.vocab.fingerprint, _OUTLINES_VERSION):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:40]

    def compile(self, regex: str) -> CompiledAutomaton:
        """The automaton for ``regex`` (full match), from memory, disk, or a fresh build."""
        if len(regex) > self.max_regex_chars:
            raise CompileLimitError(
                f"the constraint's regex has {len(regex)} characters, over the cap of {self.max_regex_chars}"
            )
        key = self.key(regex)
        with self._lock:
            hit = self._memory.get(key)
        if hit is not None:
            return hit
        start = time.perf_counter()
        index = self._load(key)
        if index is None:
            try:
                index = _build_with_timeout(regex, self.vocab, self.compile_timeout)
            except (CompileLimitError, GrammarError):
                raise
            except Exception as exc:  # outlines-core raises ValueError and friends
                raise GrammarError(f"could not compile the constraint {_short(regex)}: {exc}") from exc
            self._store(key, index)
        automaton = CompiledAutomaton(regex, self.vocab, index, time.perf_counter() - start)
        with self._lock:
            self._memory[key] = automaton
        return automaton

    def _path(self, key: str) -> Path | None:
        return self.cache_dir / f"{key}.idx" if self.cache_dir else None

    def _load(self, key: str) -> Any | None:
        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            return pickle.loads(path.read_bytes())
        except Exception:  # a corrupt or foreign file: rebuild
            return None

    def _store(self, key: str, index: Any) -> None:
        path = self._path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(pickle.dumps(index))
            os.replace(tmp, path)
        except OSError:
            if os.path.exists(tmp):
                os.unlink(tmp)
