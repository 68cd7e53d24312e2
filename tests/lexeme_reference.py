"""The greedy-lexing check over plain tuple nodes: the reference for
:mod:`constrained_spec.grammar.json_schema.lexeme_check`'s walks over hash-consed nodes.

Written for clarity, not speed: every node is a :func:`~.lexeme_check.to_node` tuple, derivatives
are built with ``_seq``/``_alt``/``_rep`` (flat sequences, copied) and remembered by value only.
A step is spent per new (derivative value, character) and per (state, cell) visited, which is the
budget the project's check keeps; so the answer *and* the steps left must be the same.
"""

from __future__ import annotations

from typing import Optional

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema import lexeme_check as lc
from constrained_spec.grammar.json_schema.lexeme_lang import cells


class OverBudget(Exception):
    pass


class TupleLang:
    """Nullability, fronts and derivatives of tuple nodes, remembered by value."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.derivs: dict[tuple, Optional[tuple]] = {}

    def spend(self) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise OverBudget

    def nullable(self, n: tuple) -> bool:
        return lc.nullable(n)

    def front(self, n: tuple) -> tuple:
        kind = n[0]
        acc: list = []
        if kind == "set":
            acc.append(n[1])
        elif kind == "seq":
            for x in n[1]:
                acc.extend(self.front(x))
                if not self.nullable(x):
                    break
        elif kind == "alt":
            for x in n[1]:
                acc.extend(self.front(x))
        else:
            acc.extend(self.front(n[1]))
        return tuple(dict.fromkeys(acc))

    def first_chars(self, n: tuple) -> ecma.Ranges:
        fr = self.front(n)
        return ecma.union(*fr) if fr else ()

    def deriv(self, n: tuple, c: int) -> Optional[tuple]:
        key = (n, c)
        if key in self.derivs:
            return self.derivs[key]
        self.spend()
        kind = n[0]
        out: Optional[tuple]
        if kind == "set":
            out = lc.EPS if ecma.contains(n[1], c) else None
        elif kind == "seq":
            items = n[1]
            if not items:
                out = None
            else:
                rest = lc._seq(list(items[1:])) if len(items) > 1 else lc.EPS
                head = self.deriv(items[0], c)
                alts = [None if head is None else lc._seq([head, rest])]
                if self.nullable(items[0]):
                    alts.append(self.deriv(rest, c))
                out = lc._alt(alts)
        elif kind == "alt":
            out = lc._alt([self.deriv(x, c) for x in n[1]])
        else:
            body, lo, hi = n[1], n[2], n[3]
            head = self.deriv(body, c)
            out = None if head is None else lc._seq([head, lc._rep(body, max(lo - 1, 0), None if hi is None else hi - 1)])
        self.derivs[key] = out
        return out


def conflict(lang: TupleLang, t1: tuple, t2: tuple, follow: ecma.Ranges) -> bool:
    """Whether a complete text of t1 leaves t2 able to read a character of ``follow``."""
    if not follow:
        return False
    seen = {(t1, t2)}
    todo = [(t1, t2)]
    while todo:
        a, b = todo.pop()
        if lang.nullable(a) and ecma.intersect(lang.first_chars(b), follow):
            return True
        fa, fb = lang.front(a), lang.front(b)
        if not fa or not fb:
            continue
        both = ecma.intersect(ecma.union(*fa), ecma.union(*fb))
        for c in [c for c in cells(list(fa) + list(fb)) if ecma.contains(both, c)] if both else []:
            lang.spend()
            da, db = lang.deriv(a, c), lang.deriv(b, c)
            if da is None or db is None:
                continue
            if (da, db) not in seen:
                seen.add((da, db))
                todo.append((da, db))
    return False


def size(n: tuple) -> int:
    """How many nodes n has (shared parts counted where they occur)."""
    if n[0] == "set":
        return 1
    if n[0] in ("seq", "alt"):
        return 1 + sum(size(x) for x in n[1])
    return 1 + size(n[1])


def reference_checked(terminals: dict[str, tuple], colive: list[frozenset[str]], follows: dict[str, frozenset[str]],
                      budget: int) -> tuple[bool, int]:
    """The check's answer and the steps it leaves, pair by pair over the maximal co-live groups,
    each lexeme against itself first, then the other pairs, small lexemes first in each (the order
    the project's check takes)."""
    lang = TupleLang(budget)
    try:
        if any(lang.nullable(n) for n in terminals.values()):
            return False, lang.budget
        follow_chars = {}
        for name in terminals:
            sets = [lang.first_chars(terminals[f]) for f in follows.get(name, ())]
            follow_chars[name] = ecma.union(*sets) if sets else ()
        wide = {name: lc.relaxed(node) for name, node in terminals.items()}
        if any(w is None for w in wide.values()):
            return False, lang.budget
        sz = {name: size(w) for name, w in wide.items() if w is not None}
        pairs = {(n1, n2) for group in lc._maximal(colive) for n1 in group if follow_chars[n1] for n2 in group}
        for n1, n2 in sorted(pairs, key=lambda p: (p[0] != p[1], min(sz[p[0]], sz[p[1]]), max(sz[p[0]], sz[p[1]]), p)):
            w1, w2 = wide[n1], wide[n2]
            assert w1 is not None and w2 is not None
            if conflict(lang, w1, w2, follow_chars[n1]):
                return False, lang.budget
    except (OverBudget, RecursionError):
        return False, lang.budget
    return True, lang.budget
