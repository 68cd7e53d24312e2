"""Bounded DFAs over the code points of string content: intersection, difference, complement.

The string emitter writes a string's *decoded* content as an ``ecma_regex`` node (code points,
not JSON spellings) and only then spells it as JSON (:func:`~constrained_spec.grammar.ecma_regex.emit`,
one spelling per code point). So the Boolean algebra of string languages is exact here, where
the algebra of JSON *texts* would not be (``"a"`` and ``"\\u0061"`` are one value).

:func:`dfa_of_node` builds a DFA by Brzozowski derivatives (the hash-consed nodes of
:mod:`.lexeme_lang`), each state's edges labelled by the cells of the partition its first
character sets induce; :func:`product` combines two DFAs (``and``, ``minus``, ``or``);
:func:`to_node` turns a trimmed, minimised DFA back into a node by state elimination. Every
construction has a state bound (:class:`DfaTooLarge` past it) and the result a size bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.ecma_regex import Node, Ranges
from constrained_spec.grammar.json_schema.lexeme_lang import NONE, Lang, Nodes, OverBudget, partition_edges

__all__ = ["Dfa", "DfaTooLarge", "dfa_of_node", "product", "to_node", "words_node", "MAX_STATES"]

#: most states one construction (a DFA of a node, a product) may reach
MAX_STATES = 1_000
#: most characters (about) the regex of a DFA may take (state elimination can grow quadratically per state)
MAX_NODE_SIZE = 40_000

EPS: Node = ("seq", ())


class DfaTooLarge(Exception):
    """A construction passed its state or size bound."""


@dataclass
class Dfa:
    """A DFA over code points: ``edges[s]`` lists (ranges, target) with disjoint ranges (characters
    not listed go to an implicit dead state); ``accept[s]`` whether s accepts; state 0 starts."""

    edges: list[list[tuple[Ranges, int]]]
    accept: list[bool]
    #: what the DFA was built from, where a cache built it (:mod:`.negation`): equal keys, equal languages
    key: tuple = ()


def _cells(sets: list[Ranges]) -> list[Ranges]:
    """The cells (characters with the same membership in every set) inside the sets' union."""
    edges = partition_edges(sets)
    groups: dict[tuple[bool, ...], list[tuple[int, int]]] = {}
    for k in range(len(edges) - 1):
        a, b = edges[k], edges[k + 1] - 1
        sig = tuple(ecma.contains(rs, a) for rs in sets)
        if any(sig):
            groups.setdefault(sig, []).append((a, b))
    return [ecma.norm(v) for v in groups.values()]


def dfa_of_node(node: Node, max_states: int = MAX_STATES) -> Dfa:
    """The DFA of an anchor-free ``ecma_regex`` node (:class:`DfaTooLarge` past ``max_states``)."""
    nodes = Nodes()

    def conv(n: Node) -> int:
        return nodes.from_regex_by(n, conv)

    start = conv(node)
    if start == NONE:
        return Dfa([[]], [False])
    lang = Lang(budget=max_states * 256, nodes=nodes)
    ids = {start: 0}
    order = [start]
    edges: list[list[tuple[Ranges, int]]] = []
    accept: list[bool] = []
    try:
        i = 0
        while i < len(order):
            s = order[i]
            out: list[tuple[Ranges, int]] = []
            for cell in _cells(list(nodes.front(s))):
                d = lang.deriv(s, cell[0][0])
                if d == NONE:
                    continue
                j = ids.get(d)
                if j is None:
                    if len(order) >= max_states:
                        raise DfaTooLarge(f"more than {max_states} states")
                    j = ids[d] = len(order)
                    order.append(d)
                out.append((cell, j))
            edges.append(_merge(out))
            accept.append(nodes.nullable(s))
            i += 1
    except OverBudget as e:
        raise DfaTooLarge("derivative budget spent") from e
    return Dfa(edges, accept)


def _merge(out: list[tuple[Ranges, int]]) -> list[tuple[Ranges, int]]:
    """Edges with one entry per target (their ranges joined)."""
    by: dict[int, Ranges] = {}
    for r, t in out:
        by[t] = ecma.union(by[t], r) if t in by else r
    return [(r, t) for t, r in by.items()]


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    """The intersection of two normalised range tuples (a two-pointer merge)."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        hi = min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def product(a: Dfa, b: Dfa, op: Callable[[bool, bool], bool], universe: Ranges = ecma.ANY_RANGES,
            max_states: int = MAX_STATES) -> Dfa:
    """The product automaton of a and b (each completed over ``universe`` with a dead state) whose
    state accepts where ``op(a accepts, b accepts)``: ``and`` for intersection, ``a and not b`` for
    difference; trimmed and minimised."""
    ea, aa = _complete(a, universe)
    eb, ab = _complete(b, universe)
    ids = {(0, 0): 0}
    order = [(0, 0)]
    edges: list[list[tuple[Ranges, int]]] = []
    accept: list[bool] = []
    i = 0
    while i < len(order):
        p, q = order[i]
        out: list[tuple[Ranges, int]] = []
        for ra, ta in ea[p]:
            for rb, tb in eb[q]:
                r = _intersect(ra, rb)
                if not r:
                    continue
                j = ids.get((ta, tb))
                if j is None:
                    if len(order) >= max_states:
                        raise DfaTooLarge(f"product of more than {max_states} states")
                    j = ids[(ta, tb)] = len(order)
                    order.append((ta, tb))
                out.append((r, j))
        edges.append(_merge(out))
        accept.append(op(aa[p], ab[q]))
        i += 1
    return minimise(trim(Dfa(edges, accept)))


def _complete(d: Dfa, universe: Ranges) -> tuple[list[list[tuple[Ranges, int]]], list[bool]]:
    """d's edges and acceptance with a dead state (the last) that every missing character reaches."""
    dead = len(d.edges)
    edges: list[list[tuple[Ranges, int]]] = []
    for es in d.edges:
        used = ecma.union(*[r for r, _ in es]) if es else ()
        rest = ecma.subtract(universe, used)
        edges.append(list(es) + ([(rest, dead)] if rest else []))
    edges.append([(universe, dead)])
    return edges, list(d.accept) + [False]


def trim(d: Dfa) -> Dfa:
    """d without the states from which no accepting state can be reached (the empty DFA if the
    start is one of them), renumbered from the start."""
    n = len(d.edges)
    back: list[list[int]] = [[] for _ in range(n)]
    for s, es in enumerate(d.edges):
        for _, t in es:
            back[t].append(s)
    live = {s for s in range(n) if d.accept[s]}
    todo = list(live)
    while todo:
        t = todo.pop()
        for s in back[t]:
            if s not in live:
                live.add(s)
                todo.append(s)
    if 0 not in live:
        return Dfa([[]], [False])
    ids = {0: 0}
    order = [0]
    i = 0
    while i < len(order):
        for _, t in d.edges[order[i]]:
            if t in live and t not in ids:
                ids[t] = len(order)
                order.append(t)
        i += 1
    edges = [[(r, ids[t]) for r, t in d.edges[s] if t in live] for s in order]
    return Dfa(edges, [d.accept[s] for s in order])


def minimise(d: Dfa) -> Dfa:
    """The minimal DFA of a trimmed d (Moore's partition refinement)."""
    n = len(d.edges)
    cls = [1 if a else 0 for a in d.accept]
    while True:
        sigs: dict[tuple, int] = {}
        new = []
        for s in range(n):
            by: dict[int, Ranges] = {}
            for r, t in d.edges[s]:
                by[cls[t]] = ecma.union(by[cls[t]], r) if cls[t] in by else r
            sig = (cls[s], tuple(sorted(by.items())))
            new.append(sigs.setdefault(sig, len(sigs)))
        if len(sigs) == len(set(cls)):
            break
        cls = new
    # renumber the classes from the start's
    ids = {cls[0]: 0}
    for s in range(n):
        ids.setdefault(cls[s], len(ids))
    edges: list[list[tuple[Ranges, int]]] = [[] for _ in ids]
    accept = [False] * len(ids)
    done: set[int] = set()
    for s in range(n):
        c = ids[cls[s]]
        accept[c] = d.accept[s]
        if c in done:
            continue
        done.add(c)
        edges[c] = _merge([(r, ids[cls[t]]) for r, t in d.edges[s]])
    return Dfa(edges, accept)


# -- back to a node ----------------------------------------------------------------------------


_SET_CHARS: dict[Ranges, int] = {}


def _size(n: Optional[Node]) -> int:
    """About how many characters the regex of node n takes (a character set: its spelling's)."""
    if n is None:
        return 0
    if n[0] == "set":
        c = _SET_CHARS.get(n[1])
        if c is None:
            if len(_SET_CHARS) > 4096:
                _SET_CHARS.clear()
            c = _SET_CHARS[n[1]] = len(ecma.emit_set(n[1]) or "")
        return c
    if n[0] in ("seq", "alt"):
        return 2 + sum(_size(x) for x in n[1])
    return 3 + _size(n[1])


def _power(x: Node) -> tuple[Node, int, Optional[int]]:
    """x as ``B{lo,hi}``: a repetition's body and bounds, any other node once."""
    if x[0] == "rep":
        return x[1], x[2], x[3]
    return x, 1, 1


def _append(items: list[Node], x: Node) -> None:
    """Append x to a sequence's items, ``B{l1,h1} B{l2,h2}`` written ``B{l1+l2,h1+h2}`` (the same
    language: i copies then j copies are i+j copies, and every count between the sums is one such
    sum). A chain of optional copies (``B(B(B)?)?``, what state elimination writes for a run of
    accepting states) is so one bounded repetition rather than a nesting as deep as the run, which
    regex parsers refuse past a nesting limit (Rust ``regex-syntax``: 250)."""
    if items:
        body, lo, hi = _power(x)
        pbody, plo, phi = _power(items[-1])
        if body == pbody and body != EPS:
            items[-1] = ("rep", body, plo + lo, None if hi is None or phi is None else phi + hi)
            return
    items.append(x)


def _seq(*xs: Optional[Node]) -> Optional[Node]:
    items: list[Node] = []
    for x in xs:
        if x is None:
            return None
        for y in x[1] if x[0] == "seq" else (x,):
            _append(items, y)
    return items[0] if len(items) == 1 else ("seq", tuple(items))


def _alt(xs: list[Optional[Node]]) -> Optional[Node]:
    flat: list[Node] = []
    eps = False
    for x in xs:
        if x is None:
            continue
        if x == EPS:
            eps = True
            continue
        if x[0] == "rep" and x[2] == 0 and x[3] == 1:  # (y)? : y, and the empty string
            eps = True
            x = x[1]
        for y in x[1] if x[0] == "alt" else (x,):
            if y not in flat:
                flat.append(y)
    sets = [y for y in flat if y[0] == "set"]
    if len(sets) > 1:  # one character class
        flat = [y for y in flat if y[0] != "set"] + [("set", ecma.union(*[y[1] for y in sets]))]
    if not flat:
        return EPS if eps else None
    body = flat[0] if len(flat) == 1 else ("alt", tuple(flat))
    if eps and body[0] == "rep" and body[2] == 1:  # B{1,hi} or the empty string: B{0,hi}
        return ("rep", body[1], 0, body[3])
    return ("rep", body, 0, 1) if eps else body


def _star(x: Optional[Node]) -> Node:
    if x is None or x == EPS:
        return EPS
    if x[0] == "rep" and x[2] in (0, 1) and x[3] is None:
        return ("rep", x[1], 0, None)
    if x[0] == "rep" and x[2] == 0 and x[3] == 1:
        x = x[1]
    return ("rep", x, 0, None)


class _Sizes:
    """:func:`_size` remembered per node object (the node kept beside its size, so ids stay theirs)."""

    def __init__(self) -> None:
        self.memo: dict[int, tuple[Node, int]] = {}

    def __call__(self, n: Optional[Node]) -> int:
        if n is None:
            return 0
        hit = self.memo.get(id(n))
        if hit is not None and hit[0] is n:
            return hit[1]
        if n[0] == "set":
            out = _size(n)
        elif n[0] in ("seq", "alt"):
            out = 2 + sum(self(x) for x in n[1])
        else:
            out = 3 + self(n[1])
        self.memo[id(n)] = (n, out)
        return out


def _weight(r: dict[int, dict[int, Node]], ins: dict[int, set[int]], k: int, size: _Sizes) -> int:
    """How much eliminating state k adds: each in-path copied once per out-path and back."""
    pin = [p for p in ins[k] if p != k]
    qout = [q for q in r[k] if q != k]
    loop = size(r[k].get(k))
    sin = sum(size(r[p][k]) for p in pin)
    sout = sum(size(r[k][q]) for q in qout)
    return sin * (len(qout) - 1) + sout * (len(pin) - 1) + loop * (len(pin) * len(qout) - 1)


def to_node(d: Dfa, max_size: int = MAX_NODE_SIZE) -> Optional[Node]:
    """An ``ecma_regex`` node of d's language (None: empty) by state elimination on the trimmed,
    minimised DFA, eliminating first the states that add least (:class:`DfaTooLarge` past about
    ``max_size`` characters)."""
    d = minimise(trim(d))
    n = len(d.edges)
    if not any(d.accept):
        return None
    start, final = n, n + 1
    r: dict[int, dict[int, Node]] = {s: {} for s in range(n + 2)}
    for s, es in enumerate(d.edges):
        for rg, t in es:
            r[s][t] = ("set", rg)
        if d.accept[s]:
            r[s][final] = EPS
    r[start][0] = EPS
    ins: dict[int, set[int]] = {s: set() for s in range(n + 2)}
    for s in r:
        for t in r[s]:
            ins[t].add(s)
    remaining = set(range(n))
    size = _Sizes()
    while remaining:
        k = min(remaining, key=lambda x: (_weight(r, ins, x, size), x))
        remaining.discard(k)
        loop = r[k].pop(k, None)
        ins[k].discard(k)
        mid = _star(loop) if loop is not None else EPS
        for p in list(ins[k]):
            pk = r[p].pop(k)
            for q, kq in r[k].items():
                path = _seq(pk, mid, kq)
                merged = _alt([r[p].get(q), path])
                if merged is None:
                    continue
                if size(merged) > max_size:
                    raise DfaTooLarge(f"the regex of the automaton passes {max_size} nodes")
                r[p][q] = merged
                ins[q].add(p)
        for q in r[k]:
            ins[q].discard(k)
        r[k] = {}
        ins[k] = set()
    return r[start].get(final)


def words_node(words: list[str]) -> Optional[Node]:
    """The node of a finite set of strings (None: none)."""
    return _alt([_seq(*[("set", ((ord(c), ord(c)),)) for c in w]) if w else EPS for w in words])
