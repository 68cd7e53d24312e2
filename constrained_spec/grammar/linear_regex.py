"""Linear-time matching of schema patterns: the one place where request data meets a regex.

JSON Schema ``pattern``, ``patternProperties`` (and ``propertyNames`` through ``pattern``) and the
compiler's own ``format`` patterns are read as ECMA-262 patterns by
:mod:`constrained_spec.grammar.ecma_regex` (the semantics the compiler already enforces: ASCII
``\\d``/``\\w``/``\\s``, ``.`` without line terminators, ``$`` only at the very end). This module
runs that parse tree as a Thompson NFA, simulated with a lazily built, bounded DFA: the work is
linear in the length of the string for a given pattern, whatever the pattern (``^(a+)+$`` on 40
a's answers in microseconds, where Python's backtracking ``re`` takes hours).

Patterns that have no linear-time reading (back references, lookaround) or that ecma_regex does
not read are refused with :class:`PatternRefused`, a :class:`~constrained_spec.errors.GrammarError`;
a pattern whose automaton would be larger than :data:`MAX_NFA_STATES` (counted repetition such as
``a{100000}``) is refused with :class:`PatternTooLarge`, a
:class:`~constrained_spec.errors.CompileLimitError`. Nothing here ever backtracks.
"""

from __future__ import annotations

import bisect
import functools
import threading
from typing import Any

from constrained_spec.errors import CompileLimitError, GrammarError
from constrained_spec.grammar import ecma_regex as ecma

__all__ = [
    "MAX_NFA_STATES",
    "PatternRefused",
    "PatternTooLarge",
    "LinearPattern",
    "compile_pattern",
    "pattern_search",
    "pattern_fullmatch",
    "pattern_problem",
    "patterns_disjoint",
]

#: the most NFA states one pattern may expand to (counted repetitions are unrolled)
MAX_NFA_STATES = 20_000
#: the most cached DFA transitions per pattern (the cache is cleared past it: memory stays bounded)
MAX_DFA_TRANSITIONS = 50_000
#: compiled patterns kept (least recently used dropped first): patterns arrive with requests
PATTERN_CACHE_SIZE = 512

# NFA state kinds
_CHAR, _SPLIT, _BOL, _EOL, _MATCH = range(5)


class PatternRefused(GrammarError):
    """A pattern that cannot be matched in linear time (back references, lookaround) or that the
    ECMA-262 reader does not accept; names the pattern and the reason."""

    def __init__(self, pattern: str, reason: str) -> None:
        self.pattern = pattern
        self.reason = reason
        shown = pattern if len(pattern) <= 80 else pattern[:80] + "..."
        super().__init__(f"pattern {shown!r} cannot be matched in linear time: {reason}")


class PatternTooLarge(CompileLimitError):
    """A pattern whose automaton exceeds :data:`MAX_NFA_STATES` states."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        shown = pattern if len(pattern) <= 80 else pattern[:80] + "..."
        super().__init__(f"pattern {shown!r} expands to more than {MAX_NFA_STATES} automaton states")


class _TooLarge(Exception):
    pass


class _Builder:
    """Thompson construction over ecma_regex nodes; states are appended to flat lists."""

    def __init__(self) -> None:
        self.kind: list[int] = []
        self.arg: list[Any] = []  # _CHAR: (starts, ends); others: None
        self.out: list[list[int]] = []

    def new(self, kind: int, arg: Any = None) -> int:
        if len(self.kind) >= MAX_NFA_STATES:
            raise _TooLarge
        self.kind.append(kind)
        self.arg.append(arg)
        self.out.append([])
        return len(self.kind) - 1

    def build(self, node: Any) -> tuple[int, list[int]]:
        """(entry state, dangling states whose out-list the next fragment joins)."""
        kind = node[0]
        if kind == "set":
            ranges = node[1]
            s = self.new(_CHAR, (tuple(a for a, _ in ranges), tuple(b for _, b in ranges)))
            return s, [s]
        if kind in ("bol", "eol"):
            s = self.new(_BOL if kind == "bol" else _EOL)
            return s, [s]
        if kind == "seq":
            return self.seq(node[1])
        if kind == "alt":
            s = self.new(_SPLIT)
            ends: list[int] = []
            for branch in node[1]:
                entry, dangling = self.build(branch)
                self.out[s].append(entry)
                ends += dangling
            return s, ends
        if kind == "rep":
            return self.rep(node[1], node[2], node[3])
        raise ecma.PatternError(f"unknown node {kind!r}")

    def seq(self, items: list) -> tuple[int, list[int]]:
        if not items:
            s = self.new(_SPLIT)
            return s, [s]
        entry, dangling = self.build(items[0])
        for item in items[1:]:
            e2, d2 = self.build(item)
            self.join(dangling, e2)
            dangling = d2
        return entry, dangling

    def join(self, dangling: list[int], target: int) -> None:
        for d in dangling:
            self.out[d].append(target)

    def rep(self, body: Any, lo: int, hi: int | None) -> tuple[int, list[int]]:
        parts: list[Any] = [body] * lo
        start = self.new(_SPLIT)
        dangling = [start]
        for part in parts:
            entry, d = self.build(part)
            self.join(dangling, entry)
            dangling = d
        if hi is None:
            loop = self.new(_SPLIT)  # loop -> body -> loop; loop -> exit
            self.join(dangling, loop)
            entry, d = self.build(body)
            self.out[loop].append(entry)
            self.join(d, loop)
            return start, [loop]
        exits = list(dangling)
        for _ in range(hi - lo):
            opt = self.new(_SPLIT)
            self.join(dangling, opt)
            entry, d = self.build(body)
            self.out[opt].append(entry)
            exits.append(opt)
            dangling = d
        return start, exits + [x for x in dangling if x not in exits]


class LinearPattern:
    """One pattern as an NFA with a lazily built DFA over code points (search and full match)."""

    def __init__(self, pattern: str, node: Any) -> None:
        self.pattern = pattern
        b = _Builder()
        try:
            entry, dangling = b.build(node)
            match = b.new(_MATCH)
        except _TooLarge:
            raise PatternTooLarge(pattern) from None
        except RecursionError:
            raise PatternRefused(pattern, "nested too deeply") from None
        b.join(dangling, match)
        self.kind, self.arg, self.out = b.kind, b.arg, b.out
        self.start = entry
        self.match = match
        self._ids: dict[frozenset, int] = {}
        self._sets: list[frozenset] = []
        self._step: dict[tuple[int, int, bool], int] = {}
        self._lock = threading.Lock()  # the DFA cache is shared by the threads that match

    def _closure(self, seeds: Any, at_start: bool, at_end: bool) -> frozenset:
        seen: set[int] = set()
        stack = list(seeds)
        kind, out = self.kind, self.out
        while stack:
            s = stack.pop()
            if s in seen:
                continue
            seen.add(s)
            k = kind[s]
            if k == _SPLIT or (k == _BOL and at_start) or (k == _EOL and at_end):
                stack.extend(out[s])
        return frozenset(seen)

    def _intern(self, states: frozenset) -> int:
        i = self._ids.get(states)
        if i is None:
            i = self._ids[states] = len(self._sets)
            self._sets.append(states)
        return i

    def _advance(self, cur: int, cp: int, search: bool) -> int:
        key = (cur, cp, search)
        nxt = self._step.get(key)
        if nxt is not None:
            return nxt
        targets: list[int] = []
        for s in self._sets[cur]:
            if self.kind[s] == _CHAR:
                starts, ends = self.arg[s]
                j = bisect.bisect_right(starts, cp) - 1
                if j >= 0 and cp <= ends[j]:
                    targets += self.out[s]
        if search:
            targets.append(self.start)
        if len(self._step) >= MAX_DFA_TRANSITIONS:  # bounded memory: start the cache afresh
            self._step.clear()
            self._ids.clear()
            self._sets = [self._sets[cur]]
            self._ids[self._sets[0]] = 0
            cur = 0
        nxt = self._intern(self._closure(targets, False, False))
        self._step[(cur, cp, search)] = nxt
        return nxt

    def _run(self, text: str, search: bool) -> bool:
        with self._lock:
            return self._run_locked(text, search)

    def _run_locked(self, text: str, search: bool) -> bool:
        cur = self._intern(self._closure([self.start], True, False))
        for ch in text:
            if search and self.match in self._sets[cur]:
                return True
            cur = self._advance(cur, ord(ch), search)
        return self.match in self._closure(self._sets[cur], not text, True)

    def search(self, text: str) -> bool:
        """Whether the pattern matches somewhere in ``text`` (JSON Schema's semantics)."""
        return self._run(text, True)

    def fullmatch(self, text: str) -> bool:
        """Whether the pattern matches all of ``text``."""
        return self._run(text, False)


@functools.lru_cache(maxsize=PATTERN_CACHE_SIZE)
def compile_pattern(pattern: str) -> LinearPattern:
    """``pattern`` (ECMA-262) ready to match in linear time (cached; refusals are not cached).

    Raises :class:`PatternRefused` or :class:`PatternTooLarge`.
    """
    try:
        node = ecma.parse(pattern)
    except ecma.PatternError as exc:
        raise PatternRefused(pattern, str(exc)) from None
    return LinearPattern(pattern, node)


def pattern_problem(pattern: str) -> GrammarError | None:
    """The refusal :func:`compile_pattern` would raise for ``pattern``, or None when it matches."""
    try:
        compile_pattern(pattern)
    except (PatternRefused, PatternTooLarge) as exc:
        return exc
    return None


def pattern_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, in time linear in ``len(text)``."""
    return compile_pattern(pattern).search(text)


def pattern_fullmatch(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches all of ``text``, in time linear in ``len(text)``."""
    return compile_pattern(pattern).fullmatch(text)


#: the most (state, state) configurations :func:`patterns_disjoint` explores before answering None
MAX_PRODUCT_CONFIGS = 50_000

_WAIT, _DONE = -1, -2  # search semantics: before the match starts / after it ended


def _ranges_meet(a: tuple, b: tuple) -> bool:
    (sa, ea), (sb, eb) = a, b
    i = j = 0
    while i < len(sa) and j < len(sb):
        if ea[i] < sb[j]:
            i += 1
        elif eb[j] < sa[i]:
            j += 1
        else:
            return True
    return False


_ANY = ((0,), (ecma.MAX_CP,))


def patterns_disjoint(pa: str, pb: str) -> bool | None:
    """Whether no string matches both patterns (search semantics), decided exactly on the
    product of their automata; None when that product is larger than
    :data:`MAX_PRODUCT_CONFIGS` (or a pattern is refused): unknown."""
    try:
        a, b = compile_pattern(pa), compile_pattern(pb)
    except (PatternRefused, PatternTooLarge):
        return None

    def eps(m: LinearPattern, s: int, at0: bool) -> list[tuple[int, bool]]:
        """(successor, takes the end anchor) of s by one empty move."""
        if s == _WAIT:
            return [(m.start, False)]
        if s < 0:
            return []
        k = m.kind[s]
        if k == _SPLIT or (k == _BOL and at0):
            return [(t, False) for t in m.out[s]]
        if k == _EOL:
            return [(t, True) for t in m.out[s]]
        if k == _MATCH:
            return [(_DONE, False)]
        return []

    def reads(m: LinearPattern, s: int) -> tuple | None:
        if s < 0:
            return _ANY
        return m.arg[s] if m.kind[s] == _CHAR else None

    def after(m: LinearPattern, s: int) -> list[int]:
        return [s] if s < 0 else m.out[s]

    start = (_WAIT, _WAIT, True, False)
    seen = {start}
    stack = [start]
    while stack:
        if len(seen) > MAX_PRODUCT_CONFIGS:
            return None
        x, y, at0, end = stack.pop()
        if x in (_DONE, a.match) and y in (_DONE, b.match):
            return False
        nxt: list[tuple[int, int, bool, bool]] = []
        nxt += [(t, y, at0, end or e) for t, e in eps(a, x, at0)]
        nxt += [(x, t, at0, end or e) for t, e in eps(b, y, at0)]
        if not end:
            rx, ry = reads(a, x), reads(b, y)
            if rx is not None and ry is not None and _ranges_meet(rx, ry):
                nxt += [(tx, ty, False, False) for tx in after(a, x) for ty in after(b, y)]
        for c in nxt:
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return True
