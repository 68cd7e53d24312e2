"""Brzozowski derivatives over hash-consed regex nodes, under a work budget.

The greedy-lexing check (:mod:`.lexeme_check`) walks the derivatives of large lexemes (a
50-170 KB regex of a JSON object) thousands of times. Here every node value is one integer: a
table maps each node's shape -- a character set, a sequence as *first item + rest* (a linked
list whose rests are shared, never copied), an alternation as a frozenset of member ids, a
counted repetition -- to its id, so building a derivative costs what it reads (not the length
of what is left) and equal values are equal ids.

The values are the ones :func:`~.lexeme_check.to_node`'s tuples hold: a flat sequence
``(a, b, c)`` is ``a + (b + c)``, items are never sequences or the empty string, alternations
are flat sets of non-alternations, repetitions are normalised as ``_rep`` does. So two nodes
are the same id exactly where their tuples are equal, and a walk spends one step per new
(derivative value, character), as the tuple walk did.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from constrained_spec.errors import CompileLimitError
from constrained_spec.grammar import ecma_regex as ecma

__all__ = ["Nodes", "Lang", "OverBudget", "NONE", "EPS_ID"]

#: the empty language
NONE = -1
#: the empty string
EPS_ID = 0

_SET, _SEQ, _ALT, _REP = 0, 1, 2, 3
_UNKNOWN = -2


class OverBudget(Exception):
    """The walk spent its step budget (past its deadline it raises CompileLimitError, kind "time")."""


class Nodes:
    """Interned nodes with the facts that depend on the node alone (nullability, size, relaxed
    form, front character sets), remembered. One table may serve several checks (the passes of
    one grammar build); each check's derivatives and step budget are its own (:class:`Lang`)."""

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}  # a node's shape -> its id
        self._kind: list[int] = [_SEQ]  # id -> kind (id 0: the empty sequence)
        self._a: list = [None]  # id -> ranges | first item | members | body
        self._b: list = [None]  # id -> rest | lower bound
        self._c: list = [None]  # id -> upper bound (repetitions)
        self._null: list[bool] = [True]
        #: id -> how many nodes its tuple form has (a sequence: 1 + its items')
        self._size: list[int] = [1]
        self._relaxed: dict[int, int] = {}
        self._front: dict[int, tuple[ecma.Ranges, ...]] = {}
        self._fronts: dict[tuple[ecma.Ranges, ...], tuple[ecma.Ranges, ...]] = {}
        self._first: dict[int, ecma.Ranges] = {}  # id of a front -> its union (the front kept in _fronts)
        self._from_tuple: dict[int, tuple[tuple, int]] = {}  # id of a tuple node -> (it, its id)

    # -- building ---------------------------------------------------------------------------

    def _intern(self, key: tuple, kind: int, a: object, b: object, c: object, null: bool, size: int) -> int:
        hit = self._ids.get(key)
        if hit is not None:
            return hit
        i = len(self._kind)
        self._ids[key] = i
        self._kind.append(kind)
        self._a.append(a)
        self._b.append(b)
        self._c.append(c)
        self._null.append(null)
        self._size.append(size)
        return i

    def char_set(self, ranges: ecma.Ranges) -> int:
        """The node of one character of ``ranges`` (NONE where it is empty)."""
        if not ranges:
            return NONE
        return self._intern((_SET, ranges), _SET, ranges, None, None, False, 1)

    def seq(self, first: int, rest: int) -> int:
        """``first`` then ``rest`` (either may be a sequence, the empty string or NONE)."""
        if first == NONE or rest == NONE:
            return NONE
        if first == EPS_ID:
            return rest
        if rest == EPS_ID:
            return first
        return self._append(first, rest)

    def _append(self, first: int, rest: int) -> int:
        """``first`` then ``rest``, both real (neither NONE nor the empty string): a sequence
        ``first`` rebuilt onto ``rest`` item by item, so that its items are never sequences."""
        kind, a, b = self._kind, self._a, self._b
        heads = []
        while kind[first] == _SEQ:  # first's items go before rest: rebuild its spine onto rest
            heads.append(a[first])
            first = b[first]
        out = self._cons(first, rest)
        for h in reversed(heads):
            out = self._cons(h, out)
        return out

    def _cons(self, item: int, rest: int) -> int:
        key = (_SEQ, item, rest)
        hit = self._ids.get(key)
        if hit is not None:
            return hit
        size = self._size
        items = size[item] + (size[rest] - 1 if self._kind[rest] == _SEQ else size[rest])
        return self._intern(key, _SEQ, item, rest, None, self._null[item] and self._null[rest], 1 + items)

    def alt(self, branches: list[int]) -> int:
        """The union of ``branches`` (NONE ones dropped, alternations flattened)."""
        members: set[int] = set()
        kind, a = self._kind, self._a
        for x in branches:
            if x == NONE:
                continue
            if kind[x] == _ALT:
                members.update(a[x])
            else:
                members.add(x)
        if not members:
            return NONE
        if len(members) == 1:
            return next(iter(members))
        fs = frozenset(members)
        null = self._null
        key = (_ALT, fs)
        hit = self._ids.get(key)
        if hit is not None:
            return hit
        size = self._size
        return self._intern(key, _ALT, fs, None, None, any(null[m] for m in fs), 1 + sum(size[m] for m in fs))

    def rep(self, body: int, lo: int, hi: Optional[int]) -> int:
        """``body`` repeated ``lo`` to ``hi`` times (None: unbounded), normalised."""
        if hi == 0 or body == EPS_ID:
            return EPS_ID
        if body == NONE:
            return EPS_ID if lo == 0 else NONE
        if lo == 1 and hi == 1:
            return body
        return self._intern((_REP, body, lo, hi), _REP, body, lo, hi, lo == 0 or self._null[body], 1 + self._size[body])

    def node(self, n: Optional[tuple]) -> int:
        """The id of a :func:`~.lexeme_check.to_node` tuple (remembered by the tuple's identity)."""
        if n is None:
            return NONE
        hit = self._from_tuple.get(id(n))
        if hit is not None and hit[0] is n:
            return hit[1]
        out = self.from_regex_by(n, self.node)  # a normalised tuple has a regex node's shape
        self._from_tuple[id(n)] = (n, out)
        return out

    def from_regex_by(self, node: ecma.Node, sub: Callable[[ecma.Node], int]) -> int:
        """The id of an ``ecma_regex`` node (what :meth:`node` gives for its
        :func:`~.lexeme_check.to_node` tuple, without building the tuple), with ``sub`` the same
        for its parts (so a caller may memoise it)."""
        kind = node[0]
        if kind == "set":
            return self.char_set(tuple(node[1]))
        if kind == "seq":
            items = node[1]
            if not items:
                return EPS_ID
            out = sub(items[-1])
            for x in reversed(items[:-1]):
                out = self.seq(sub(x), out)
            return out
        if kind == "alt":
            return self.alt([sub(x) for x in node[1]])
        if kind == "rep":
            return self.rep(sub(node[1]), node[2], node[3])
        raise ecma.PatternError(f"unsupported regex node {kind!r}")

    def derivative_by(self, i: int, c: int, sub: Callable[[int, int], int]) -> int:
        """The derivative of node ``i`` by character ``c``, with ``sub`` the same for its parts (the
        caller remembers them and counts its steps)."""
        a = self._a
        k = self._kind[i]
        if k == _SET:
            return EPS_ID if ecma.contains(a[i], c) else NONE
        if k == _SEQ:
            if i == EPS_ID:
                return NONE
            head, rest = a[i], self._b[i]
            out = self.seq(sub(head, c), rest)
            return self.alt([out, sub(rest, c)]) if self._null[head] else out
        if k == _ALT:
            return self.alt([sub(m, c) for m in a[i]])
        body, lo, hi = a[i], self._b[i], self._c[i]
        return self.seq(sub(body, c), self.rep(body, max(lo - 1, 0), None if hi is None else hi - 1))

    def relaxed(self, i: int, above: int) -> int:
        """Node ``i`` with every repetition bounded above ``above`` made unbounded (its lower bound
        capped at 1): what :func:`~.lexeme_check.relaxed` gives, remembered per node."""
        if i == NONE:
            return NONE
        hit = self._relaxed.get(i)
        if hit is not None:
            return hit
        kind, a = self._kind, self._a
        k = kind[i]
        if k == _SET or i == EPS_ID:
            out = i
        elif k == _SEQ:
            heads = []
            x = i
            while kind[x] == _SEQ:  # the spine, without recursing along it
                heads.append(a[x])
                x = self._b[x]
            out = self.relaxed(x, above)
            for h in reversed(heads):
                out = self.seq(self.relaxed(h, above), out)
        elif k == _ALT:
            out = self.alt([self.relaxed(m, above) for m in a[i]])
        else:
            body, lo, hi = self.relaxed(a[i], above), self._b[i], self._c[i]
            out = self.rep(body, min(lo, 1), None) if hi is not None and hi > above else self.rep(body, lo, hi)
        self._relaxed[i] = out
        return out

    def size(self, i: int) -> int:
        """How many nodes the tuple form of node ``i`` has (shared parts counted where they occur)."""
        return self._size[i]

    # -- questions --------------------------------------------------------------------------

    def nullable(self, i: int) -> bool:
        """Whether node ``i`` matches the empty string."""
        return self._null[i]

    def front(self, i: int) -> tuple[ecma.Ranges, ...]:
        """The character sets a first character of node ``i`` is drawn from, one object per value."""
        hit = self._front.get(i)
        if hit is not None:
            return hit
        kind, a, b = self._kind, self._a, self._b
        acc: list[ecma.Ranges] = []
        k = kind[i]
        if k == _SET:
            acc.append(a[i])
        elif k == _SEQ:
            x = i
            while x != EPS_ID:
                if kind[x] != _SEQ:  # the last item
                    acc.extend(self.front(x))
                    break
                head = a[x]
                acc.extend(self.front(head))
                if not self._null[head]:
                    break
                x = b[x]
        elif k == _ALT:
            for m in a[i]:
                acc.extend(self.front(m))
        else:
            acc.extend(self.front(a[i]))
        out = tuple(dict.fromkeys(acc))
        out = self._fronts.setdefault(out, out)
        self._front[i] = out
        return out

    def first_chars(self, i: int) -> ecma.Ranges:
        """The union of node ``i``'s front sets, as one range tuple."""
        fr = self.front(i)
        hit = self._first.get(id(fr))
        if hit is None:
            hit = self._first[id(fr)] = ecma.union(*fr) if fr else ()
        return hit


class Lang:
    """One check's walk over a :class:`Nodes` table: derivatives by character, remembered, each new
    one a step against the budget, and the character cells two fronts share."""

    def __init__(self, budget: int, deadline: Optional[float] = None, nodes: Optional[Nodes] = None) -> None:
        self.budget = budget
        self.deadline = deadline  # time.monotonic() past which the work stops (checked every 1024 steps)
        self.nodes = nodes = nodes if nodes is not None else Nodes()
        self.node, self.nullable, self.front, self.first_chars = nodes.node, nodes.nullable, nodes.front, nodes.first_chars
        self._deriv: dict[int, int] = {}  # (character << 32 | id) -> derivative id (NONE: empty)
        self._cells: dict[tuple[int, int], list[int]] = {}
        self._meet: dict[tuple[int, int], tuple[ecma.Ranges, ecma.Ranges, bool]] = {}

    def spend(self) -> None:
        """Count one step against the budget (:class:`OverBudget` once it is spent)."""
        self.budget -= 1
        if self.budget < 0:
            raise OverBudget
        if self.deadline is not None and self.budget % 1024 == 0 and time.monotonic() > self.deadline:
            # the wall-time guard is no "unsure" answer: it ends the compile (kind "time"), so the
            # check's verdict depends on its step budget alone
            raise CompileLimitError("the greedy-lexing check passed the compile's time budget", kind="time")

    def meets(self, a: ecma.Ranges, b: ecma.Ranges) -> bool:
        """Whether two range tuples share a character (remembered per pair of objects, kept beside
        the answer so that their ids are not reused)."""
        key = (id(a), id(b))
        hit = self._meet.get(key)
        if hit is not None and hit[0] is a and hit[1] is b:
            return hit[2]
        out = bool(ecma.intersect(a, b))
        self._meet[key] = (a, b, out)
        return out

    def shared_cells(self, fa: tuple[ecma.Ranges, ...], fb: tuple[ecma.Ranges, ...]) -> list[int]:
        """One character per cell of the partition both fronts' sets induce, inside the
        intersection of their unions, in order (remembered per pair of front objects)."""
        key = (id(fa), id(fb))
        hit = self._cells.get(key)
        if hit is None:
            both = ecma.intersect(ecma.union(*fa), ecma.union(*fb))
            hit = [c for c in cells(list(fa) + list(fb)) if ecma.contains(both, c)] if both else []
            self._cells[key] = hit
        return hit

    def deriv(self, i: int, c: int) -> int:
        """The derivative of node ``i`` by character ``c`` (one step for each new pair)."""
        key = c << 32 | i
        hit = self._deriv.get(key, _UNKNOWN)
        if hit != _UNKNOWN:
            return hit
        self.spend()
        out = self.nodes.derivative_by(i, c, self.deriv)
        self._deriv[key] = out
        return out


def partition_edges(sets: list[ecma.Ranges]) -> list[int]:
    """The sorted code points where some set starts or ends (its last + 1): between two neighbours,
    every character is in the same sets."""
    bounds: set[int] = set()
    for rs in sets:
        for a, b in rs:
            bounds.add(a)
            bounds.add(b + 1)
    return sorted(bounds)


def cells(sets: list[ecma.Ranges]) -> list[int]:
    """One representative code point per cell of the partition the range sets induce, for the
    cells inside their union."""
    return [a for a in partition_edges(sets)[:-1] if any(ecma.contains(rs, a) for rs in sets)]
