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

import bisect
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
#: most paths state elimination may join into the regex (each a union simplified: a time bound; the
#: dev splits' largest success needs about 1,500, a hostile 512-state DFA 59,000 before its size bound)
MAX_ELIMINATION_STEPS = 20_000

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


def _rep_parts(x: Node) -> tuple[Node, int, Optional[int]]:
    """x as a counted repetition (base, lo, hi): its own where it is one, else (x, 1, 1)."""
    if x[0] == "rep":
        return x[1], x[2], x[3]
    return x, 1, 1


def _counted(base: Node, lo: int, hi: Optional[int]) -> Node:
    """The node of ``base{lo,hi}`` (base itself for {1,1}, the empty string for {0,0})."""
    if hi == 0:
        return EPS
    if lo == 1 and hi == 1:
        return base
    return ("rep", base, lo, hi)


def _count_chars(lo: int, hi: Optional[int]) -> int:
    """How many characters the count ``{lo,hi}`` adds to its base's spelling (``?``, ``{3}``...)."""
    if (lo, hi) == (1, 1):
        return 0
    if (lo, hi) in ((0, 1), (0, None), (1, None)):
        return 1
    if lo == hi:
        return 2 + len(str(lo))
    return 3 + len(str(lo)) + (0 if hi is None else len(str(hi)))


def _worth_merging(base: Node, counts: list[tuple[int, Optional[int]]], lo: int, hi: Optional[int]) -> bool:
    """Whether ``base{lo,hi}`` is no longer than the repetitions of base it replaces (``aa``
    stays, ``[^"\\]{2}`` and ``a{2}a?`` merge)."""
    copies = sum(_size(base) + _count_chars(a, b) for a, b in counts)
    return _size(base) + _count_chars(lo, hi) <= copies


def _same(a: Node, b: Node) -> bool:
    """Whether two nodes are equal (identity first: shared subtrees are compared at once)."""
    return a is b or a == b


def _append(items: list[Node], x: Node) -> None:
    """Append x to a sequence's items, ``B{l1,h1} B{l2,h2}`` written ``B{l1+l2,h1+h2}`` (the same
    language: i copies then j copies are i+j copies, and every count between the sums is one such
    sum). Always, even where the count is longer than the copies (``aa`` is ``a{2}``): a chain of
    optional copies (``B(B(B)?)?``, what state elimination writes for a run of accepting states)
    is so one bounded repetition rather than a nesting as deep as the run, which regex parsers
    refuse past a nesting limit (Rust ``regex-syntax``: 250)."""
    if items:
        b1, l1, h1 = _rep_parts(items[-1])
        b2, l2, h2 = _rep_parts(x)
        if _same(b1, b2) and b1 != EPS:
            items[-1] = _counted(b1, l1 + l2, None if h1 is None or h2 is None else h1 + h2)
            return
    items.append(x)


def _seq(*xs: Optional[Node]) -> Optional[Node]:
    """The concatenation of xs (None: some x is empty); neighbours that repeat one base are one
    counted repetition: ``X{a,b}X{c,d}`` is ``X{a+c,b+d}`` (every count between is a sum)."""
    items: list[Node] = []
    for x in xs:
        if x is None:
            return None
        for y in x[1] if x[0] == "seq" else (x,):
            if y == EPS:
                continue
            _append(items, y)
    if not items:
        return EPS
    return items[0] if len(items) == 1 else ("seq", tuple(items))


def _items(x: Node) -> tuple[Node, ...]:
    """The items of x read as a concatenation (x alone where it is none)."""
    return x[1] if x[0] == "seq" else (x,)


def _concat(items: tuple[Node, ...]) -> Node:
    """The node of a concatenation of items (the empty string for none)."""
    if not items:
        return EPS
    return items[0] if len(items) == 1 else ("seq", items)


def _key(x: Node) -> object:
    """A grouping key of x: a character set by its value (cheap to hash, often rebuilt), any
    other node by identity (its hash would walk the whole tree; equal copies just stay apart)."""
    return x if x[0] == "set" else id(x)


def _alternatives(xs: list[Optional[Node]]) -> tuple[list[Node], bool]:
    """The alternatives of the union of xs (nested unions and optionals opened, duplicates
    dropped) and whether the empty string is among them."""
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
            if y == EPS:
                eps = True
            elif y not in flat:
                flat.append(y)
    return flat, eps


def _factor(flat: list[Node], front: bool, depth: int) -> list[Node]:
    """The alternatives with those sharing their first item (``front``) or their last one
    written once: ``aX|aY`` is ``a(X|Y)``, ``Xb|Yb`` is ``(X|Y)b``."""
    groups: dict[object, list[tuple[Node, ...]]] = {}
    for y in flat:
        its = _items(y)
        groups.setdefault(_key(its[0] if front else its[-1]), []).append(its)
    if len(groups) == len(flat):
        return flat
    out: list[Node] = []
    for g in groups.values():
        if len(g) == 1:
            made: Optional[Node] = _concat(g[0])
        else:
            inner = _alt_at([_concat(its[1:] if front else its[:-1]) for its in g], depth + 1)
            made = _seq(g[0][0], inner) if front else _seq(inner, g[0][-1])
        assert made is not None  # every group is non-empty, every rest a word's
        for z in made[1] if made[0] == "alt" else (made,):
            if z not in out:
                out.append(z)
    return out


def _merge_counts(flat: list[Node], eps: bool) -> tuple[list[Node], bool]:
    """The alternatives with the counted repetitions of one base whose counts touch written as
    one (``X{a,b}|X{c,d}`` is ``X{min,max}`` where the ranges meet), the empty string (``X{0,0}``)
    folded into one that starts at 0 or 1; and whether the empty string is still apart."""
    bases: dict[object, list[list]] = {}
    order: list[object] = []
    for y in flat:
        base, lo, hi = _rep_parts(y)
        k = _key(base)
        if k not in bases:
            bases[k] = []
            order.append(k)
        bases[k].append([base, lo, hi])
    if len(order) == len(flat) and not eps:
        return flat, eps
    out: list[Node] = []
    for k in order:
        spans = sorted(bases[k], key=lambda e: e[1])
        merged = [spans[0]]
        for e in spans[1:]:
            last = merged[-1]
            hi = None if last[2] is None or e[2] is None else max(last[2], e[2])
            if (last[2] is None or e[1] <= last[2] + 1) and _worth_merging(
                    last[0], [(last[1], last[2]), (e[1], e[2])], last[1], hi):
                last[2] = hi
            else:
                merged.append(e)
        for e in merged:
            if eps and e[1] <= 1:
                e[1] = 0
                eps = False
            out.append(_counted(e[0], e[1], e[2]))
    return out, eps


#: deepest nesting of factored alternatives (past it, alternatives stay as they come)
MAX_FACTOR_DEPTH = 32


def _alt(xs: list[Optional[Node]]) -> Optional[Node]:
    """The union of xs (None: no string), simplified without changing the language: common
    first and last items factored out, touching counts of one base merged, character sets made
    one class, the empty string making the rest optional."""
    return _alt_at(xs, 0)


def _alt_at(xs: list[Optional[Node]], depth: int) -> Optional[Node]:
    """:func:`_alt` at a factoring ``depth`` (:data:`MAX_FACTOR_DEPTH`)."""
    flat, eps = _alternatives(xs)
    if depth < MAX_FACTOR_DEPTH and len(flat) > 1:
        flat = _factor(_factor(flat, True, depth), False, depth)
    flat, eps = _merge_counts(flat, eps)
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


#: a character class whose JSON spelling is longer than this is written once per hub (:func:`_generalised`)
HUB_MIN_CHARS = 12


def _set_chars(r: Ranges) -> int:
    """How many characters the JSON spelling of the class r takes."""
    return _size(("set", r)) if r else 0


def _atoms(d: Dfa) -> list[Ranges]:
    """The coarsest partition of the characters d reads into classes that every state sends to
    one target (one class per signature of (state, target) pairs)."""
    bounds = partition_edges([rg for es in d.edges for rg, _ in es])
    sig: list[list[tuple[int, int]]] = [[] for _ in range(max(0, len(bounds) - 1))]
    for s, es in enumerate(d.edges):
        for rg, t in es:
            for a, b in rg:
                for k in range(bisect.bisect_left(bounds, a), bisect.bisect_left(bounds, b + 1)):
                    sig[k].append((s, t))
    groups: dict[tuple[tuple[int, int], ...], list[tuple[int, int]]] = {}
    for k, pairs in enumerate(sig):
        if pairs:
            groups.setdefault(tuple(pairs), []).append((bounds[k], bounds[k + 1] - 1))
    return [ecma.norm(v) for v in groups.values()]


def _generalised(d: Dfa) -> dict[int, dict[int, Node]]:
    """The generalised automaton of a trimmed, minimised d for state elimination: d's states,
    then the start (``n``, an empty step to 0) and the final state (``n + 1``, an empty step from
    each accepting state), then hubs. Each edge s -R-> t whose classes (:func:`_atoms`) include
    costly ones (a JSON spelling past :data:`HUB_MIN_CHARS`: the escaped controls, "everything
    but these letters") of union E reads E through a hub h shared by the edges into t with that
    E (s -> h by the empty string, h -E-> t) and only R - E directly, where what the edges save
    outweighs writing E once more: the language is the same, and the costly class is written once
    per hub instead of once per edge."""
    n = len(d.edges)
    costly = ecma.union(*[a for a in _atoms(d) if len(ecma.emit_set(a) or "") > HUB_MIN_CHARS])
    gain: dict[tuple[Ranges, int], int] = {}
    for es in d.edges:
        for rg, t in es:
            e = ecma.intersect(rg, costly)
            if e:
                if (e, t) not in gain:
                    gain[(e, t)] = -_set_chars(e)
                gain[(e, t)] += _set_chars(rg) - _set_chars(ecma.subtract(rg, e)) - 3
    hubs = {key: n + 2 + i for i, key in enumerate(k for k, g in gain.items() if g > 0)}
    r: dict[int, dict[int, Node]] = {s: {} for s in range(n + 2 + len(hubs))}
    for s, es in enumerate(d.edges):
        for rg, t in es:
            e = ecma.intersect(rg, costly)
            h = hubs.get((e, t)) if e else None
            rest = ecma.subtract(rg, e) if h is not None else rg
            if rest:
                r[s][t] = ("set", rest)
            if h is not None:
                r[s][h] = EPS
        if d.accept[s]:
            r[s][n + 1] = EPS
    for (e, t), h in hubs.items():
        r[h][t] = ("set", e)
    r[n][0] = EPS
    return r


def to_node(d: Dfa, max_size: int = MAX_NODE_SIZE, max_steps: int = MAX_ELIMINATION_STEPS) -> Optional[Node]:
    """An ``ecma_regex`` node of d's language (None: empty) by state elimination on the trimmed,
    minimised DFA, eliminating first the states that add least (:class:`DfaTooLarge` past about
    ``max_size`` characters or past ``max_steps`` paths joined)."""
    d = minimise(trim(d))
    n = len(d.edges)
    if not any(d.accept):
        return None
    start, final = n, n + 1
    r = _generalised(d)
    ins: dict[int, set[int]] = {s: set() for s in r}
    for s in r:
        for t in r[s]:
            ins[t].add(s)
    remaining = set(r) - {start, final}
    size = _Sizes()
    steps = 0
    while remaining:
        k = min(remaining, key=lambda x: (_weight(r, ins, x, size), x))
        remaining.discard(k)
        loop = r[k].pop(k, None)
        ins[k].discard(k)
        mid = _star(loop) if loop is not None else EPS
        for p in list(ins[k]):
            pk = r[p].pop(k)
            steps += len(r[k])
            if steps > max_steps:
                raise DfaTooLarge(f"state elimination passes {max_steps} steps")
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
    chars = [tuple(("set", ((ord(c), ord(c)),)) for c in w) for w in words]
    return _alt_at([_concat(cs) for cs in chars], MAX_FACTOR_DEPTH)
