"""A GGUF file run by llama.cpp (through ``llama-cpp-python``'s low-level API) behind the model protocol.

The GGUF is the model: it is memory-mapped as stored (Q4_K_M stays Q4_K_M), nothing is converted
or cached but its tokenizer (a saved transformers tokenizer folder, read in milliseconds later).
:class:`LlamaCppWeights` holds the loaded ``llama_model``; each user of it gets its own context (KV
cache): :class:`LlamaCppModel` is one sequence (:class:`~constrained_spec.models.protocol.SequenceModel`),
:class:`LlamaCppRows` is many (:class:`~constrained_spec.models.torch.batched.RowBackend`, one sequence id per
batch row, for continuous batching). Both decode through :meth:`_Context.decode`: one ``llama_decode``
per batch (split at ``n_batch`` tokens), logits at every position that asks for them, rollback by
``llama_memory_seq_rm`` (a length change), prefix copies by ``llama_state_seq_get/set_data``.

Grammar, masks, proposals and the exact verify are the engine's, unchanged: this module only turns
token ids into logits. Logits are copied out of llama.cpp's output buffer (it is overwritten by the
next decode, and the loop keeps a block's logits across the next forwards): 0.6 MB per position for
a 151,936-token vocabulary.

Numerics (docs/llamacpp.md): with the project's build of llama-cpp-python (``make install-llamacpp``, which
applies ``scripts/llamacpp-batch-invariant.patch``) the runtime is *batch-invariant*: decode and verify
contexts run with flash attention and ggml's reference paths (``use_ref``: every row of a matmul through
the one-row kernel, no tiled or llamafile matmul, no split-KV or tiled attention), so every position of a
block gets bitwise the logits a one-token decode computes there, alone or as a batch row. A fresh
sequence's prompt is prefilled in a context on the fast default paths and its cache copied across:
target-only and speculative decoding share that very prefill, so the distribution both sample is the
same. Without the patch (a binding built elsewhere) the default paths run and a block's logits differ
from one-token decodes by up to ~0.8 on the real Q4_K_M target; :attr:`LlamaCppWeights.batch_invariant`
says which one is in use.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import torch

from constrained_spec.errors import ConfigError, ModelLoadError
from constrained_spec.models.llamacpp.pieces import PREFILL_PIECE, PREFILL_TAIL, PieceRule, common_prefix
from constrained_spec.models.llamacpp.prompt_states import PromptStates, model_key

__all__ = ["DEFAULT_N_CTX", "LlamaCppModel", "LlamaCppRows", "LlamaCppWeights", "available", "batch_invariant_build",
           "gguf_tokenizer", "install_hint", "load_llamacpp"]

logger = logging.getLogger("constrained_spec")

#: tokens one sequence's context holds by default (prompt and output): its KV cache is allocated up front
DEFAULT_N_CTX = 8192
#: tokens per ``llama_decode`` call (longer inputs are split); also the graph's reserved width
N_BATCH = 512

_INIT_LOCK = threading.Lock()
_STATE: dict[str, Any] = {}


def install_hint() -> str:
    """The one line that says how to get the binding."""
    return ("llama-cpp-python is not installed: `make install-llamacpp` (or scripts/install_llamacpp.sh) builds it "
            "from source (about 3.5 min on 2 cores); or pip install 'constrained-spec[llamacpp]'")


def available() -> bool:
    """Whether ``llama_cpp`` (llama-cpp-python) imports."""
    try:
        _lib()
    except ModelLoadError:
        return False
    return True


def _lib() -> Any:
    """The ``llama_cpp.llama_cpp`` ctypes module, its backend initialised and its logging routed to
    the ``llama_cpp`` logger (warnings and errors only)."""
    if "lib" in _STATE:
        return _STATE["lib"]
    with _INIT_LOCK:
        if "lib" in _STATE:
            return _STATE["lib"]
        try:
            import llama_cpp.llama_cpp as lib
        except Exception as exc:  # ImportError, or an OSError from a broken shared library
            raise ModelLoadError(f"{install_hint()} ({type(exc).__name__}: {str(exc)[:200]})") from exc
        log = logging.getLogger("constrained_spec.llama_cpp")

        @lib.llama_log_callback
        def _log(level: int, text: bytes, user_data: Any) -> None:
            if level in (3, 4):  # GGML_LOG_LEVEL_WARN, _ERROR (0 none, 1 debug, 2 info, 5 continuation)
                log.log(logging.WARNING if level == 3 else logging.ERROR, text.decode("utf-8", "replace").rstrip())

        lib.llama_log_set(_log, ctypes.c_void_p(0))
        lib.llama_backend_init()
        _STATE["log"] = _log  # the callback must outlive every call into the library
        _STATE["lib"] = lib
        return lib


#: the symbol scripts/llamacpp-batch-invariant.patch adds to ggml's CPU backend
PATCH_SYMBOL = "ggml_backend_cpu_set_default_use_ref"


def _set_default_use_ref() -> Any:
    """The patched build's ``ggml_backend_cpu_set_default_use_ref`` (None in a build without the patch)."""
    if "use_ref" in _STATE:
        return _STATE["use_ref"]
    lib = _lib()
    func = None
    for candidate in _loaded_cpu_backends() or _packaged_cpu_backends(Path(getattr(lib, "__file__", "")).parent / "lib"):
        try:
            handle = ctypes.CDLL(str(candidate))  # the file already loaded: the same handle, the same globals
            func = getattr(handle, PATCH_SYMBOL)
        except (OSError, AttributeError):
            continue
        func.argtypes, func.restype = [ctypes.c_bool], None
        break
    _STATE["use_ref"] = func
    return func


def _loaded_cpu_backends() -> list[str]:
    """The ggml CPU backend files this process has mapped (Linux). The binding's wheel holds
    ``libggml-cpu.so``, ``.so.0`` and ``.so.0.x.y`` as separate copies; only the one the loader took (by its
    soname) holds the globals llama.cpp reads, so the patch's switch must be looked up in that very file."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in maps.splitlines() if "ggml-cpu" in line and line.split()[-1].startswith("/")})


def _packaged_cpu_backends(folder: Path) -> list[Path]:
    names = ("libggml-cpu.so.0", "libggml-cpu.so", "libggml-cpu.dylib", "ggml-cpu.dll")
    return [folder / n for n in names if (folder / n).exists()]


def batch_invariant_build() -> bool:
    """Whether the installed llama-cpp-python carries the batch-invariance patch (``make install-llamacpp``)."""
    return _set_default_use_ref() is not None


def default_threads() -> int:
    """Threads per decode: torch's intra-op thread count (``torch.set_num_threads``), so one setting
    governs both runtimes (ggml's threads spin while they wait: more threads than free cores is slow)."""
    return max(1, torch.get_num_threads())


class LlamaCppWeights:
    """A GGUF file loaded by llama.cpp (memory-mapped, CPU), shared by every context made from it."""

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None, n_ctx: int = DEFAULT_N_CTX,
                 flash_attn: bool | None = None, batch_invariant: bool | None = None) -> None:
        lib = _lib()
        self.path = str(Path(path).expanduser().resolve())
        if not os.path.isfile(self.path):
            raise ModelLoadError(f"GGUF file {self.path} does not exist")
        patched = batch_invariant_build()
        if batch_invariant and not patched:
            raise ConfigError("batch-invariant llama.cpp decoding needs the patched build: " + install_hint())
        #: every position of a block gets bitwise the logits of a one-token decode (the patched build's reference
        #: paths, flash attention on); False: the binding's default paths
        self.batch_invariant = patched if batch_invariant is None else bool(batch_invariant)
        self._lib = lib
        self.handle = self._load()
        self._prefill_ctx: _Context | None = None
        #: the prompt the prefill context holds (a later one sharing a prefix up to a cut keeps that part)
        self._prefill_held: list[int] = []
        #: prompt tokens the last :meth:`prefilled_state` took from the prefill context, memory or disk, not computed
        self.prefill_reused = 0
        self._prefill_lock = threading.Lock()
        #: prefilled prompts saved on disk for later processes (:meth:`keep_prompt_states`); None: none kept
        self.prompt_states: PromptStates | None = None
        #: prefilled prompts kept in memory for this process's later prompts (:meth:`keep_memory_states`); None: none
        self.memory_states: PromptStates | None = None
        vocab = lib.llama_model_get_vocab(self.handle)
        self.vocab_size = int(lib.llama_vocab_n_tokens(vocab))
        #: where prefills are cut: every PREFILL_PIECE positions and after each end-of-generation token (message ends)
        self.pieces = PieceRule(PREFILL_PIECE, frozenset(t for t in range(self.vocab_size) if lib.llama_vocab_is_eog(vocab, t)),
                                tail=PREFILL_TAIL)
        self.n_ctx_train = int(lib.llama_model_n_ctx_train(self.handle))
        self.threads = threads or default_threads()
        self.n_ctx = n_ctx
        #: llama.cpp's flash attention: on where batch-invariant (its per-query kernel is the invariant one); off
        #: otherwise by default (there a block's logits stay closer to one-token decodes without it)
        self.flash_attn = self.batch_invariant if flash_attn is None else bool(flash_attn)
        if self.batch_invariant and not self.flash_attn:
            raise ConfigError("batch-invariant llama.cpp decoding needs flash attention (flash_attn=True)")

    def _load(self) -> Any:
        lib = self._lib
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        params.use_mmap = True  # the weights ggml repacks for its AVX2 kernels are copied out, the rest stays mapped
        model = lib.llama_model_load_from_file(self.path.encode(), params)
        if not model:
            raise ModelLoadError(f"llama.cpp could not load {self.path} (not a GGUF model it supports?)")
        return model

    def keep_prompt_states(self, cache_root: str | os.PathLike[str], max_bytes: int) -> PromptStates:
        """Save prefilled prompts under ``cache_root/prompt-states/<model key>`` (up to ``max_bytes``) and
        restore them in later prefills, in this process or the next (:mod:`~constrained_spec.models.llamacpp.prompt_states`)."""
        from importlib.metadata import version

        stat = os.stat(self.path)
        key = model_key(path=self.path, size=stat.st_size, mtime=stat.st_mtime_ns, binding=version("llama_cpp_python"),
                        patched=batch_invariant_build(), threads=self.threads, flash_attn=self.flash_attn, n_batch=N_BATCH,
                        piece=self.pieces.width, stops=sorted(self.pieces.stops), heads=sorted(self.pieces.heads), tail=self.pieces.tail)
        self.prompt_states = PromptStates(Path(cache_root) / "prompt-states" / key, rule=self.pieces, max_bytes=max_bytes)
        return self.prompt_states

    def share_heads(self, heads: Sequence[Sequence[int]]) -> bool:
        """Cut prefills also right after these token sequences where a prompt starts with one (the chat header and
        the schema hint's first words, which prompts with other schemas share), so a later prompt keeps that part.
        Only before the first prefill and before any prompt store is kept (the cuts saved states were made with
        must not change); False where it is too late, or a head holds a stop token (a message end is a cut anyway)."""
        if self._prefill_ctx is not None or self.prompt_states is not None or self.memory_states is not None:
            return False
        if any(int(t) in self.pieces.stops for h in heads for t in h):
            return False
        self.pieces = dataclasses.replace(self.pieces, heads=frozenset(tuple(int(t) for t in h) for h in heads if h))
        return True

    def keep_memory_states(self, max_bytes: int) -> PromptStates:
        """Keep prefilled prompts' states at their message ends and last cut in memory (up to ``max_bytes``, least
        recently used out) and restore the longest match in later prefills of this process."""
        self.memory_states = PromptStates(None, rule=self.pieces, max_bytes=max_bytes)
        return self.memory_states

    def prefilled_state(self, tokens: list[int]) -> bytes:
        """The cache of ``tokens`` as a fresh sequence, computed in the prefill context (the fast default paths)
        and returned as ``llama_state_seq`` bytes for a decode context to take. The same bytes as a prefill from
        scratch, however much is reused: the part up to the last cut (:attr:`pieces`) the prompt shares with the
        previous one stays in the prefill context; with :attr:`memory_states` or :attr:`prompt_states` a longer
        saved prefix is restored from memory or disk, and the prompt's own message ends and last cut are saved."""
        with self._prefill_lock:
            if self._prefill_ctx is None:
                self._prefill_ctx = _Context(self, self.n_ctx, 1, reference=False)
            fast = self._prefill_ctx
            if len(tokens) > fast.n_ctx:
                raise ValueError(f"{len(tokens)} tokens exceed the prefill context's {fast.n_ctx}")
            rule, held = self.pieces, self._prefill_held
            start = rule.last_cut(tokens, min(rule.reuse_limit(tokens), rule.reuse_limit(held), common_prefix(tokens, held)))
            cuts = rule.cuts(0, tokens)
            self._prefill_held = []
            try:
                if start:
                    fast.seq_rm(0, start)
                else:
                    fast.clear()
                stores = [store for store in (self.memory_states, self.prompt_states) if store is not None]
                for store in stores:
                    start = self._restore_prefix(fast, tokens, start, store)
                self.prefill_reused = start
                for cut in sorted({c for store in stores for c in store.save_points(tokens) if c > start}):
                    fast.prefill(0, start, tokens[start:cut], cuts)  # the same pieces as at once: a cut ends one
                    state = fast.seq_state(0)
                    for store in stores:
                        store.save(tokens[:cut], state)
                    start = cut
                fast.prefill(0, start, tokens[start:], cuts)
                state = fast.seq_state(0)
            except BaseException:
                fast.clear()
                raise
            self._prefill_held = list(tokens)
            return state

    def _restore_prefix(self, fast: _Context, tokens: list[int], held: int, store: PromptStates) -> int:
        """Where ``store`` has a saved prefix of ``tokens`` longer than the ``held`` positions ``fast``'s sequence 0
        has, put it there instead; how many positions the sequence then holds."""
        hit = store.longest(tokens)
        if hit is None or hit.length <= held:
            return held
        try:
            fast.clear()
            fast.set_seq_state(0, hit.state)
            if fast.seq_length(0) < hit.length:
                raise RuntimeError("the saved state is shorter than its tokens")
            fast.seq_rm(0, hit.length)
        except RuntimeError:
            store.discard(hit.name)
            fast.clear()
            return 0
        return hit.length

    def sequence_model(self) -> "LlamaCppModel":
        """A fresh single-sequence model (its own context and KV cache) over these weights."""
        return LlamaCppModel(self)

    def __del__(self) -> None:
        self._prefill_ctx = None
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            self._lib.llama_model_free(handle)


class _Context:
    """One llama.cpp context (KV cache) over ``weights`` holding ``n_seq`` sequences of ``n_ctx`` tokens in all."""

    def __init__(self, weights: LlamaCppWeights, n_ctx: int, n_seq: int = 1, model: Any = None, reference: bool | None = None,
                 unified: bool | None = None) -> None:
        lib = weights._lib
        self.weights, self._lib = weights, lib
        reference = weights.batch_invariant if reference is None else reference
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = N_BATCH
        params.n_seq_max = n_seq
        params.n_threads = params.n_threads_batch = weights.threads
        # one cell pool: a batch of rows is one ubatch, whatever each row's length. Batch-invariant rows get a
        # stream of cells each instead: attention sums a row's cells in cell order, and in a shared pool a row
        # that grows after rollbacks can take a hole before its own earlier cells (another order than alone)
        params.kv_unified = not (reference and n_seq > 1) if unified is None else unified
        self.unified = bool(params.kv_unified)
        params.no_perf = True
        params.flash_attn_type = 1 if weights.flash_attn else 0
        set_use_ref = _set_default_use_ref() if reference else None
        with _INIT_LOCK:  # the default use_ref is process-wide while the context's backends are made
            if set_use_ref is not None:
                set_use_ref(True)
            try:
                ctx = lib.llama_init_from_model(model or weights.handle, params)
            finally:
                if set_use_ref is not None:
                    set_use_ref(False)
        if not ctx:
            raise ModelLoadError(f"llama.cpp could not make a context of {n_ctx} tokens for {weights.path}")
        self.handle = ctx
        self.memory = lib.llama_get_memory(ctx)
        self.n_ctx = int(lib.llama_n_ctx(ctx))
        self.vocab_size = weights.vocab_size
        self._batch = lib.llama_batch_init(N_BATCH, 0, 1)

    def decode(self, entries: list[tuple[int, int, int, bool]]) -> torch.Tensor | None:
        """Run ``entries`` (sequence id, position, token, keep logits) through ``llama_decode`` in batches
        of up to ``N_BATCH``; the kept logits [n, V] (float32, in entry order), or None when none is kept."""
        lib, batch = self._lib, self._batch
        rows: list[torch.Tensor] = []
        for start in range(0, len(entries), N_BATCH):
            chunk = entries[start : start + N_BATCH]
            kept = 0
            for i, (seq, pos, token, want) in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = pos
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = seq
                batch.logits[i] = 1 if want else 0
                kept += want
            batch.n_tokens = len(chunk)
            rc = lib.llama_decode(self.handle, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode failed ({rc}): {'no room in the KV cache' if rc == 1 else 'see the log'}")
            if kept:
                ptr = lib.llama_get_logits(self.handle)
                rows.append(torch.from_numpy(np.ctypeslib.as_array(ptr, shape=(kept, self.vocab_size)).copy()))
        if not rows:
            return None
        return rows[0] if len(rows) == 1 else torch.cat(rows)

    def prefill(self, seq: int, start: int, tokens: list[int], cuts: Sequence[int] | None = None) -> None:
        """Feed ``tokens`` (a prompt) to sequence ``seq`` at positions ``start``.. one prefill piece per ``llama_decode``
        (cut at absolute positions: ``cuts``, those of the whole prefill these tokens are part of; by default the
        tokens' own, :mod:`~constrained_spec.models.llamacpp.pieces`), the last position's output kept."""
        end = start + len(tokens)
        for a, b in self.weights.pieces.bounds(start, tokens, cuts):
            self.decode([(seq, p, tokens[p - start], p == end - 1) for p in range(a, b)])

    def seq_rm(self, seq: int, start: int) -> None:
        """Drop sequence ``seq``'s positions from ``start`` on."""
        if not self._lib.llama_memory_seq_rm(self.memory, seq, start, -1):
            raise RuntimeError(f"llama.cpp could not crop sequence {seq} to {start} tokens")

    def seq_copy(self, source: int, dest: int, length: int) -> None:
        """Sequence ``dest`` becomes ``source``'s first ``length`` positions (``llama_memory_seq_cp``: the
        unified cache's cells are shared, tagged with both ids, not copied; a later crop of either
        only untags it)."""
        self.seq_rm(dest, 0)
        if length > 0:
            self._lib.llama_memory_seq_cp(self.memory, source, dest, 0, length)

    def seq_length(self, seq: int) -> int:
        """Positions sequence ``seq`` holds (its highest position + 1)."""
        return int(self._lib.llama_memory_seq_pos_max(self.memory, seq)) + 1

    def clear(self) -> None:
        """Drop every sequence's cells. Their data is left in place, not zeroed (zeroing a 235 MB cache took ~25 ms):
        llama.cpp masks cells no sequence holds out of attention (``-inf``; its CPU flash attention skips them), so
        nothing left there reaches a later forward, as after ``llama_memory_seq_rm``."""
        self._lib.llama_memory_clear(self.memory, False)

    def seq_state(self, seq: int) -> bytes:
        """Sequence ``seq``'s cells as bytes (``llama_state_seq_get_data``)."""
        size = int(self._lib.llama_state_seq_get_size(self.handle, seq))
        buf = (ctypes.c_uint8 * size)()
        written = int(self._lib.llama_state_seq_get_data(self.handle, buf, size, seq))
        return bytes(buf)[:written]

    def set_seq_state(self, seq: int, data: bytes) -> None:
        """Sequence ``seq`` becomes what :meth:`seq_state` saved (from this context or one of the same model)."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if int(self._lib.llama_state_seq_set_data(self.handle, buf, len(data), seq)) == 0:
            raise RuntimeError(f"llama.cpp could not restore sequence {seq}")

    def __del__(self) -> None:
        handle, self.handle = getattr(self, "handle", None), None
        if handle:
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(handle)


class LlamaCppModel:
    """One token sequence on llama.cpp: a :class:`~constrained_spec.models.protocol.SequenceModel`.

    ``extend`` returns logits at every position of the block (one ``llama_decode``); ``crop`` is
    ``llama_memory_seq_rm`` on the sequence's tail."""

    runtime = "llamacpp"

    def __init__(self, weights: LlamaCppWeights, n_ctx: int | None = None) -> None:
        self.weights = weights
        self._ctx = _Context(weights, n_ctx or weights.n_ctx, 1)
        self.vocab_size = weights.vocab_size
        self.device = torch.device("cpu")
        #: what ``Generator`` reads for the context window: the smaller of the context made and the trained one
        self.config = SimpleNamespace(max_position_embeddings=min(self._ctx.n_ctx, weights.n_ctx_train or self._ctx.n_ctx),
                                      model_type="gguf")
        self._length = 0

    @property
    def length(self) -> int:
        return self._length

    def _feed(self, tokens: list[int], logits: str) -> torch.Tensor | None:
        if not tokens:
            raise ValueError("extend() needs at least one token")
        if self._length + len(tokens) > self._ctx.n_ctx:
            raise ValueError(f"{self._length + len(tokens)} tokens exceed this context's {self._ctx.n_ctx}")
        last = len(tokens) - 1
        entries = [(0, self._length + i, t, logits == "all" or (logits == "last" and i == last)) for i, t in enumerate(tokens)]
        try:
            out = self._ctx.decode(entries)
        except RuntimeError:
            self._ctx.seq_rm(0, self._length)  # a failed decode may leave part of the tokens behind
            raise
        self._length += len(tokens)
        return out

    @torch.inference_mode()
    def extend(self, tokens: list[int]) -> torch.Tensor:
        out = self._feed(tokens, "all")
        assert out is not None
        return out

    def prefill(self, tokens: list[int]) -> None:
        """Append ``tokens`` (a prompt); only the last position's output is computed. On batch-invariant weights a
        fresh sequence is prefilled in the weights' prefill context (the fast default paths) and its cache copied here."""
        if self.weights.batch_invariant and self._length == 0 and len(tokens) > 1:
            self._prefill_fast(tokens)
        else:
            self._feed(tokens, "last")

    def _prefill_fast(self, tokens: list[int]) -> None:
        if len(tokens) > self._ctx.n_ctx:
            raise ValueError(f"{len(tokens)} tokens exceed this context's {self._ctx.n_ctx}")
        state = self.weights.prefilled_state(tokens)
        self._ctx.clear()
        self._ctx.set_seq_state(0, state)
        self._length = len(tokens)

    def crop(self, length: int) -> None:
        if length > self._length or length < 0:
            raise ValueError(f"cannot crop a cache of {self._length} tokens to {length}")
        if length < self._length:
            self._ctx.seq_rm(0, length)
            self._length = length

    def reset(self) -> None:
        self._ctx.clear()
        self._length = 0

    def fork(self) -> LlamaCppModel:
        """A sequence over the same weights in a context of its own, holding a copy of this one's cells
        (``llama_state_seq`` bytes: the same values, so it continues bitwise alike)."""
        clone = LlamaCppModel(self.weights, self._ctx.n_ctx)
        if self._length:
            clone._ctx.set_seq_state(0, self._ctx.seq_state(0))
            clone._length = self._length
        return clone

    def rows(self, slots: int, max_length: int) -> LlamaCppRows:
        """``slots`` rows (one sequence id each) of up to ``max_length`` tokens over these weights."""
        return LlamaCppRows(self.weights, slots, max_length)

    def cache_length(self) -> int:
        """The length llama.cpp's memory reports for the sequence (for the debug invariant check)."""
        return self._ctx.seq_length(0)


class LlamaCppRows:
    """``slots`` sequences of up to ``max_length`` tokens in one llama.cpp context (sequence id = slot):
    a :class:`~constrained_spec.models.torch.batched.RowBackend`. Every call of a forward goes into one
    ``llama_decode`` batch; a row's ``start`` crops its sequence first (rollback is free)."""

    runtime = "llamacpp"
    can_restrict_head = False
    head_prefix = 0

    def __init__(self, weights: LlamaCppWeights, slots: int, max_length: int) -> None:
        if slots < 1 or max_length < 2:
            raise ConfigError("a batched model needs at least one slot of at least two positions")
        self.weights = weights
        self.vocab_size = weights.vocab_size
        self.device = torch.device("cpu")
        self.slots, self.max_length = slots, max_length
        self._ctx = _Context(weights, slots * max_length, slots)
        self._fast: _Context | None = None  # see _prefill_row
        self.lengths = [0] * slots
        #: batch-invariant rows: prompt tokens a row was given (head "none") and not yet computed, as (start, tokens):
        #: less than one prefill piece (the complete pieces are computed as they come, :meth:`_advance`), computed on
        #: the fast paths when the row is next read (:meth:`_settle`)
        self._pending: dict[int, tuple[int, list[int]]] = {}

    def forward(self, calls: list[Any]) -> list[torch.Tensor | None]:
        if len({c.slot for c in calls}) != len(calls):
            raise ValueError("a batched forward runs each slot at most once")
        entries: list[tuple[int, int, int, bool]] = []
        for c in calls:
            if c.head not in ("all", "none"):
                raise ValueError(f"llama.cpp rows compute full heads only, not {c.head!r}")
            if not c.tokens:
                raise ValueError("a row call needs at least one token")
            if c.start < 0 or c.start + len(c.tokens) > self.max_length or c.start > self.lengths[c.slot]:
                raise ValueError(f"slot {c.slot}: positions {c.start}..{c.start + len(c.tokens)} (holds {self.lengths[c.slot]}, "
                                 f"max {self.max_length})")
            if self.weights.batch_invariant and c.head == "none":
                self._defer(c.slot, c.start, list(c.tokens))
                continue
            self._settle(c.slot)  # the row's deferred prompt, if any, goes in first
            if c.start < self.lengths[c.slot]:
                self._ctx.seq_rm(c.slot, c.start)
            entries += [(c.slot, c.start + i, t, c.head == "all") for i, t in enumerate(c.tokens)]
        logits = self._ctx.decode(entries) if entries else None
        out: list[torch.Tensor | None] = []
        offset = 0
        for c in calls:
            self.lengths[c.slot] = c.start + len(c.tokens)
            if c.head == "all":
                assert logits is not None
                out.append(logits[offset : offset + len(c.tokens)])
                offset += len(c.tokens)
            else:
                out.append(None)
        return out

    def _defer(self, slot: int, start: int, tokens: list[int]) -> None:
        """A prompt chunk of a batch-invariant row, computed piece by piece (:meth:`_advance`). Chunks that follow
        one another join, so the row's prompt is cut where one sequence's prefill cuts it (at absolute positions,
        :mod:`~constrained_spec.models.llamacpp.pieces`; the fast paths' rounding depends on the cut: this way rows
        and one-at-a-time decoding hold the same cache)."""
        pending = self._pending.get(slot)
        if pending is not None and pending[0] + len(pending[1]) == start:
            self._pending[slot] = (pending[0], pending[1] + tokens)
        else:
            self._settle(slot)  # anything else (a rollback into deferred tokens): compute them, then crop
            self._ctx.seq_rm(slot, start)
            self._pending[slot] = (start, tokens)
        self._advance(slot)

    def _advance(self, slot: int) -> None:
        """Compute the complete prefill pieces of ``slot``'s deferred tokens now (so a prompt is computed a piece at a
        time between the other rows' decode steps, not all at once when the row is first read); the incomplete last
        piece waits for more tokens or for :meth:`_settle`."""
        start, tokens = self._pending[slot]
        cuts = self.weights.pieces.cuts(start, tokens, final=False)  # only those settled whatever comes next
        cut = cuts[-1] if cuts else start
        if cut == start:
            return
        self._prefill_row(slot, start, tokens[: cut - start], cuts)
        if cut - start < len(tokens):
            self._pending[slot] = (cut, tokens[cut - start :])
        else:
            del self._pending[slot]

    def pending_tokens(self, slot: int) -> int:
        """Prompt tokens ``slot`` was given and has not computed yet (fewer than one prefill piece between reads)."""
        pending = self._pending.get(slot)
        return 0 if pending is None else len(pending[1])

    def _settle(self, slot: int) -> None:
        """Compute ``slot``'s deferred prompt tokens, if any, on the fast paths (see :meth:`_prefill_row`)."""
        pending = self._pending.pop(slot, None)
        if pending is not None:
            self._prefill_row(slot, pending[0], pending[1], self.weights.pieces.cuts(pending[0], pending[1]))

    def _prefill_row(self, slot: int, start: int, tokens: list[int], cuts: Sequence[int] | None = None) -> None:
        """Prefill ``tokens`` at positions ``start``.. of a row in a twin context on the fast default paths with
        the same layout (a stream of cells per row: llama.cpp restores a row's state only into a cache of as many
        streams), then copy its state across; the row's first ``start`` positions go to the twin first."""
        if start + len(tokens) > self.max_length:
            raise ValueError(f"slot {slot}: {start + len(tokens)} tokens exceed the slot's {self.max_length}")
        if self._fast is None:
            self._fast = _Context(self.weights, self.slots * self.max_length, self.slots, reference=False, unified=False)
        fast = self._fast
        fast.seq_rm(slot, 0)
        try:
            if start > 0:
                fast.set_seq_state(slot, self._ctx.seq_state(slot))
                fast.seq_rm(slot, start)
            fast.prefill(slot, start, tokens, cuts)
            state = fast.seq_state(slot)
        finally:
            fast.seq_rm(slot, 0)
        self._ctx.seq_rm(slot, 0)
        self._ctx.set_seq_state(slot, state)

    def read_prefix(self, slot: int, length: int) -> Any:
        """The state of ``slot`` (``llama_state_seq_get_data``), cut to ``length`` positions on restore."""
        self._settle(slot)
        self._ctx.seq_rm(slot, length)
        self.lengths[slot] = min(self.lengths[slot], length)
        return [(torch.frombuffer(bytearray(self._ctx.seq_state(slot)), dtype=torch.uint8), torch.empty(0))]

    def reusable_prefix(self, tokens: Sequence[int], stored: Sequence[int], length: int) -> int:
        """The last prefill cut of ``tokens`` up to ``length`` that both prompts share on batch-invariant rows (their
        prompt pieces are cut at :attr:`LlamaCppWeights.pieces`; a piece begun elsewhere would compute other bits),
        else ``length``."""
        if not self.weights.batch_invariant:
            return length
        rule = self.weights.pieces
        return rule.last_cut(tokens, min(length, rule.reuse_limit(tokens), rule.reuse_limit(stored)))

    def write_prefix(self, slot: int, saved: Any, length: int) -> None:
        self._pending.pop(slot, None)
        self._ctx.seq_rm(slot, 0)
        self._ctx.set_seq_state(slot, saved[0][0].numpy().tobytes())
        self._ctx.seq_rm(slot, length)
        self.lengths[slot] = length

    def copy_rows(self, source: int, dest: int, length: int) -> None:
        """Fork a row: ``dest`` becomes ``source``'s first ``length`` positions. In one cell pool it shares the
        cells (``llama_memory_seq_cp``); with a stream per row (batch-invariant) the cells are copied, through
        the sequence state (llama.cpp copies between streams only whole)."""
        if length > self.lengths[source]:
            raise ValueError(f"slot {source} holds {self.lengths[source]} positions, not {length}")
        self._settle(source)
        if dest != source:
            self._pending.pop(dest, None)
        if source == dest:
            self._ctx.seq_rm(dest, length)
        elif self._ctx.unified:
            self._ctx.seq_copy(source, dest, length)
        else:
            self._ctx.seq_rm(dest, 0)
            if length > 0:
                self._ctx.set_seq_state(dest, self._ctx.seq_state(source))
                self._ctx.seq_rm(dest, length)
        self.lengths[dest] = length


def gguf_tokenizer(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Any:
    """The transformers tokenizer of a GGUF file, built from its metadata once (10-20 s for a Qwen
    vocabulary) and kept as a saved folder in the cache (``tokenizers-gguf/<file>-<size>``); two GGUFs
    whose saved tokenizers are the same bytes (the default pair) get one object."""
    from transformers import AutoTokenizer

    from constrained_spec.models.store.shared_tokenizers import shared_tokenizer
    from constrained_spec.paths import cache_root

    path = Path(path).expanduser().resolve()
    folder = cache_root(cache_dir) / "tokenizers-gguf" / f"{path.stem}-{path.stat().st_size}"
    if (folder / "tokenizer_config.json").exists():
        return shared_tokenizer(folder)
    import shutil
    import tempfile

    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder.parent))
    tok.save_pretrained(staging)
    try:
        os.replace(staging, folder)
    except OSError:  # another process saved it first
        shutil.rmtree(staging, ignore_errors=True)
    return tok


def load_llamacpp(spec: str, cache_dir: str | os.PathLike[str] | None = None, progress: bool = True,
                  threads: int | None = None, n_ctx: int = DEFAULT_N_CTX, tokenizer: bool = True) -> tuple[LlamaCppWeights, Any]:
    """``(weights, tokenizer)`` of a short offline name (its GGUF fetched and verified if needed) or a
    ``.gguf`` path, for the llama.cpp runtime (``tokenizer=False``: None in its place)."""
    from constrained_spec.models.store.sources import lookup

    _lib()  # a missing binding is reported before any download
    src = lookup(str(spec))
    if src is not None and not os.path.exists(str(spec)):
        from constrained_spec.models.store.fetch import fetch_gguf

        path = fetch_gguf(src.name, cache_dir, progress)
    else:
        path = Path(str(spec)).expanduser()
        if path.is_dir():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) != 1:
                raise ModelLoadError(f"the llama.cpp runtime needs a .gguf file; folder {spec!r} holds {len(ggufs)}")
            path = ggufs[0]
        if path.suffix.lower() != ".gguf" or not path.is_file():
            raise ModelLoadError(f"the llama.cpp runtime runs GGUF files: {spec!r} is not an existing .gguf file or offline name")
    weights = LlamaCppWeights(path, threads=threads, n_ctx=n_ctx)
    return weights, gguf_tokenizer(path, cache_dir) if tokenizer else None
