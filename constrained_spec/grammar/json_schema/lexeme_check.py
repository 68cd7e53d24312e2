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

Terminals come as normalised, hashable node tuples (:func:`to_node`); the walks run over their
hash-consed form (:mod:`.lexeme_lang`: Brzozowski derivatives whose sequences share their rests).
"""

from __future__ import annotations

from typing import Callable, Optional

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema.lexeme_lang import NONE, Lang, Nodes, OverBudget

__all__ = ["Lexeme", "to_node", "to_node_by", "greedy_safe", "greedy_safe_ids", "nullable"]


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


def _conflict(lang: Lang, t1: int, t2: int, follow: ecma.Ranges) -> bool:
    """Whether some complete text w of t1 leaves t2 (after reading w) able to read a character of
    ``follow`` (the characters a lexeme after t1 may start with). ``t1``, ``t2``: ``lang``'s ids."""
    if not follow:
        return False
    if t1 == t2:
        return _self_conflict(lang, t1, follow)
    return _pair_conflict(lang, t1, t2, follow)


def _pair_conflict(lang: Lang, t1: int, t2: int, follow: ecma.Ranges) -> bool:
    """:func:`_conflict` by a walk over pairs of derivatives (t1's, t2's)."""
    seen = {(t1, t2)}
    todo = [(t1, t2)]
    nullable, meets, first_chars, front = lang.nullable, lang.meets, lang.first_chars, lang.front
    shared_cells, spend, deriv = lang.shared_cells, lang.spend, lang.deriv  # (bound once: the walk's inner loop)
    while todo:
        a, b = todo.pop()
        if nullable(a) and meets(first_chars(b), follow):
            return True
        fa, fb = front(a), front(b)
        if not fa or not fb:
            continue
        for c in shared_cells(fa, fb):
            spend()
            da, db = deriv(a, c), deriv(b, c)
            if da == NONE or db == NONE:
                continue
            if (da, db) not in seen:
                seen.add((da, db))
                todo.append((da, db))
    return False


def _self_conflict(lang: Lang, t: int, follow: ecma.Ranges) -> bool:
    """:func:`_conflict` of a lexeme with itself, walking its derivatives alone: both sides of the
    pair walk read the same characters from the same node, so they stay one node. The same states
    in the same order, the same steps spent, without building the pairs."""
    seen = {t}
    todo = [t]
    nullable, meets, first_chars, front = lang.nullable, lang.meets, lang.first_chars, lang.front
    shared_cells, spend, deriv = lang.shared_cells, lang.spend, lang.deriv
    while todo:
        a = todo.pop()
        if nullable(a) and meets(first_chars(a), follow):
            return True
        fa = front(a)
        if not fa:
            continue
        for c in shared_cells(fa, fa):
            spend()
            da = deriv(a, c)
            if da == NONE:
                continue
            if da not in seen:
                seen.add(da)
                todo.append(da)
    return False


#: the most pairs of lexemes :func:`greedy_safe` compares (counted over the groups no other group
#: holds, before any is compared): past it the answer is False (unsure) at once. An all-optional
#: object of n properties in grammar mode has about n * n pairs (2,000 properties took 90 s to refuse
#: past a 60 s budget, 2026-12-06); no answer on the JSONSchemaBench development splits reaches it
#: (their 7,537 digests are the same with and without the bound)
MAX_PAIRS = 1_000_000


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
    raises :class:`~constrained_spec.errors.CompileLimitError` (kind ``"time"``: the verdict never
    depends on the clock).
    """
    nodes = Nodes()
    try:
        ids = {name: nodes.node(node) for name, node in terminals.items()}
    except RecursionError:
        return False
    return _checked(ids, nodes, colive, follows, budget, deadline)[0]


def greedy_safe_ids(terminals: dict[str, int], nodes: Nodes, colive: list[frozenset[str]],
                    follows: dict[str, frozenset[str]], budget: int = WORK_BUDGET, deadline: Optional[float] = None) -> bool:
    """:func:`greedy_safe` of terminals given as ids of ``nodes`` (a table the caller keeps across
    checks; each check still has its own derivatives and budget)."""
    return _checked(terminals, nodes, colive, follows, budget, deadline)[0]


def _checked(ids: dict[str, int], nodes: Nodes, colive: list[frozenset[str]], follows: dict[str, frozenset[str]],
             budget: int, deadline: Optional[float] = None) -> tuple[bool, int]:
    """:func:`greedy_safe`'s answer and the steps it left of ``budget`` (negative: spent)."""
    lang = Lang(budget, deadline, nodes)
    try:
        if any(lang.nullable(i) for i in ids.values()):
            return False, lang.budget
        follow_chars: dict[str, ecma.Ranges] = {}
        for name in ids:
            sets = [lang.first_chars(ids[f]) for f in follows.get(name, ())]
            follow_chars[name] = ecma.union(*sets) if sets else ()
        # conflicts are looked for in larger languages (conservative; no counting to 500)
        wide = {name: nodes.relaxed(i, RELAX_ABOVE) for name, i in ids.items()}
        if NONE in wide.values():  # a terminal's relaxed language is never empty; if it were, answer unsure
            return False, lang.budget
        size = {name: nodes.size(w) for name, w in wide.items()}
        kept = _maximal(colive)
        if sum(len(g) * len(g) for g in kept) > MAX_PAIRS:
            return False, lang.budget  # too many pairs to compare: unsure (a hostile or huge object)
        pairs = {(n1, n2) for group in kept for n1 in group if follow_chars[n1] for n2 in group}
        # each lexeme against itself first, then the other pairs, small lexemes first in each:
        # where a conflict is there, it is most often a lexeme that can read on after a complete
        # text of its own (a grammar's first tries fail there, a few steps in), found before the
        # walks of the other pairs (the answer does not depend on the order, see _maximal; a pair
        # whose lexeme has no follow character cannot conflict)
        # (sorted as (other pair, smaller size, larger size, n1, n2) tuples: no key function per pair)
        order: list[tuple[bool, int, int, str, str]] = []
        for n1, n2 in pairs:
            s1, s2 = size[n1], size[n2]
            order.append((n1 != n2, s1, s2, n1, n2) if s1 <= s2 else (True, s2, s1, n1, n2))
        order.sort()
        for _, _, _, n1, n2 in order:
            if _conflict(lang, wide[n1], wide[n2], follow_chars[n1]):
                return False, lang.budget
    except (OverBudget, RecursionError):
        return False, lang.budget
    return True, lang.budget
