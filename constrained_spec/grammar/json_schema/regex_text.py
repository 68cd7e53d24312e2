"""Regex text builders: grouping, alternation, concatenation, counted repetition and the
comma-separated sequences of array items and object members.

Every function here works on regex *text* in the compiler's dialect (see
:mod:`constrained_spec.grammar.json_schema`) and is pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Literal, Optional

from constrained_spec.grammar import ecma_regex as ecma

__all__ = ["group", "alt", "cat", "rep", "strip_opt", "SeqItem", "sequence", "expanded_size"]


def group(r: str) -> str:
    """r, in parentheses unless a quantifier may follow it directly."""
    return r if ecma.is_atom(r) else "(" + r + ")"


def alt(rs: Sequence[Optional[str]]) -> Optional[str]:
    """The alternation of the regexes in rs (None ones, the empty language, dropped; duplicates
    once); None when none is left."""
    kept = list(dict.fromkeys(r for r in rs if r is not None))
    if not kept:
        return None
    if len(kept) == 1:
        return kept[0]
    return "(" + "|".join(kept) + ")"


def cat(*parts: str) -> str:
    """The concatenation of parts (a part with a top-level ``|`` in parentheses)."""
    out = []
    for p in parts:
        if p == "":
            continue
        out.append(p if not ecma.top_level_bar(p) else "(" + p + ")")
    return "".join(out)


def quantifier(lo: int, hi: Optional[int]) -> str:
    """The shortest regex quantifier for lo to hi repeats (hi None: unbounded): ``*``, ``+``,
    ``?``, ``{lo,}``, ``{lo}`` or ``{lo,hi}`` (regex and Lark write them alike)."""
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if (lo, hi) == (0, 1):
        return "?"
    if hi is None:
        return "{%d,}" % lo
    if lo == hi:
        return "{%d}" % lo
    return "{%d,%d}" % (lo, hi)


def rep(e: str, lo: int, hi: Optional[int]) -> str:
    """e repeated lo to hi times (hi None: unbounded), in the shortest quantifier form."""
    if hi is not None and hi <= 0:
        return ""
    g = group(e)
    return g if (lo, hi) == (1, 1) else g + quantifier(lo, hi)


def strip_opt(r: str) -> str:
    """r without the ``(...)?`` around it, where it is one optional group."""
    if r.startswith("(") and r.endswith(")?") and ecma.is_atom(r[:-1]):
        return r[1:-2]
    return r


@dataclass(frozen=True)
class SeqItem:
    """One item of :func:`sequence`: ``regex`` present once (``"req"``), at most once (``"opt"``)
    or 0 to ``count`` times (``"star"``; ``count`` None: unbounded)."""

    kind: Literal["req", "opt", "star"]
    regex: str
    count: Optional[int] = None


def sequence(items: list[SeqItem], sep: str, check: Optional[Callable[[str], object]] = None) -> str:
    """Comma-separated concatenation of items, in order.

    Linear in size when a required item exists; O(n log n) copies otherwise.  ``check`` (the
    compiler's size check) sees the body of an all-optional sequence before it is wrapped.
    """
    if not items:
        return ""

    def one(it: SeqItem) -> str:
        # regex of the item when it is the first one emitted (no leading comma) and
        # present at least once
        if it.kind == "star":
            e, cnt = it.regex, it.count
            more = None if cnt is None else cnt - 1
            return group(e) + rep("(" + sep + group(e) + ")", 0, more) if (more is None or more > 0) else group(e)
        return group(it.regex)

    def after(it: SeqItem) -> str:
        # item after something was emitted (leading comma), possibly absent if optional
        if it.kind == "star":
            return rep("(" + sep + group(it.regex) + ")", 0, it.count)
        if it.kind == "req":
            return sep + group(it.regex)
        return "(" + sep + group(it.regex) + ")?"

    def before(it: SeqItem) -> str:
        # optional item before the first required one: 'X,' repeated
        if it.kind == "star":
            return rep("(" + group(it.regex) + sep + ")", 0, it.count)
        return "(" + group(it.regex) + sep + ")?"

    first_req = next((i for i, it in enumerate(items) if it.kind == "req"), None)
    if first_req is not None:
        out = [before(it) for it in items[:first_req]]
        out.append(group(items[first_req].regex))
        out += [after(it) for it in items[first_req + 1 :]]
        return "".join(out)

    if all(ecma.is_closed(it.regex) for it in items) and ecma.is_closed(sep) and not ecma.top_level_bar(sep):
        body = _all_optional(items, sep, one, after)
    else:
        body = _all_optional_scanned(items, sep, one, after)
    if check is not None:
        check(body)
    return "(" + body + ")?"


def _all_optional_scanned(items: list[SeqItem], sep: str, one: Callable[[SeqItem], str],
                          after: Callable[[SeqItem], str]) -> str:
    """The body of :func:`sequence` for all-optional items (a non-empty subsequence, divide and
    conquer), every grouping decided by scanning the text (:func:`_all_optional` decides the same
    without scanning)."""

    def tail(lo: int, hi: int) -> str:
        return "".join(after(it) for it in items[lo:hi])

    # split at the first trailing 'star' item (extra properties) at the top level, so that
    # their (often large) regex is copied a constant number of times, not once per level
    n_decl = len(items)
    while n_decl > 0 and items[n_decl - 1].kind == "star":
        n_decl -= 1

    def ne(lo: int, hi: int) -> str:
        if hi - lo == 1:
            return one(items[lo])
        mid = (lo + hi) // 2
        if lo < n_decl < hi and hi == len(items):
            mid = n_decl
            if hi - mid == 1:
                # (D | X)(,X)*: X once as the first item, once repeated
                it = items[mid]
                return "(" + group(ne(lo, mid)) + "|" + group(it.regex) + ")" + after(it)
        left = ne(lo, mid)
        right = ne(mid, hi)
        return "(" + cat(group(left), tail(mid, hi)) + "|" + right + ")"

    return ne(0, len(items))


def _all_optional(items: list[SeqItem], sep: str, one: Callable[[SeqItem], str],
                  after: Callable[[SeqItem], str]) -> str:
    """:func:`_all_optional_scanned`'s text, where every item regex and ``sep`` are closed
    (:func:`~constrained_spec.grammar.ecma_regex.is_closed`) and ``sep`` has no top-level ``|``:
    what the scans of the parts built here would answer is then known by construction (a text
    ``"(" + closed + ")"`` is an atom without a top-level ``|``; the tails, concatenations of
    closed atoms, groups and ``sep``, have no top-level ``|``), so each item's text is scanned
    once instead of once per level (quadratic work for a large object of large members)."""
    n_decl = len(items)
    while n_decl > 0 and items[n_decl - 1].kind == "star":
        n_decl -= 1
    afters: dict[int, str] = {}

    def after_at(i: int) -> str:
        a = afters.get(i)
        if a is None:
            a = afters[i] = after(items[i])
        return a

    def grouped(text: str, kind: str) -> str:
        # group(text): "group" = "(" + closed + ")" (an atom); "other" = "(" + closed + ")" + a
        # non-empty closed text (not an atom); "leaf": one item's text, scanned
        if kind == "group":
            return text
        return "(" + text + ")" if kind == "other" else group(text)

    def ne(lo: int, hi: int) -> tuple[str, str]:
        if hi - lo == 1:
            return one(items[lo]), "leaf"
        mid = (lo + hi) // 2
        if lo < n_decl < hi and hi == len(items):
            mid = n_decl
            if hi - mid == 1:
                it = items[mid]
                a = after_at(mid)
                text = "(" + grouped(*ne(lo, mid)) + "|" + group(it.regex) + ")" + a
                return text, "other" if a else "group"
        left = ne(lo, mid)
        right, _ = ne(mid, hi)
        return "(" + grouped(*left) + "".join(after_at(i) for i in range(mid, hi)) + "|" + right + ")", "group"

    return ne(0, len(items))[0]


def expanded_size(r: str) -> int:
    """Size of a regex with bounded repetitions unrolled ({a,b} counts b copies)."""
    stack = [0]
    last = 0  # size of the last atom/group (for a following quantifier)
    i = 0
    n = len(r)
    while i < n:
        c = r[i]
        if c == "\\":
            j = i + 2
            if r.startswith("u", i + 1):
                j = i + 6
            elif r.startswith("x", i + 1):
                j = i + 4
            elif r.startswith("U", i + 1):
                j = i + 10
            last = j - i
            stack[-1] += last
            i = j
        elif c == "[":
            j = i + 1
            if j < n and r[j] == "^":
                j += 1
            if j < n and r[j] == "]":
                j += 1
            while j < n and r[j] != "]":
                j += 2 if r[j] == "\\" else 1
            last = 1
            stack[-1] += 1
            i = j + 1
        elif c == "(":
            stack.append(0)
            i += 1
        elif c == ")":
            inner = stack.pop() if len(stack) > 1 else 0
            last = inner + 2
            stack[-1] += last
            i += 1
        elif c == "{":
            j = r.find("}", i)
            body = r[i + 1 : j]
            try:
                hi = int(body.split(",")[-1]) if body.split(",")[-1] else int(body.split(",")[0]) + 1
            except ValueError:
                hi = 1
            stack[-1] += last * max(hi - 1, 0)
            i = j + 1
        elif c == "|":
            stack[-1] += 1
            i += 1
        else:
            last = 1
            stack[-1] += 1
            i += 1
    return stack[0]
