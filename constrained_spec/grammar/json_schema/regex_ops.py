"""Pure helpers on ECMA pattern ASTs (the node tuples of :mod:`constrained_spec.grammar.ecma_regex`).

Length shaping (:func:`shrink`, :func:`grow`), finite languages (:func:`finite_strings`),
Brzozowski derivatives (:func:`deriv`), first-character sets (:func:`first_set`) and the
trimming of unanchored ends.  No compiler state: every function maps nodes to nodes or facts.
"""

from __future__ import annotations

from typing import Optional

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.ecma_regex import Node, Ranges

__all__ = [
    "shrink",
    "grow",
    "finite_strings",
    "nullable_node",
    "deriv",
    "trim_unanchored",
    "first_set",
    "first_chars_disjoint",
]


def shrink(node: Node, limit: int) -> Optional[Node]:
    """A sub-language of node whose strings have at most ``limit`` code points (or None)."""
    kind = node[0]
    mn, mx = ecma.node_len(node)
    if mn > limit:
        return None
    if mx is not None and mx <= limit:
        return node
    if kind == "alt":
        bs = [x for x in (shrink(b, limit) for b in node[1]) if x is not None]
        return ("alt", bs) if bs else None
    if kind == "seq":
        items = list(node[1])
        lens = [ecma.node_len(x) for x in items]
        budget = limit - sum(a for a, _ in lens)
        var = [i for i, (a, b) in enumerate(lens) if b is None or b > a]
        out = list(items)
        # how much longer than its shortest each bounded item can be
        spread = {i: b - a for i, (a, b) in enumerate(lens) if b is not None}
        # bounded variable items that fit are kept; the rest share what is left evenly
        shares: dict[int, int] = {}
        remaining = budget
        todo = list(var)
        while todo:
            each = remaining // len(todo)
            fixed_now = [i for i in todo if i in spread and spread[i] <= each]
            if not fixed_now:
                for k, i in enumerate(todo):
                    shares[i] = each + (remaining - each * len(todo) if k == 0 else 0)
                break
            for i in fixed_now:
                shares[i] = spread[i]
                remaining -= shares[i]
                todo.remove(i)
        for i, extra in shares.items():
            sub = shrink(items[i], lens[i][0] + extra)
            if sub is None:
                return None
            out[i] = sub
        return ("seq", out)
    if kind == "rep":
        body, a, b = node[1], node[2], node[3]
        bmn, bmx = ecma.node_len(body)
        if bmx is not None and bmn == bmx:
            if bmn == 0:
                return ("rep", body, a, a)
            c = limit // bmn
            if c < a:
                return None
            return ("rep", body, a, c if b is None else min(b, c))
        # variable-width body: keep as few copies as possible
        copies = max(a, 1)
        per = limit // copies
        sub = shrink(body, per)
        if sub is None:
            return None if a > 0 else ("seq", [])
        return ("rep", sub, a, copies if b is None else min(b, copies))
    return node if (mx is not None and mx <= limit) else None


def grow(node: Node, need: int) -> Optional[Node]:
    """Raise the minimum length of node to ``need`` by raising fixed-width repetitions."""
    mn, mx = ecma.node_len(node)
    if mn >= need:
        return node
    if mx is not None and mx < need:
        return None
    kind = node[0]
    if kind == "rep":
        body, a, b = node[1], node[2], node[3]
        bmn, bmx = ecma.node_len(body)
        if bmn == bmx and bmn > 0:
            c = -(-need // bmn)
            if b is not None and c > b:
                return None
            return ("rep", body, c, b)
        return None
    if kind == "seq":
        items = list(node[1])
        deficit = need - mn
        for i, it in enumerate(items):
            if deficit <= 0:
                break
            a, b = ecma.node_len(it)
            if b is None or b > a:
                target = a + deficit if b is None else min(b, a + deficit)
                g = grow(it, target)
                if g is not None:
                    got = ecma.node_len(g)[0] - a
                    items[i] = g
                    deficit -= got
        return ("seq", items) if deficit <= 0 else None
    if kind == "alt":
        bs = [x for x in (grow(b, need) for b in node[1]) if x is not None]
        return ("alt", bs) if bs else None
    return None


def finite_strings(node: Node, limit: int) -> Optional[list[str]]:
    """The finite language of a node as a list of strings (None if infinite or large)."""
    kind = node[0]
    if kind == "set":
        r = node[1]
        n = sum(b - a + 1 for a, b in r)
        if n > limit:
            return None
        return [chr(c) for a, b in r for c in range(a, b + 1)]
    if kind == "seq":
        acc = [""]
        for it in node[1]:
            ws = finite_strings(it, limit)
            if ws is None:
                return None
            acc = [x + y for x in acc for y in ws]
            if len(acc) > limit:
                return None
        return acc
    if kind == "alt":
        acc = []
        for b in node[1]:
            ws = finite_strings(b, limit)
            if ws is None:
                return None
            acc += ws
            if len(acc) > limit:
                return None
        return acc
    if kind == "rep":
        if node[3] is None:
            return None
        ws = finite_strings(node[1], limit)
        if ws is None:
            return None
        acc = []
        cur = [""]
        for i in range(node[3] + 1):
            if i >= node[2]:
                acc += cur
            if len(acc) > limit:
                return None
            if i < node[3]:
                cur = [x + y for x in cur for y in ws]
                if len(cur) > limit:
                    return None
        return acc
    return None


def nullable_node(node: Node) -> bool:
    """Whether node matches the empty string."""
    return ecma.node_len(node)[0] == 0


def deriv(node: Node, c: int) -> Optional[Node]:
    """Brzozowski derivative of a (anchor-free) node by code point c; None = empty."""
    kind = node[0]
    if kind == "set":
        return ("seq", []) if ecma.contains(node[1], c) else None
    if kind == "seq":
        items = node[1]
        alts = []
        for i, it in enumerate(items):
            d = deriv(it, c)
            if d is not None:
                alts.append(("seq", [d] + list(items[i + 1 :])))
            if not nullable_node(it):
                break
        if not alts:
            return None
        return alts[0] if len(alts) == 1 else ("alt", alts)
    if kind == "alt":
        alts = [d for d in (deriv(b, c) for b in node[1]) if d is not None]
        if not alts:
            return None
        return alts[0] if len(alts) == 1 else ("alt", alts)
    if kind == "rep":
        body, a, b = node[1], node[2], node[3]
        if b == 0:
            return None
        d = deriv(body, c)
        if d is None:
            return None
        rest = ("rep", body, max(a - 1, 0), None if b is None else b - 1)
        return ("seq", [d, rest])
    return None


def trim_unanchored(b: Node, sa: bool, ea: bool) -> Optional[Node]:
    """Drop unbounded repetitions at unanchored ends (``.*`` absorbs them); None when the
    branch can match the empty string at an unanchored end (then every string matches)."""
    if not sa or not ea:
        if nullable_node(b):
            return None
    if b[0] != "seq":
        b = ("seq", [b])
    items = list(b[1])
    while len(items) == 1 and items[0][0] == "seq":
        items = list(items[0][1])
    changed = True
    while changed and items:
        changed = False
        if not sa and items and items[0][0] == "rep" and items[0][3] is None:
            body, a = items[0][1], items[0][2]
            items = ([("rep", body, a, a)] if a else []) + items[1:]
            changed = True
        if not ea and items and items[-1][0] == "rep" and items[-1][3] is None:
            body, a = items[-1][1], items[-1][2]
            items = items[:-1] + ([("rep", body, a, a)] if a else [])
            changed = True
    if not items and (not sa or not ea):
        return None
    return ("seq", items)


def first_set(node: Node) -> tuple[Ranges, bool]:
    """(first code points, nullable) of a pattern node."""
    kind = node[0]
    if kind == "set":
        return node[1], False
    if kind in ("bol", "eol"):
        return (), True
    if kind == "seq":
        acc: Ranges = ()
        for it in node[1]:
            f, n = first_set(it)
            acc = ecma.union(acc, f)
            if not n:
                return acc, False
        return acc, True
    if kind == "alt":
        acc, nul = (), False
        for b in node[1]:
            f, n = first_set(b)
            acc = ecma.union(acc, f)
            nul = nul or n
        return acc, nul
    if kind == "rep":
        f, n = first_set(node[1])
        return f, n or node[2] == 0
    return ecma.ANY_RANGES, True


def first_chars_disjoint(pa: str, pb: str) -> bool:
    """True when no string matches both (search) patterns, judged by their first
    characters: both must be start-anchored and non-nullable with disjoint first sets."""
    try:
        sets: list[Ranges] = []
        for p in (pa, pb):
            brs = ecma.anchored_branches(ecma.parse(p))
            acc: Ranges = ()
            for b, sa, _ in brs:
                if not sa:
                    return False
                f, n = first_set(b)
                if n:
                    return False
                acc = ecma.union(acc, f)
            sets.append(acc)
        return not ecma.intersect(sets[0], sets[1])
    except ecma.PatternError:
        return False
