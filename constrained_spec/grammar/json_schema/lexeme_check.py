"""Whether a grammar's terminals can be lexed greedily without losing strings.

llguidance's lexer is greedy: while the lexeme being read can still be extended by the next byte
it is extended, and a lexeme that could end here is not ended. So where two lexemes may start at
the same point (or one is followed by another) and one's complete text is a proper prefix of
what the other can still read, the grammar's language as llguidance enforces it can be smaller
than its language as a context-free grammar (``start: A r | C`` with ``A: /a/``, ``C: /a1b/``,
``r: /[0-9]+/`` refuses ``a1``). :func:`greedy_safe` decides, conservatively, that this cannot
happen: for every set of lexemes that may start at one point and every lexeme T1 in it, no
complete text w of T1 leaves a lexeme T2 of the set (T1 itself included) able to read on with a
character that could also start a lexeme following T1. Any doubt (a work budget spent, a
nullable lexeme) answers False, and the caller keeps its bounded regex.

Regexes are the node tuples of :mod:`constrained_spec.grammar.ecma_regex`; languages are
explored with Brzozowski derivatives over normalised, hashable nodes.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from constrained_spec.grammar import ecma_regex as ecma

__all__ = ["Lexeme", "to_node", "to_node_by", "greedy_safe", "first_chars", "nullable"]


class _Items(tuple):
    """The items of a sequence node: a tuple that remembers its hash (a derivative walk looks the
    same long sequences up again and again; a plain tuple hashes all its items each time). Equal
    to, and hashed like, the plain tuple of the same items."""

    def __hash__(self) -> int:
        d = self.__dict__
        h = d.get("h")
        if h is None:
            h = d["h"] = tuple.__hash__(self)
        return h


#: the empty-string node
EPS: Lexeme = ("seq", ())
#: most derivative steps one :func:`greedy_safe` call may take before it answers False
WORK_BUDGET = 20_000

#: a normalised node (see :func:`to_node`): an ``ecma_regex`` node with tuples for lists (hashable)
Lexeme = tuple


def to_node(node: ecma.Node) -> Optional[Lexeme]:
    """An ``ecma_regex`` node as a normalised, hashable node (None: the empty language)."""
    return to_node_by(node, to_node)


def to_node_by(node: ecma.Node, sub: Callable[[ecma.Node], Optional[Lexeme]]) -> Optional[Lexeme]:
    """:func:`to_node`, with ``sub`` the same for the node's parts (so a caller may memoise it)."""
    kind = node[0]
    if kind == "set":
        return ("set", tuple(node[1])) if node[1] else None
    if kind == "seq":
        return _seq([sub(x) for x in node[1]])
    if kind == "alt":
        return _alt([sub(x) for x in node[1]])
    if kind == "rep":
        body = sub(node[1])
        return _rep(body, node[2], node[3])
    raise ecma.PatternError(f"unsupported regex node {kind!r}")


def _seq(items: list[Optional[Lexeme]]) -> Optional[Lexeme]:
    out: list[Lexeme] = []
    for it in items:
        if it is None:
            return None
        if it[0] == "seq":
            out.extend(it[1])
        else:
            out.append(it)
    if len(out) == 1:
        return out[0]
    return ("seq", _Items(out))


def _alt(branches: list[Optional[Lexeme]]) -> Optional[Lexeme]:
    seen: set[Lexeme] = set()
    for b in branches:
        if b is None:
            continue
        seen.update(b[1] if b[0] == "alt" else (b,))
    if not seen:
        return None
    if len(seen) == 1:
        return next(iter(seen))
    return ("alt", frozenset(seen))  # a frozenset caches its hash: cheap to compare and look up


def _rep(body: Optional[Lexeme], lo: int, hi: Optional[int]) -> Optional[Lexeme]:
    if hi == 0 or body == EPS:
        return EPS
    if body is None:
        return EPS if lo == 0 else None
    if lo == 1 and hi == 1:
        return body
    return ("rep", body, lo, hi)


#: counted repetitions with an upper bound above this are checked as unbounded (``x{1,500}`` as
#: ``x+``): a larger language, so the check stays conservative, and derivatives need not count
RELAX_ABOVE = 4


def relaxed(n: Lexeme) -> Optional[Lexeme]:
    """``n`` with every repetition bounded above :data:`RELAX_ABOVE` made unbounded (its lower
    bound capped at 1): a language holding ``n``'s, with the same first characters."""
    kind = n[0]
    if kind == "set":
        return n
    if kind in ("seq", "alt"):
        parts = [relaxed(x) for x in n[1]]
        if all(p is x for p, x in zip(parts, n[1])):
            return n  # what _seq/_alt would build again: n is normalised (to_node)
        return _seq(parts) if kind == "seq" else _alt(parts)
    body, lo, hi = relaxed(n[1]), n[2], n[3]
    if hi is not None and hi > RELAX_ABOVE:
        return _rep(body, min(lo, 1), None)
    return n if body is n[1] else _rep(body, lo, hi)


def nullable_by(n: tuple, sub: Callable[[tuple], bool]) -> bool:
    """Whether node ``n`` matches the empty string, given ``sub``: the same question for its parts
    (so a caller may memoise the recursion). Any of the node forms: ``ecma_regex`` nodes,
    normalised ones (:data:`Lexeme`) and the grammar expressions of :mod:`.emit_lark`."""
    kind = n[0]
    if kind == "set":
        return False
    if kind == "seq":
        return all(sub(x) for x in n[1])
    if kind == "alt":
        return any(sub(x) for x in n[1])
    return bool(n[2] == 0 or sub(n[1]))


def nullable(n: tuple) -> bool:
    """Whether node ``n`` matches the empty string (not memoised)."""
    return nullable_by(n, nullable)


class _Lang:
    """Derivatives, nullability and front character sets, memoised, under a work budget."""

    def __init__(self, budget: int = WORK_BUDGET, deadline: Optional[float] = None) -> None:
        self.budget = budget
        self.deadline = deadline  # time.monotonic() past which the work stops (checked every 1024 steps)
        self._null: dict[Lexeme, bool] = {}
        self._deriv: dict[tuple[Lexeme, int], Optional[Lexeme]] = {}
        self._canon: dict[Lexeme, Lexeme] = {}  # a derivative value -> the one object that holds it
        self._rest_id: dict[int, tuple[Lexeme, Lexeme]] = {}  # id of a sequence -> (it, its rest)
        self._front: dict[Lexeme, tuple[ecma.Ranges, ...]] = {}
        self._fronts: dict[tuple[ecma.Ranges, ...], tuple[ecma.Ranges, ...]] = {}
        # the same answers by the node object's identity (the node kept beside them, so its id is
        # not reused): a node is a nested tuple whose hash Python computes again at every lookup
        self._null_id: dict[int, tuple[Lexeme, bool]] = {}
        self._deriv_id: dict[tuple[int, int], tuple[Lexeme, Optional[Lexeme]]] = {}
        self._front_id: dict[int, tuple[Lexeme, tuple[ecma.Ranges, ...]]] = {}
        self._first_id: dict[int, tuple[tuple[ecma.Ranges, ...], ecma.Ranges]] = {}
        #: (id of one front, id of another) -> (both fronts, the cells of both unions' intersection)
        self._cells_id: dict[tuple[int, int], tuple[tuple[ecma.Ranges, ...], tuple[ecma.Ranges, ...], list[int]]] = {}
        #: (id of ranges, id of ranges) -> (both, whether they share a character)
        self._meet_id: dict[tuple[int, int], tuple[ecma.Ranges, ecma.Ranges, bool]] = {}

    def spend(self) -> None:
        """Count one step against the budget (:class:`_OverBudget` once it is spent)."""
        self.budget -= 1
        if self.budget < 0:
            raise _OverBudget
        if self.deadline is not None and self.budget % 1024 == 0 and time.monotonic() > self.deadline:
            raise _OverBudget

    def nullable(self, n: Lexeme) -> bool:
        by_id = self._null_id.get(id(n))
        if by_id is not None and by_id[0] is n:
            return by_id[1]
        hit = self._null.get(n)
        if hit is None:
            hit = self._null[n] = nullable_by(n, self.nullable)
        self._null_id[id(n)] = (n, hit)
        return hit

    def front(self, n: Lexeme) -> tuple[ecma.Ranges, ...]:
        """The character sets a first character of n is drawn from (a tuple of range tuples)."""
        by_id = self._front_id.get(id(n))
        if by_id is not None and by_id[0] is n:
            return by_id[1]
        hit = self._front_value(n)
        self._front_id[id(n)] = (n, hit)
        return hit

    def first_chars(self, n: Lexeme) -> ecma.Ranges:
        """The union of n's front sets, as one range tuple (remembered per front)."""
        fr = self.front(n)
        hit = self._first_id.get(id(fr))
        if hit is not None and hit[0] is fr:
            return hit[1]
        out = ecma.union(*fr) if fr else ()
        self._first_id[id(fr)] = (fr, out)
        return out

    def meets(self, a: ecma.Ranges, b: ecma.Ranges) -> bool:
        """Whether ``ecma.intersect(a, b)`` is not empty (remembered per pair of range objects)."""
        key = (id(a), id(b))
        hit = self._meet_id.get(key)
        if hit is not None and hit[0] is a and hit[1] is b:
            return hit[2]
        out = bool(ecma.intersect(a, b))
        self._meet_id[key] = (a, b, out)
        return out

    def shared_cells(self, fa: tuple[ecma.Ranges, ...], fb: tuple[ecma.Ranges, ...]) -> list[int]:
        """The cell representatives (:func:`_cells` of both fronts) inside the intersection of the
        two fronts' unions, in order (remembered per pair of front objects)."""
        key = (id(fa), id(fb))
        hit = self._cells_id.get(key)
        if hit is not None and hit[0] is fa and hit[1] is fb:
            return hit[2]
        both = ecma.intersect(ecma.union(*fa), ecma.union(*fb))
        cells = [c for c in _cells(list(fa) + list(fb)) if ecma.contains(both, c)] if both else []
        self._cells_id[key] = (fa, fb, cells)
        return cells

    def _front_value(self, n: Lexeme) -> tuple[ecma.Ranges, ...]:
        hit = self._front.get(n)
        if hit is None:
            kind = n[0]
            acc: list[ecma.Ranges] = []
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
            hit = tuple(dict.fromkeys(acc))
            hit = self._fronts.setdefault(hit, hit)  # one object per front: the id caches then meet
            self._front[n] = hit
        return hit

    def deriv(self, n: Lexeme, c: int) -> Optional[Lexeme]:
        by_id = self._deriv_id.get((id(n), c))
        if by_id is not None and by_id[0] is n:
            return by_id[1]
        out = self._deriv_value(n, c)
        self._deriv_id[(id(n), c)] = (n, out)
        return out

    def _rest(self, n: Lexeme) -> Lexeme:
        """A sequence less its first item (what ``_seq(list(n[1][1:]))`` gives: a sequence's items are
        never sequences themselves), one object per sequence object: the derivatives by every
        character read the same rest, found by identity in the caches."""
        hit = self._rest_id.get(id(n))
        if hit is not None and hit[0] is n:
            return hit[1]
        items = n[1]
        rest = items[1] if len(items) == 2 else ("seq", _Items(items[1:]))
        self._rest_id[id(n)] = (n, rest)
        return rest

    def _deriv_value(self, n: Lexeme, c: int) -> Optional[Lexeme]:
        key = (n, c)
        known = self._deriv.get(key, _UNKNOWN)
        if known is not _UNKNOWN:
            return known
        self.spend()
        kind = n[0]
        out: Optional[Lexeme]
        if kind == "set":
            out = EPS if ecma.contains(n[1], c) else None
        elif kind == "seq":
            items = n[1]
            if not items:
                out = None
            else:
                head = self.deriv(items[0], c)
                rest = self._rest(n)
                alts: list[Optional[Lexeme]]
                if head is not None and head[0] == "seq" and not head[1]:
                    alts = [rest]  # what _seq([EPS, rest]) builds again, item by item (rest holds 2+ items or is one)
                else:
                    alts = [None if head is None else _seq([head, rest])]
                if self.nullable(items[0]):
                    alts.append(self.deriv(rest, c) if rest is not None else None)
                out = _alt(alts)
        elif kind == "alt":
            out = _alt([self.deriv(x, c) for x in n[1]])
        else:
            body, lo, hi = n[1], n[2], n[3]
            head = self.deriv(body, c)
            out = None if head is None else _seq([head, _rep(body, max(lo - 1, 0), None if hi is None else hi - 1)])
        if out is not None:
            # one object per derivative value: the caches and the pair walk then compare
            # derivatives by identity, not item by item (equal values, so the same answers)
            out = self._canon.setdefault(out, out)
        self._deriv[key] = out
        return out


#: ``_Lang._deriv`` holds no entry for the key (None is an entry: the empty language)
_UNKNOWN: Lexeme = ("unknown",)


class _OverBudget(Exception):
    pass


def _cells(sets: list[ecma.Ranges]) -> list[int]:
    """One representative code point per cell of the partition the range sets induce, for the
    cells inside their union."""
    bounds: set[int] = set()
    for rs in sets:
        for a, b in rs:
            bounds.add(a)
            bounds.add(b + 1)
    edges = sorted(bounds)
    reps = []
    for a in edges[:-1]:
        if any(ecma.contains(rs, a) for rs in sets):
            reps.append(a)
    return reps


def first_chars(lang: _Lang, n: Lexeme) -> ecma.Ranges:
    """The union of n's front sets, as one range tuple."""
    return ecma.union(*lang.front(n)) if lang.front(n) else ()


def _conflict(lang: _Lang, t1: Lexeme, t2: Lexeme, follow: ecma.Ranges) -> bool:
    """Whether some complete text w of t1 leaves t2 (after reading w) able to read a character of
    ``follow`` (the characters a lexeme after t1 may start with)."""
    if not follow:
        return False
    if t1 is t2:
        return _self_conflict(lang, t1, follow)
    return _pair_conflict(lang, t1, t2, follow)


def _pair_conflict(lang: _Lang, t1: Lexeme, t2: Lexeme, follow: ecma.Ranges) -> bool:
    """:func:`_conflict` by a walk over pairs of derivatives (t1's, t2's)."""
    seen = {(t1, t2)}
    todo = [(t1, t2)]
    while todo:
        a, b = todo.pop()
        if lang.nullable(a) and lang.meets(lang.first_chars(b), follow):
            return True
        fa, fb = lang.front(a), lang.front(b)
        if not fa or not fb:
            continue
        for c in lang.shared_cells(fa, fb):
            lang.spend()
            da, db = lang.deriv(a, c), lang.deriv(b, c)
            if da is None or db is None:
                continue
            if (da, db) not in seen:
                seen.add((da, db))
                todo.append((da, db))
    return False


def _self_conflict(lang: _Lang, t: Lexeme, follow: ecma.Ranges) -> bool:
    """:func:`_conflict` of a lexeme with itself, walking its derivatives alone: both sides of the
    pair walk read the same characters from the same object, so they stay one object (``deriv``
    answers the second side from its cache by identity). The same states in the same order, the
    same steps spent; the pairs are not built, hashed and looked up (a large lexeme against itself
    is most of the check's time)."""
    seen = {t}
    todo = [t]
    while todo:
        a = todo.pop()
        if lang.nullable(a) and lang.meets(lang.first_chars(a), follow):
            return True
        fa = lang.front(a)
        if not fa:
            continue
        for c in lang.shared_cells(fa, fa):
            lang.spend()
            da = lang.deriv(a, c)
            if da is None:
                continue
            if da not in seen:
                seen.add(da)
                todo.append(da)
    return False


def _size(n: Lexeme, memo: dict[int, int]) -> int:
    """How many nodes n has (shared parts counted where they occur), remembered by identity."""
    hit = memo.get(id(n))
    if hit is not None:
        return hit
    kind = n[0]
    if kind == "set":
        out = 1
    elif kind in ("seq", "alt"):
        out = 1 + sum(_size(x, memo) for x in n[1])
    else:
        out = 1 + _size(n[1], memo)
    memo[id(n)] = out
    return out


def _maximal(groups: list[frozenset[str]]) -> list[frozenset[str]]:
    """The groups that are no subset of another one, largest first: their pairs are all the pairs
    of ``groups`` (a grammar of n optional parts in a row has n nested groups, n^3 pair look-ups
    where n^2 pairs are checked). Which pairs are checked, and so :func:`greedy_safe`'s answer,
    does not depend on their order: it is False where a pair conflicts (found, or the budget spent
    first) and otherwise depends on the steps all pairs take together."""
    kept: list[frozenset[str]] = []
    holding: dict[str, list[frozenset[str]]] = {}  # name -> the kept groups that hold it
    for g in sorted(set(groups), key=len, reverse=True):
        if not g:
            continue
        fewest = min((holding.get(n, []) for n in g), key=len)  # a superset holds every name of g
        if any(g <= k for k in fewest):
            continue
        kept.append(g)
        for n in g:
            holding.setdefault(n, []).append(g)
    return kept


def greedy_safe(terminals: dict[str, Lexeme], colive: list[frozenset[str]], follows: dict[str, frozenset[str]],
                budget: int = WORK_BUDGET, deadline: Optional[float] = None) -> bool:
    """Whether greedy lexing loses no string of the grammar (conservative: False when unsure).

    ``terminals``: name -> normalised node; ``colive``: sets of terminal names that may start at
    one point; ``follows``: name -> the terminal names that may come right after it; ``budget``:
    the most derivative steps (False once spent); ``deadline``: a ``time.monotonic()`` past which it
    answers False.
    """
    lang = _Lang(budget, deadline)
    try:
        if any(lang.nullable(n) for n in terminals.values()):
            return False
        follow_chars: dict[str, ecma.Ranges] = {}
        for name in terminals:
            sets = [first_chars(lang, terminals[f]) for f in follows.get(name, ())]
            follow_chars[name] = ecma.union(*sets) if sets else ()
        # conflicts are looked for in larger languages (conservative; no counting to 500)
        wide: dict[str, Lexeme] = {}
        for name, node in terminals.items():
            w = relaxed(node)
            if w is None:  # a terminal's relaxed language is never empty; if it were, answer unsure
                return False
            wide[name] = w
        pairs = {(n1, n2) for group in _maximal(colive) for n1 in group if follow_chars[n1] for n2 in group}
        # the pairs of small lexemes first: where a conflict is there, it is most often one of
        # them, found before the long walks of large lexemes (the answer does not depend on the
        # order, see _maximal; a pair whose lexeme has no follow character cannot conflict)
        sizes: dict[int, int] = {}
        size = {name: _size(node, sizes) for name, node in wide.items()}
        for n1, n2 in sorted(pairs, key=lambda p: (min(size[p[0]], size[p[1]]), max(size[p[0]], size[p[1]]), p)):
            if _conflict(lang, wide[n1], wide[n2], follow_chars[n1]):
                return False
    except (_OverBudget, RecursionError):
        return False
    return True
