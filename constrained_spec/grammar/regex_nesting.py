"""How deeply a regex text nests, as the Rust ``regex-syntax`` parser behind llguidance counts it.

``regex-syntax`` refuses a pattern whose syntax tree nests past its nest limit (250 by default),
counting one level for every group, repetition, alternation of two or more branches,
concatenation of two or more items and bracketed class. A schema whose regex fits
``max_regex_chars`` can still pass it: 139 groups deep, each of them repeated and holding a
sequence, is about 400 levels. llguidance then refuses the regex at generation time
("the regex does not compile"); the compiler checks :func:`nest_height` first and sends such a
schema down the route of a regex past the size cap (tighter retries, then a grammar whose
terminals are short).

The count is conservative where the two could differ (escapes such as ``\\d`` count as one
character); ``tests/grammar/test_regex_nesting.py`` holds it against llguidance itself.
"""

from __future__ import annotations

import itertools
import re

__all__ = ["REGEX_NEST_LIMIT", "group_depth", "nest_height", "too_deep"]

#: the nest limit of ``regex-syntax`` (its default, which llguidance keeps)
REGEX_NEST_LIMIT = 250
#: a regex whose groups nest at most this deep is within the limit whatever the rest (each group
#: adds at most 4 levels: itself, an alternation, a concatenation, a repetition around it; a class
#: at the bottom 2, the top level 3 more): only deeper ones are counted exactly
_SAFE_GROUP_DEPTH = (REGEX_NEST_LIMIT - 5) // 4

_ESCAPE = re.compile(r"\\.", re.S)
_CLASS = re.compile(r"\[[^\]]*\]")
_NOT_PAREN = re.compile(r"[^()]+")
_STEP = {"(": 1, ")": -1}
_COUNTED = re.compile(r"\{[0-9]+(,[0-9]*)?\}")


def group_depth(p: str) -> int:
    """How deep the groups of ``p`` nest (escapes and classes skipped), by ``re`` and C-level
    iteration: cheap enough to ask of every compiled regex."""
    bare = _CLASS.sub("", _ESCAPE.sub("", p))
    parens = _NOT_PAREN.sub("", bare)
    return max(itertools.accumulate(map(_STEP.__getitem__, parens)), default=0)


class _Level:
    """One open group while :func:`nest_height` reads: the heights of its finished branches and
    of the items of the branch being read."""

    __slots__ = ("branches", "branch_max", "items", "item_max", "last")

    def __init__(self) -> None:
        self.branches = 0  # finished branches
        self.branch_max = 0  # their greatest height
        self.items = 0  # items of the branch being read, the last one included
        self.item_max = 0  # greatest height among them, the last one excluded
        self.last = -1  # height of the last item (-1: none yet), which a quantifier may raise

    def end_branch(self) -> None:
        if self.last >= 0:
            self.item_max = max(self.item_max, self.last)
        height = self.item_max + 1 if self.items >= 2 else (self.item_max if self.items else 0)
        self.branch_max = max(self.branch_max, height)
        self.branches += 1
        self.items, self.item_max, self.last = 0, 0, -1

    def height(self) -> int:
        self.end_branch()
        return self.branch_max + 1 if self.branches >= 2 else self.branch_max

    def push(self, height: int) -> None:
        if self.last >= 0:
            self.item_max = max(self.item_max, self.last)
        self.items += 1
        self.last = height


_CLASS_ITEM = re.compile(r"(\\.|[^\\])(-(\\.|[^\\]))?", re.S)


def _class_height(body: str) -> int:
    """A bracketed class's levels: 1, and 1 more for a union of two or more items (a character,
    an escape or a range each)."""
    items = 0
    for _ in _CLASS_ITEM.finditer(body):
        items += 1
        if items > 1:
            return 2
    return 1


def nest_height(p: str) -> int:
    """The levels of ``p``'s syntax tree as ``regex-syntax`` counts them (see the module
    docstring), read without recursion: linear in the text."""
    stack = [_Level()]
    i, n = 0, len(p)
    quantified = False  # the last item already carries a quantifier (a lazy '?' after it adds none)
    while i < n:
        c = p[i]
        top = stack[-1]
        after_quantifier, quantified = quantified, False
        counted = _COUNTED.match(p, i) if c == "{" else None
        if c == "\\":
            top.push(0)
            i += 2
        elif c == "[":
            j = i + 1
            if j < n and p[j] == "^":
                j += 1
            start = j
            if j < n and p[j] == "]":
                j += 1  # a ']' first is a literal
            while j < n and p[j] != "]":
                j += 2 if p[j] == "\\" else 1
            top.push(_class_height(p[start:j]))
            i = j + 1
        elif c == "(":
            stack.append(_Level())
            i += 3 if p.startswith("?:", i + 1) else 1
        elif c == ")":
            if len(stack) > 1:
                inner = stack.pop().height()
                stack[-1].push(inner + 1)
            i += 1
        elif c == "|":
            top.end_branch()
            i += 1
        elif c in "*+?" or counted:
            if not (c == "?" and after_quantifier) and top.last >= 0:  # (a lazy '?': a flag, no level)
                top.last += 1
                quantified = True
            i = counted.end() if counted else i + 1
        else:
            top.push(0)
            i += 1
    while len(stack) > 1:  # an unclosed group (not ours to write): counted as closed
        inner = stack.pop().height()
        stack[-1].push(inner + 1)
    return stack[0].height()


def too_deep(p: str) -> bool:
    """Whether ``regex-syntax`` would refuse ``p`` for its nesting (:data:`REGEX_NEST_LIMIT`):
    :func:`group_depth` first, the exact count only for the deep ones."""
    return group_depth(p) > _SAFE_GROUP_DEPTH and nest_height(p) > REGEX_NEST_LIMIT
