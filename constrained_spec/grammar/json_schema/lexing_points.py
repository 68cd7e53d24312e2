"""The sets of terminals llguidance's lexer may try at one point of a parse: the groups the
greedy-lexing check (:func:`~.lexeme_check.greedy_safe`) compares pairwise.

After some complete lexemes the parser may be at several places of the grammar at once: where
alternatives share a prefix (``A r0 B | A r1 C``: after ``A`` both ``r0`` and ``r1`` may start),
and the lexer then tries every terminal any of them expects. The set of terminals that may start
at one *place* of the grammar misses that union (a grammar passed the check while greedy lexing
lost ``"pa"`` to ``"purple"`` in ``{"r": ("(x)?" | "purple" ...)}``).

The groups here come from a position automaton of the grammar (Glushkov's construction, with a
rule's last positions followed by whatever follows any of its references): each terminal
occurrence is a state, and reading a terminal name moves a set of occurrences to the occurrences
of that name that may come next. Every parse maps to a path of this automaton (the automaton's
terminal sequences are a superset of the grammar's), so the occurrences reachable by a terminal
sequence include every place the parser may be after it. Each reachable set contributes the names
of the occurrences that may follow it: one group. Past :data:`MAX_WORK` steps the answer is the
coarser, still sound, grouping by terminal: every terminal with the names that may follow it
anywhere.
"""

from __future__ import annotations

import collections
from typing import Optional, Union

__all__ = ["MAX_WORK", "lexing_groups"]

Expr = tuple

#: the most occurrences the determinisation may read (each set visited, and what may follow it)
#: before it answers with the coarser grouping (one group per terminal: what may follow it
#: anywhere). The largest grammar of the JSONSchemaBench development splits (15,326 occurrences)
#: takes well under a tenth of it.
MAX_WORK = 4_000_000


def lexing_groups(root: Expr, rules: dict[str, Expr], follows: dict[str, frozenset[str]],
                  rule_null: dict[str, bool], start: frozenset[str]) -> set[frozenset[str]]:
    """The sets of terminal names that may start at one point of a parse of ``root`` (``rules``:
    rule name -> body; expressions as :mod:`.emit_lark` writes them). ``follows``: terminal -> the
    terminals that may follow it anywhere, and ``start``: those that may start the text (the
    coarser grouping past :data:`MAX_WORK`, counted while the automaton is built and while it is
    determinised); ``rule_null``: whether each rule derives the empty text (``emit_lark._Flow.null_r``)."""
    try:
        found = _Automaton(root, rules, rule_null).groups()
    except _OverWork:
        found = None
    if found is not None:
        return found
    groups = {frozenset(f) for f in follows.values() if f}
    groups.add(start)
    return groups


class _OverWork(Exception):
    """Building the automaton's edges passed :data:`MAX_WORK` (the coarser grouping answers)."""


class _Automaton:
    """The position automaton: terminal occurrences (numbered in walk order), the occurrences that
    may follow each, and those that may start the text. While the expressions are walked a rule
    reference stands as the mark ``-1 - k`` (``k``: its index in ``refs``); the marks are resolved
    to the rule's first or last occurrences once every rule has been walked."""

    def __init__(self, root: Expr, rules: dict[str, Expr], rule_null: dict[str, bool]) -> None:
        self.null = rule_null
        self.name: list[str] = []  # occurrence -> terminal name
        self.follow: list[set[int]] = []  # occurrence -> occurrences (or marks) that may come next
        self.refs: list[str] = []  # mark k -> the rule it refers to
        self.ref_follow: list[set[int]] = []  # mark k -> what may come right after the reference
        self.work = 0  # occurrences written into follow sets so far (past MAX_WORK: _OverWork)
        root_first, _, _ = self._add(root)
        bodies = {r: self._add(body) for r, body in rules.items()}
        first: dict[str, set[int]] = {r: set() for r in rules}
        last: dict[str, set[int]] = {r: set() for r in rules}

        def resolved(marks: set[int], table: dict[str, set[int]]) -> set[int]:
            out: set[int] = set()
            for i in marks:
                if i >= 0:
                    out.add(i)
                else:
                    got = table[self.refs[-1 - i]]
                    self._spend(len(got))
                    out |= got
            return out

        # a rule's first and last occurrences through the rules it refers to: the least fixed point,
        # a rule computed again only when a rule it refers to grew (the sets only grow: their
        # sizes tell a change)
        users: dict[str, set[str]] = {r: set() for r in rules}
        for r, (bf, bl, _) in bodies.items():
            for i in bf | bl:
                if i < 0:
                    users[self.refs[-1 - i]].add(r)
        todo = collections.deque(rules)
        queued = set(rules)
        while todo:
            r = todo.popleft()
            queued.discard(r)
            bf, bl, _ = bodies[r]
            f, lst = resolved(bf, first), resolved(bl, last)
            if len(f) != len(first[r]) or len(lst) != len(last[r]):
                first[r], last[r] = f, lst
                for u in users[r]:
                    if u not in queued:
                        queued.add(u)
                        todo.append(u)
        for s in range(len(self.follow)):
            self.follow[s] = resolved(self.follow[s], first)
        for k, rule in enumerate(self.refs):
            after = resolved(self.ref_follow[k], first)
            self._spend(len(after) * len(last[rule]))
            for i in last[rule]:
                self.follow[i] |= after
        self.start = frozenset(resolved(root_first, first))

    def _add(self, e: Expr) -> tuple[set[int], set[int], bool]:
        """(first occurrences, last occurrences, nullable) of ``e``, marks standing for references;
        the follow edges inside ``e`` are added."""
        kind = e[0]
        if kind == "T":
            self.name.append(e[1])
            self.follow.append(set())
            return {len(self.name) - 1}, {len(self.name) - 1}, False
        if kind == "R":
            self.refs.append(e[1])
            self.ref_follow.append(set())
            mark = -len(self.refs)
            return {mark}, {mark}, self.null[e[1]]
        if kind == "seq":
            first: set[int] = set()
            last: set[int] = set()
            null = True
            for x in e[1]:
                f, lst, n = self._add(x)
                self._link(last, f)
                if null:
                    first |= f
                last = (lst | last) if n else lst
                null = null and n
            return first, last, null
        if kind == "alt":
            first, last, null = set(), set(), False
            for x in e[1]:
                f, lst, n = self._add(x)
                first |= f
                last |= lst
                null = null or n
            return first, last, null
        f, lst, n = self._add(e[1])  # ("rep", body, lo, hi)
        if e[3] is None or e[3] > 1:
            self._link(lst, f)
        return f, lst, n or e[2] == 0

    def _spend(self, steps: int) -> None:
        self.work += steps
        if self.work > MAX_WORK:
            raise _OverWork

    def _link(self, src: set[int], dst: set[int]) -> None:
        self._spend(len(src) * len(dst))
        for s in src:
            (self.follow[s] if s >= 0 else self.ref_follow[-1 - s]).update(dst)

    def groups(self) -> Optional[set[frozenset[str]]]:
        """The names that may be read next from each set of occurrences reachable by reading
        terminal names from the start (the subset construction); None past :data:`MAX_WORK` steps.
        Most sets are one occurrence (a name read once among what may come next): those are kept
        as the occurrence itself, without building a set."""
        name, follow = self.name, self.follow
        groups: set[frozenset[str]] = set()
        seen_one: set[int] = set()
        seen_many: set[frozenset[int]] = set()
        todo: collections.deque[Union[int, frozenset[int]]] = collections.deque()

        def visit(nxt: Union[set[int], frozenset[int]]) -> None:
            names = frozenset([name[i] for i in nxt])
            if names:
                groups.add(names)
            if len(names) == len(nxt):  # every name once: each move leads to one occurrence
                for i in nxt:
                    if i not in seen_one:
                        seen_one.add(i)
                        todo.append(i)
                return
            by_name: dict[str, set[int]] = {}
            for i in nxt:
                by_name.setdefault(name[i], set()).add(i)
            for members in by_name.values():
                if len(members) == 1:
                    (i,) = members
                    if i not in seen_one:
                        seen_one.add(i)
                        todo.append(i)
                    continue
                key = frozenset(members)
                if key not in seen_many:
                    seen_many.add(key)
                    todo.append(key)

        visit(self.start)
        work = 0
        while todo:
            here = todo.popleft()
            if isinstance(here, int):
                nxt = follow[here]
                work += 1 + len(nxt)
            else:
                nxt = set()
                for i in here:
                    nxt |= follow[i]
                work += len(here) + len(nxt)
            if work > MAX_WORK:
                return None
            visit(nxt)
        return groups
