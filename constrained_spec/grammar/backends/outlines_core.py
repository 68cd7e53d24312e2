"""The outlines-core back end (engine ``"automaton"``, the ``automaton`` extra): a regex -> a
byte-level DFA (outlines-core) -> lazily built token masks.

A :class:`CompiledAutomaton` is immutable after construction (its mask cache only memoises pure
functions of the state) and is safe to share between requests and threads. Per-request state lives
in an :class:`AutomatonMatcher`. The ``outlines_core`` package is imported only to build a DFA.

Compiled DFAs are cached on disk, keyed by the regex and the outlines-core version (the byte DFA
does not depend on the vocabulary); writes are atomic (temporary file + rename), so two processes filling the
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
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, Hashable, Sequence

import numpy as np
import torch

from constrained_spec.errors import CompileLimitError, EmptyLanguageError, GrammarError
from constrained_spec.grammar.matcher import FORCED_BYTES_LIMIT
from constrained_spec.grammar.vocab import TokenVocabulary
from constrained_spec.lru import LRUCache
from constrained_spec.paths import cache_root

if TYPE_CHECKING:
    from constrained_spec.grammar import OutputSpec
    from constrained_spec.grammar.backends import CompiledGrammar, GrammarBackend

try:  # pragma: no cover - version string only
    from importlib.metadata import version as _pkg_version

    _OUTLINES_VERSION = _pkg_version("outlines-core")
except Exception:  # pragma: no cover
    _OUTLINES_VERSION = "unknown"


class TokenTable:
    """The vocabulary as byte columns, for walking every token through a byte DFA at once.

    Tokens are sorted by length (longest first) so that at byte position ``i`` the tokens still
    being walked are a prefix of the array: ``columns[i]`` holds their i-th bytes.  ``by_first``
    lists the (non-empty) tokens by first byte: ``by_first[start[b]:start[b + 1]]`` are the
    positions, ascending, of the tokens that start with byte ``b``.  ``empty`` holds the positions
    of zero-length tokens (allowed wherever the walk starts).
    """

    def __init__(self, vocab: TokenVocabulary) -> None:
        ids = np.fromiter(vocab.tokens.keys(), dtype=np.int64)
        lengths = np.fromiter((len(b) for b in vocab.tokens.values()), dtype=np.int64)
        order = np.argsort(-lengths, kind="stable")
        self.ids = ids[order]
        self.lengths = lengths[order]
        raw = [vocab.tokens[int(i)] for i in self.ids]
        max_len = int(self.lengths[0]) if len(raw) else 0
        self.columns: list[np.ndarray] = []
        for pos in range(max_len):
            active = int((self.lengths > pos).sum())  # lengths are sorted: a prefix of the array
            self.columns.append(np.frombuffer(b"".join(r[pos : pos + 1] for r in raw[:active]), dtype=np.uint8))
        first = self.columns[0] if self.columns else np.zeros(0, dtype=np.uint8)
        self.by_first = np.argsort(first, kind="stable").astype(np.int64)  # stable: ascending per byte
        self.start = np.zeros(257, dtype=np.int64)
        np.cumsum(np.bincount(first, minlength=256), out=self.start[1:])
        self.empty = np.arange(len(first), len(self.ids), dtype=np.int64)
        self.n_long = int((self.lengths > SHORT_TOKEN_BYTES).sum())  # positions [0, n_long): long tokens


#: masks of the tokens up to this many bytes are shared by all states that no byte string this
#: long tells apart (:func:`depth_classes`); longer tokens (1,918 of Qwen2's 151,646) are walked
#: for each state. In a string of up to 400 characters, every position with 16 or more left shares
#: one short-token mask.
SHORT_TOKEN_BYTES = 16
#: above this many states the classes are not computed (the refinement holds a [states, 256] table
#: per step) and every state walks the whole vocabulary
MAX_CLASS_STATES = 50_000

_TOKEN_TABLES: dict[str, TokenTable] = {}
_TABLES_LOCK = threading.Lock()


def token_table(vocab: TokenVocabulary) -> TokenTable:
    """The (cached) :class:`TokenTable` of a vocabulary."""
    with _TABLES_LOCK:
        table = _TOKEN_TABLES.get(vocab.fingerprint)
        if table is None:
            table = _TOKEN_TABLES[vocab.fingerprint] = TokenTable(vocab)
        return table


def table_walk(table: TokenTable, dfa: np.ndarray, dead: int, state: int, part: str = "all") -> np.ndarray:
    """Unsorted ids of the tokens whose bytes all lead from ``state`` to a live state of ``dfa``;
    ``part`` "short" or "long" walks only the tokens of at most / more than ``SHORT_TOKEN_BYTES``.

    Only tokens whose first byte is live in ``state`` are walked (structural states, where
    few bytes are live, touch a fraction of the vocabulary); the walk then proceeds one byte
    column at a time over the surviving tokens only, dropping the ones that die.
    """
    row = dfa[state]
    live = np.flatnonzero(row[:256] != dead)
    start = table.start
    n_first = len(table.columns[0]) if table.columns else 0
    lo, hi = {"all": (0, n_first), "short": (table.n_long, n_first), "long": (0, table.n_long)}[part]
    if live.size == 0 or lo >= hi:
        alive = np.zeros(0, dtype=np.int64)
    elif int((start[live + 1] - start[live]).sum()) * 2 > n_first:
        alive = np.arange(lo, hi, dtype=np.int64)  # most tokens start live: skip the buckets
    else:
        alive = np.sort(np.concatenate([table.by_first[start[b] : start[b + 1]] for b in live]))
        if part != "all":
            alive = alive[(alive >= lo) & (alive < hi)]
    done = [table.empty if part != "long" else table.empty[:0]]  # positions walked to their end without dying
    if alive.size:
        cur = row[table.columns[0][alive]]
        keep = cur != dead
        alive, cur = alive[keep], cur[keep]
        for column in table.columns[1:]:
            cut = int(np.searchsorted(alive, len(column)))  # tokens at least this long: a prefix
            if cut < alive.size:
                done.append(alive[cut:])
                alive, cur = alive[:cut], cur[:cut]
            if not alive.size:
                break
            cur = dfa[cur, column[alive]]
            keep = cur != dead
            alive, cur = alive[keep], cur[keep]
        done.append(alive)
    return table.ids[np.concatenate(done)]


def _group_rows(rows: np.ndarray, mult: np.ndarray) -> np.ndarray:
    """Class id per row of an int table: equal rows, equal ids (exact: hashed with the odd
    multipliers ``mult``, one per column, then checked)."""
    keys = (rows.astype(np.uint64) * mult).sum(axis=1)  # wraps modulo 2**64
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if not np.array_equal(rows, rows[first[inverse]]):  # a hash collision: sort the rows instead
        _, inverse = np.unique(rows, axis=0, return_inverse=True)
        inverse = inverse.ravel()
    return inverse


def depth_classes(dfa: np.ndarray, dead: int, depth: int) -> np.ndarray:
    """Class id per state such that two states in one class let the same byte strings of up to
    ``depth`` bytes through without reaching ``dead``: the same tokens of up to ``depth`` bytes
    are allowed in both. Bounded-depth partition refinement (Moore's algorithm, stopped at
    ``depth`` steps or when no class splits any more)."""
    _, first = np.unique(dfa.T, axis=0, return_index=True)
    dfa = dfa[:, np.sort(first)]  # one column per set of bytes that move every state alike
    is_dead = (np.arange(dfa.shape[0]) == dead).astype(np.int64)
    mult = np.random.default_rng(0).integers(1, 2**63, size=dfa.shape[1] + 1, dtype=np.uint64) | np.uint64(1)
    classes = is_dead
    count = 2
    for _ in range(depth):
        classes = _group_rows(np.concatenate([is_dead[:, None], classes[dfa]], axis=1), mult)
        new_count = int(classes.max()) + 1
        if new_count == count:
            break  # stable: no longer string tells more states apart
        count = new_count
    return classes


class CompiledAutomaton:
    """A regex compiled to a byte-level DFA, with token masks computed lazily per state.

    outlines-core compiles the regex (its ``Index`` over the 256 single bytes *is* the byte DFA);
    token-level masks are computed on first use of a state by walking every token's bytes through
    the DFA at once (numpy), then cached. This avoids outlines-core's eager index over the whole
    vocabulary (seconds to minutes and hundreds of MB for schemas with bounded strings).
    """

    def __init__(self, regex: str, vocab: TokenVocabulary, dfa: np.ndarray, finals: np.ndarray, compile_seconds: float) -> None:
        self.regex = regex
        self.vocab = vocab
        self.dfa = dfa  # int32 [S + 1, 256]; row S is the dead state
        self.dead = dfa.shape[0] - 1
        self.final_mask = finals  # bool [S + 1]
        self.compile_seconds = compile_seconds
        self.initial_state: int = 0
        self._table = token_table(vocab)
        self._eos = np.array(vocab.eos_token_ids, dtype=np.int64)
        self._words = (vocab.size + 31) // 32
        self._mask_cache: dict[int, torch.Tensor] = {}
        self._allowed_cache: dict[int, np.ndarray] = {}
        self._bool_cache: dict[int, torch.Tensor] = {}
        self._short_cache: dict[int, np.ndarray] = {}  # class -> allowed short tokens
        self._classes: np.ndarray | None = None
        if dfa.shape[0] <= MAX_CLASS_STATES:
            self._classes = depth_classes(dfa, self.dead, SHORT_TOKEN_BYTES)
        self._lock = threading.Lock()
        if not self.allowed_ids(self.initial_state).size:
            raise EmptyLanguageError(
                f"the constraint admits no output this vocabulary can spell (regex {_short(regex)})"
            )

    # -- states -----------------------------------------------------------------------------
    def is_final(self, state: int) -> bool:
        return bool(self.final_mask[state])

    def next_state(self, state: int, token_id: int) -> int | None:
        """The state after ``token_id``, or None if the token is not allowed there."""
        if token_id in self.vocab.eos_token_ids:
            return state if self.is_final(state) else None
        raw = self.vocab.tokens.get(token_id)
        return None if raw is None else self.walk_bytes(state, raw)

    def walk_bytes(self, state: int, data: bytes) -> int | None:
        """The state after the bytes ``data`` from ``state``, or None if they leave the language."""
        dfa, dead = self.dfa, self.dead
        for byte in data:
            state = int(dfa[state, byte])
            if state == dead:
                return None
        return state

    def forced_bytes(self, state: int, limit: int = 256) -> tuple[bytes, int]:
        """The bytes the grammar forces from ``state`` (the run of states with exactly one live
        byte that are not final), up to ``limit``, and the state they lead to."""
        dfa, dead = self.dfa, self.dead
        out = bytearray()
        while len(out) < limit and not self.is_final(state):
            live = np.flatnonzero(dfa[state] != dead)
            if live.size != 1:
                break
            out.append(int(live[0]))
            state = int(dfa[state, live[0]])
        return bytes(out), state

    @property
    def token_table(self) -> TokenTable:
        """The vocabulary's byte table (shared by every automaton over the vocabulary)."""
        return self._table

    def clear_state_caches(self) -> None:
        """Forget the per-state masks built so far (they are rebuilt lazily on the next visit)."""
        with self._lock:
            self._mask_cache.clear()
            self._allowed_cache.clear()
            self._bool_cache.clear()
            self._short_cache.clear()

    def allowed_ids(self, state: int) -> np.ndarray:
        """Sorted int64 array of the token ids allowed in ``state`` (EOS ids only when final)."""
        cached = self._allowed_cache.get(state)
        if cached is not None:
            return cached
        if self._classes is None:
            allowed = table_walk(self._table, self.dfa, self.dead, state)
        else:  # short tokens: shared by the state's class; long ones: walked here
            key = int(self._classes[state])
            short = self._short_cache.get(key)
            if short is None:
                short = np.sort(table_walk(self._table, self.dfa, self.dead, state, "short"))
                with self._lock:
                    self._short_cache[key] = short
            allowed = np.concatenate([short, table_walk(self._table, self.dfa, self.dead, state, "long")])
        if self.is_final(state):
            allowed = np.concatenate([allowed, self._eos])
        allowed = np.sort(allowed, kind="stable")  # a sorted run + a few: timsort merges
        with self._lock:
            self._allowed_cache[state] = allowed
        return allowed

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

    def allowed_mask(self, state: int) -> torch.Tensor:
        """bool [V]: the unpacked :meth:`bitmask`, cached per state (for one-position sampling)."""
        cached = self._bool_cache.get(state)
        if cached is None:
            cached = torch.zeros(self.vocab.size, dtype=torch.bool)
            cached[torch.from_numpy(self.allowed_ids(state))] = True
            with self._lock:
                self._bool_cache[state] = cached
        return cached

    def single_allowed(self, state: int) -> int | None:
        """The one allowed token id if the grammar forces it, else None."""
        ids = self.allowed_ids(state)
        return int(ids[0]) if ids.size == 1 else None

    def accepts(self, token_ids: list[int]) -> bool:
        """True if the token sequence leads from the start to a final state."""
        state: int = self.initial_state
        for t in token_ids:
            following = self.next_state(state, t)
            if following is None:
                return False
            state = following
        return self.is_final(state)

    @property
    def num_states(self) -> int:
        return self.dead

    def matcher(self) -> "AutomatonMatcher":
        """A fresh per-request matcher at the start state."""
        return AutomatonMatcher(self)


def _short(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


_BYTE_EOS = 256
#: the two end sentinels (see :func:`dfa_table`): Unicode noncharacters, "permanently reserved for
#: internal use", which no tokenizer's text holds
_SENTINELS = ("\ufdd0", "\ufdd1")


def _build_index(regex: str, sentinel: str) -> Any:
    """outlines-core's Index over the 256 single bytes for ``\x00(?:regex)<sentinel>``.

    The NUL start sentinel's transition gives the real start state: outlines-core 0.2.14 hangs
    building some regexes that start with a quote (for example a bounded JSON string) and builds the
    same ones instantly behind any other first byte. The end sentinel keeps every state of the
    user's regex non-accepting inside outlines-core, whose ``Index`` drops each transition from an
    accepting state to a non-accepting one (``ab(cd)*`` would accept only ``ab``); acceptance is
    read off the sentinel's transition instead.
    """
    from outlines_core import Index, Vocabulary

    tail = f"\\x{{{ord(sentinel):X}}}"
    return Index("\\x00(?:" + regex + ")" + tail, Vocabulary(_BYTE_EOS, {bytes([b]): [b] for b in range(256)}))


def _raw_table(index: Any) -> tuple[np.ndarray, np.ndarray]:
    """One build as a dense table int32 [n + 1, 256] (row n dead, row 0 the state past the NUL
    start sentinel) and the outlines-core final flags (the states just past the end sentinel)."""
    transitions = index.get_transitions()
    start = transitions[index.get_initial_state()][0]
    rows = list(transitions.values())
    sizes = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    total = int(sizes.sum())
    moves = np.empty((total, 3), dtype=np.int64)
    moves[:, 0] = np.repeat(np.fromiter(transitions.keys(), dtype=np.int64, count=len(rows)), sizes)
    moves[:, 1] = np.fromiter(chain.from_iterable(map(dict.keys, rows)), dtype=np.int64, count=total)
    moves[:, 2] = np.fromiter(chain.from_iterable(map(dict.values, rows)), dtype=np.int64, count=total)
    moves = moves[moves[:, 1] < 256]  # the EOS id's moves
    ids = np.unique(np.concatenate([[start], moves[:, 0], moves[:, 2]]))
    ids = np.concatenate([[start], ids[ids != start]])  # the real start first
    order = np.argsort(ids)
    number = lambda x: order[np.searchsorted(ids, x, sorter=order)]  # noqa: E731
    dead = len(ids)
    table = np.full((dead + 1, 256), dead, dtype=np.int32)
    table[number(moves[:, 0]), moves[:, 1]] = number(moves[:, 2])
    finals = np.zeros(dead + 1, dtype=bool)
    known = np.array([s for s in index.get_final_states()], dtype=np.int64)
    known = known[np.isin(known, ids)]
    finals[number(known)] = True
    return table, finals


def _exact_part(table: np.ndarray, finals: np.ndarray, sentinel: str) -> tuple[np.ndarray, np.ndarray, int, int]:
    """A build's trustworthy transitions: every move into a state past the end sentinel goes to an
    extra LOST row (outlines-core drops that state's onward moves, so where the user's regex itself
    reads the sentinel byte after a complete match this build cannot follow it). Returns the table
    [n + 2, 256] (row ``dead``, row ``lost``), acceptance per state, the dead and lost ids."""
    dead = table.shape[0] - 1
    lost = dead + 1
    out = np.empty((dead + 2, 256), dtype=np.int64)
    out[: dead + 1] = table
    out[: dead + 1][finals[table]] = lost
    out[lost] = lost
    out[dead] = dead
    accepting = np.zeros(dead + 2, dtype=bool)
    after = np.arange(dead + 1)
    for byte in sentinel.encode():  # the states the whole sentinel leads from to a final state
        after = table[after, byte]
    accepting[: dead + 1] = finals[after]
    accepting[dead] = False
    return out, accepting, dead, lost


def dfa_table(first: Any, second: Any) -> tuple[np.ndarray, np.ndarray]:
    """The user's regex as a dense byte DFA int32 [S + 1, 256] (start 0, dead S) and final flags,
    from two outlines-core builds behind different end sentinels (:data:`_SENTINELS`).

    Each build is exact along every path until the regex reads that build's own sentinel byte right
    after a complete match; there the other build (whose sentinel differs) carries on. The states
    are the reachable pairs of both builds' states (in the usual case the two move in lockstep, one
    pair per state). Only strings that read both sentinel bytes after complete matches are beyond
    both builds (strings holding both noncharacters U+FDD0 and U+FDD1 each right after a complete
    match: never in JSON, where nothing follows a complete value but whitespace). States from which no accepting state can be reached are
    folded into the dead state, so every live state is a prefix of some string of the language.
    """
    ta, fa, da, la = _exact_part(*_raw_table(first), _SENTINELS[0])
    tb, fb, db, lb = _exact_part(*_raw_table(second), _SENTINELS[1])
    width = tb.shape[0]
    keys = [0]  # pair key a * width + b; the start pair is (0, 0)
    index = {0: 0}
    rows: list[np.ndarray] = []
    frontier = np.array([0], dtype=np.int64)
    while frontier.size:
        a, b = frontier // width, frontier % width
        na, nb = ta[a], tb[b]  # [f, 256]
        dead = (na == da) | (nb == db) | ((na == la) & (nb == lb))
        nk = np.where(dead, -1, na * width + nb)
        rows.append(nk)
        fresh = np.unique(nk[nk >= 0])
        new = [int(k) for k in fresh if int(k) not in index]
        for k in new:
            index[k] = len(keys)
            keys.append(k)
        frontier = np.array(new, dtype=np.int64)
    n = len(keys)
    key_arr = np.array(keys, dtype=np.int64)
    order = np.argsort(key_arr)
    all_rows = np.concatenate(rows) if rows else np.zeros((0, 256), dtype=np.int64)
    pos = np.searchsorted(key_arr[order], np.maximum(all_rows, 0))
    ids = np.where(all_rows >= 0, order[np.minimum(pos, n - 1)], n)
    a, b = key_arr // width, key_arr % width
    accepting = np.where(a != la, fa[a], fb[b])
    return _prune(ids.astype(np.int64), accepting)


def _prune(table: np.ndarray, accepting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fold the states that reach no accepting state into the dead state and renumber breadth
    first from state 0: returns int32 [S + 1, 256] (row S dead) and bool [S + 1]."""
    n = table.shape[0]
    live = accepting.copy()
    src = np.repeat(np.arange(n), 256)
    dst = table.ravel()
    keep = dst < n
    src, dst = src[keep], dst[keep]
    by_dst = np.argsort(dst, kind="stable")
    preds = src[by_dst]
    start = np.searchsorted(dst[by_dst], np.arange(n + 1))
    frontier = np.flatnonzero(live)
    while frontier.size:  # co-reachability, backwards from the accepting states: each edge once
        lo, hi = start[frontier], start[frontier + 1]
        sizes = hi - lo
        offsets = np.repeat(lo - np.cumsum(sizes) + sizes, sizes)
        found = preds[np.arange(int(sizes.sum())) + offsets]
        frontier = np.unique(found[~live[found]])
        live[frontier] = True
    if not live[0]:  # the empty language: a start state with no way on
        return np.ones((2, 256), dtype=np.int32), np.zeros(2, dtype=bool)
    new_id = np.full(n + 1, -1, dtype=np.int64)
    new_id[0] = 0
    order = [np.array([0], dtype=np.int64)]
    count = 1
    frontier = order[0]
    while frontier.size:  # breadth-first renumbering over live states, one level at a time
        nxt = table[frontier].ravel()
        nxt = nxt[(nxt < n)]
        nxt = nxt[live[nxt] & (new_id[nxt] < 0)]
        _, first = np.unique(nxt, return_index=True)
        frontier = nxt[np.sort(first)]
        new_id[frontier] = np.arange(count, count + frontier.size)
        count += frontier.size
        order.append(frontier)
    states = np.concatenate(order)
    new_id[new_id < 0] = count
    out = np.vstack([new_id[table[states]], np.full((1, 256), count, dtype=np.int64)]).astype(np.int32)
    finals = np.zeros(count + 1, dtype=bool)
    finals[:count] = accepting[states]
    return out, finals


def _build_tables(regex: str) -> tuple[np.ndarray, np.ndarray]:
    return dfa_table(*(_build_index(regex, sentinel) for sentinel in _SENTINELS))


def _build_in_child(regex: str, conn: Any) -> None:  # pragma: no cover - child
    try:
        conn.send(("ok", pickle.dumps(_build_tables(regex))))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _build_with_timeout(regex: str, timeout: float | None) -> tuple[np.ndarray, np.ndarray]:
    """Build the DFA table; with a timeout the build runs in a forked child, killed on expiry."""
    if timeout is None or "fork" not in mp.get_all_start_methods():
        return _build_tables(regex)
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_build_in_child, args=(regex, child), daemon=True)
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


#: automata an AutomatonCompiler keeps in memory (least recently used out first; the disk cache keeps all)
MEMORY_CACHE_SIZE = 64


class AutomatonCompiler:
    """Compiles regexes against one vocabulary, with an in-memory and an on-disk cache."""

    def __init__(
        self,
        vocab: TokenVocabulary,
        cache_dir: str | os.PathLike[str] | None = None,
        disk_cache: bool = True,
        compile_timeout: float | None = 120.0,
        max_regex_chars: int = 200_000,
        max_states: int = 2_000_000,
    ) -> None:
        self.vocab = vocab
        self.disk_cache = disk_cache
        self.cache_dir = (cache_root(cache_dir) / "automata") if disk_cache else None
        self.compile_timeout = compile_timeout
        self.max_regex_chars = max_regex_chars
        self.max_states = max_states
        self._memory: LRUCache[str, CompiledAutomaton] = LRUCache(MEMORY_CACHE_SIZE)  # requests feed it: bounded

    def key(self, regex: str) -> str:
        """Cache key: the byte DFA depends on the regex and the outlines-core version only."""
        h = hashlib.sha256()
        for part in (regex, _OUTLINES_VERSION, "bytedfa-3-end-sentinels"):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:40]

    def compile(self, regex: str, max_regex_chars: int | None = None) -> CompiledAutomaton:
        """The automaton for ``regex`` (full match), from memory, disk, or a fresh build;
        ``max_regex_chars``: this call's cap on the regex (default: the compiler's)."""
        cap = self.max_regex_chars if max_regex_chars is None else max_regex_chars
        if len(regex) > cap:
            raise CompileLimitError(f"the constraint's regex has {len(regex)} characters, over the cap of {cap}")
        key = self.key(regex)
        hit = self._memory.get(key)
        if hit is not None:
            return hit
        start = time.perf_counter()
        built = self._load(key)
        if built is None:
            try:
                built = _build_with_timeout(regex, self.compile_timeout)
            except (CompileLimitError, GrammarError):
                raise
            except Exception as exc:  # outlines-core raises ValueError and friends
                raise GrammarError(f"could not compile the constraint {_short(regex)}: {exc}") from exc
            if built[0].shape[0] - 1 > self.max_states:
                raise CompileLimitError(
                    f"the constraint's automaton has {built[0].shape[0] - 1} states, over the cap of {self.max_states}"
                )
            self._store(key, built)
        automaton = CompiledAutomaton(regex, self.vocab, built[0], built[1], time.perf_counter() - start)
        self._memory.put(key, automaton)
        return automaton

    def _path(self, key: str) -> Path | None:
        return self.cache_dir / f"{key}.npz" if self.cache_dir else None

    def _load(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            with np.load(path) as data:
                return data["dfa"], data["finals"]
        except Exception:  # a corrupt or foreign file: rebuild
            return None

    def _store(self, key: str, built: tuple[np.ndarray, np.ndarray]) -> None:
        path = self._path(key)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, dfa=built[0], finals=built[1])
            os.replace(tmp, path)  # atomic: concurrent writers leave one whole file
        except OSError:
            if os.path.exists(tmp):
                os.unlink(tmp)



class OutlinesCoreBackend:
    """:class:`~constrained_spec.grammar.backends.GrammarBackend` over outlines-core's byte DFA: a
    spec's regex as a :class:`CompiledAutomaton` (memory and disk caches); a Lark grammar goes to
    ``fallback`` (llguidance), and a schema whose only exact form is a Lark grammar is refused."""

    name = "automaton"

    def __init__(self, vocab: TokenVocabulary, fallback: "GrammarBackend", cache_dir: Any = None, disk_cache: bool = True,
                 compile_timeout: float | None = 120.0) -> None:
        self.vocab = vocab
        self.fallback = fallback
        self.automata = AutomatonCompiler(vocab, cache_dir=cache_dir, disk_cache=disk_cache, compile_timeout=compile_timeout)

    def compile(self, spec: "OutputSpec", max_source_chars: int = 200_000, disk_cache: bool = True) -> "CompiledGrammar":
        """The automaton of ``spec.regex``; ``disk_cache=False``: a cold build, off the disk cache."""
        if spec.kind == "lark":
            return self.fallback.compile(spec, max_source_chars)
        if not spec.regex and spec.grammar is not None:
            raise CompileLimitError("this schema's regex passes max_regex_chars: only its Lark grammar holds it, which the "
                                    "automaton engine cannot run; use the lazy engine (the default)")
        if spec.grammar is not None and spec.narrowed:
            raise CompileLimitError("this schema's regex holds only part of its language (" + ", ".join(spec.narrowed[:3])
                                    + "); its Lark grammar holds all of it, which the automaton engine cannot run; "
                                    "use the lazy engine (the default)")
        compiler = self.automata
        if not disk_cache:
            compiler = AutomatonCompiler(self.vocab, disk_cache=False, compile_timeout=compiler.compile_timeout)
        return compiler.compile(spec.regex, max_source_chars)


class AutomatonMatcher:
    """:class:`GrammarMatcher` over a :class:`CompiledAutomaton` (shared, immutable, cached masks)."""

    def __init__(self, automaton: CompiledAutomaton) -> None:
        self.automaton = automaton
        self.vocab = automaton.vocab
        self._path: list[int] = [automaton.initial_state]
        self._tokens: list[int] = []

    @property
    def length(self) -> int:
        return len(self._path) - 1

    @property
    def tokens(self) -> list[int]:
        """The accepted tokens (a copy)."""
        return list(self._tokens)

    def is_terminated(self) -> bool:
        return bool(self._tokens) and self.is_eos(self._tokens[-1])

    def is_accepting(self) -> bool:
        return self.automaton.is_final(self._path[-1])

    def is_eos(self, token_id: int) -> bool:
        return token_id in self.vocab.eos_token_ids

    def allowed_ids(self) -> np.ndarray:
        return self.automaton.allowed_ids(self._path[-1])

    def allowed_mask(self) -> torch.Tensor:
        return self.automaton.allowed_mask(self._path[-1])

    def bitmask(self) -> torch.Tensor:
        return self.automaton.bitmask(self._path[-1])

    def forced_token(self) -> int | None:
        return self.automaton.single_allowed(self._path[-1])

    def forced_bytes(self, limit: int = FORCED_BYTES_LIMIT) -> bytes:
        return self.automaton.forced_bytes(self._path[-1], limit)[0]

    def count_allowed(self, token_ids: Sequence[int]) -> int:
        state = self._path[-1]
        if self.is_terminated():
            return 0
        for n, token in enumerate(token_ids):
            if self.is_eos(token) and n + 1 < len(token_ids):
                return n + int(self.automaton.is_final(state))  # nothing follows EOS
            nxt = self.automaton.next_state(state, int(token))
            if nxt is None:
                return n
            state = nxt
        return len(token_ids)

    def accepts_prefix_bytes(self, data: bytes) -> bool:
        return self.automaton.walk_bytes(self._path[-1], data) is not None

    def state_key(self) -> Hashable | None:
        return self._path[-1]

    def advance(self, token_id: int) -> None:
        if self.is_terminated():
            raise GrammarError("token after EOS")
        nxt = self.automaton.next_state(self._path[-1], token_id)
        if nxt is None:
            raise GrammarError(f"token {token_id} is not allowed in state {self._path[-1]}")
        self._path.append(nxt)
        self._tokens.append(token_id)

    def rollback(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot roll back to {length} of {self.length} tokens")
        del self._path[length + 1 :]
        del self._tokens[length:]
