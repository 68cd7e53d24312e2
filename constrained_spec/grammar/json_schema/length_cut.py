"""Exact intersection of an ECMA pattern node with a length window: ``{s in L(node) : lo <= len(s) <= hi}``.

:func:`cut` answers a node of exactly that language, or raises :class:`Inexact` where writing it as
a regex would take more than a budget of nodes (a pattern whose length is spread over several
variable parts, e.g. ``(\\S+\\s+){0,9}\\S+`` under ``maxLength: 100``, needs the product of the pattern
with a length counter, which a regex can only spell by listing the splits). The caller then chooses
what to do (:meth:`~.emit_string.StringEmitter.constrain_length`), never silently a smaller language.

How: a repetition of a fixed-width body takes new counts; a sequence with one variable part gives
that part the window left by the others; otherwise the sequence is split on the exact length of its
first part (``A{j} R{lo-j..hi-j}`` for each j), lengths that need no cut of the rest merged into one
branch; a repetition of a variable-width body is unrolled into such sequences.
"""

from __future__ import annotations

from typing import Optional

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.ecma_regex import Node

__all__ = ["Inexact", "cut", "CUT_BUDGET"]

#: most nodes one :func:`cut` may build before it answers :class:`Inexact`
CUT_BUDGET = 3000

_EPS: Node = ("seq", [])


class Inexact(Exception):
    """The length window cannot be written into this pattern within the budget."""


class _Cutter:
    def __init__(self, budget: int) -> None:
        self.left = budget
        self.memo: dict[tuple[int, int, Optional[int]], tuple[Node, Optional[Node]]] = {}
        #: id of a node -> (the node, its ``node_len``): the sequences' rests are new objects whose
        #: items are asked about again at every split (quadratic in a long sequence without it)
        self.lens: dict[int, tuple[Node, tuple[int, Optional[int]]]] = {}

    def node_len(self, node: Node) -> tuple[int, Optional[int]]:
        """:func:`~constrained_spec.grammar.ecma_regex.node_len`, remembered by identity."""
        hit = self.lens.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = ecma.node_len_by(node, self.node_len)
        self.lens[id(node)] = (node, out)
        return out

    def spend(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise Inexact()

    def cut(self, node: Node, lo: int, hi: Optional[int]) -> Optional[Node]:
        lo = max(lo, 0)
        if hi is not None and hi < lo:
            return None
        mn, mx = self.node_len(node)
        if mn >= lo and (hi is None or (mx is not None and mx <= hi)):
            return node
        if (hi is not None and mn > hi) or (mx is not None and mx < lo):
            return None
        key = (id(node), lo, hi)
        hit = self.memo.get(key)
        if hit is not None and hit[0] is node:  # the memo holds node, so its id is not reused
            return hit[1]
        self.spend()
        out = self._cut(node, lo, hi, mn, mx)
        self.memo[key] = (node, out)
        return out

    def _cut(self, node: Node, lo: int, hi: Optional[int], mn: int, mx: Optional[int]) -> Optional[Node]:
        kind = node[0]
        if kind == "alt":
            bs = [b for b in (self.cut(x, lo, hi) for x in node[1]) if b is not None]
            return None if not bs else bs[0] if len(bs) == 1 else ("alt", bs)
        if kind == "seq":
            return self._seq(list(node[1]), lo, hi)
        if kind == "rep":
            return self._rep(node[1], node[2], node[3], lo, hi)
        raise Inexact()  # a set has length 1 (always in or out above); anchors do not reach here

    def _seq(self, items: list[Node], lo: int, hi: Optional[int]) -> Optional[Node]:
        if not items:
            return _EPS if lo == 0 else None
        if len(items) == 1:
            return self.cut(items[0], lo, hi)
        lens = [self.node_len(x) for x in items]
        var = [i for i, (a, b) in enumerate(lens) if b is None or b > a]
        if len(var) == 1:  # one variable part: it takes the window the fixed parts leave
            i = var[0]
            fixed = sum(a for k, (a, _) in enumerate(lens) if k != i)
            sub = self.cut(items[i], lo - fixed, None if hi is None else hi - fixed)
            return None if sub is None else ("seq", items[:i] + [sub] + items[i + 1 :])
        first, rest = items[0], ("seq", items[1:])
        amn, amx = lens[0]
        rmn, rmx = self.node_len(rest)
        if amn == amx:
            sub = self.cut(rest, lo - amn, None if hi is None else hi - amn)
            return None if sub is None else ("seq", [first, sub])
        # split on the length j of the first part: the lengths for which the rest needs no cut
        # (lo - j <= rmn and rmx <= hi - j) make one branch first{f_lo..f_hi} rest, every other j
        # its own branch first{j} rest{lo-j..hi-j}
        top = amx if hi is None else (hi - rmn if amx is None else min(amx, hi - rmn))
        f_lo = max(amn, lo - rmn)
        f_hi: Optional[int]
        if hi is None:
            f_hi = top
        elif rmx is None:
            f_hi = f_lo - 1
        else:
            f_hi = hi - rmx if top is None else min(top, hi - rmx)
        free = f_hi is None or f_lo <= f_hi
        branches = []
        if free:
            a = self.cut(first, f_lo, f_hi)
            if a is not None:
                branches.append(("seq", [a, rest]))
        end = f_lo - 1 if top is None else (min(top, f_lo - 1) if hi is None else top)
        for j in range(amn, end + 1):
            if free and j >= f_lo and (f_hi is None or j <= f_hi):
                continue
            a = self.cut(first, j, j)
            if a is None:
                continue
            r = self.cut(rest, lo - j, None if hi is None else hi - j)
            if r is not None:
                self.spend()
                branches.append(("seq", [a, r]))
        return None if not branches else branches[0] if len(branches) == 1 else ("alt", branches)

    def _rep(self, body: Node, a: int, b: Optional[int], lo: int, hi: Optional[int]) -> Optional[Node]:
        bmn, bmx = self.node_len(body)
        if bmn == bmx:  # fixed width w > 0 (width 0 never needs a cut)
            w = bmn
            c_lo = max(a, -(-lo // w))
            c_hi = b if hi is None else (hi // w if b is None else min(b, hi // w))
            if c_hi is not None and c_lo > c_hi:
                return None
            return ("rep", body, c_lo, c_hi)
        if bmn == 0:  # a nullable body: the empty copies add nothing, repeat its other strings
            nonempty = self.cut(body, 1, None)
            if nonempty is None:
                return _EPS if lo == 0 else None
            return self._rep(nonempty, 0, b, lo, hi)
        if b is not None and b <= 1:  # at most one copy
            if b == 0:
                return _EPS if lo == 0 else None
            sub = self.cut(body, max(lo, 1), hi)
            if a == 1 or lo > 0:
                return sub
            return _EPS if sub is None else ("rep", sub, 0, 1)
        # variable width, every copy at least bmn long: at most hi // bmn copies are of use
        if hi is not None:
            cap = hi // bmn
            b = cap if b is None else min(b, cap)
            if a > b:
                return None
        if b is not None:
            if b - a > 64:
                raise Inexact()
            return self._seq([body] * a + self._optional_tail(body, b - a), lo, hi)
        # unbounded above, a lower bound lo > 0 only: at least one copy, then the same again
        if -(-lo // bmn) > 64:
            raise Inexact()
        return self._seq([body] * max(a, 1) + [("rep", body, 0, None)], lo, hi)

    def _optional_tail(self, body: Node, k: int) -> list[Node]:
        """``(B(B(...)?)?)?`` k deep, as one item (a list of at most one node)."""
        if k <= 0:
            return []
        node: Node = ("rep", body, 0, 1)
        for _ in range(k - 1):
            node = ("rep", ("seq", [body, node]), 0, 1)
        return [node]


def cut(node: Node, lo: int, hi: Optional[int], budget: int = CUT_BUDGET) -> Optional[Node]:
    """A node of exactly the strings of ``node`` whose length is in ``lo..hi`` (None: empty).
    Raises :class:`Inexact` past ``budget`` nodes."""
    try:
        return _Cutter(budget).cut(node, lo, hi)
    except RecursionError as e:
        raise Inexact() from e
