"""A ``oneOf`` branch of finitely many names told apart from closed branches, by a presence split.

Branch i admits objects whose names lie in a finite set N (a closed owner: ``additionalProperties:
false``, no ``patternProperties``). A closed branch j (``additionalProperties: false``, names from
``properties``/``patternProperties``) holds for an object of i exactly where every name present is
one j allows, j's required names are present, the values of the present names satisfy j's schemas
for them and j's counts (``minProperties``/``maxProperties``) and ``not: {required}`` hold. Once the
presence of the names that decide is fixed, what is left of "not j" is a disjunction of "name n
present with a value failing j's schema S" for the present names whose values i does not hold within
S (:class:`ClosedSide`'s ``loose``): exact.

:func:`split_closed` splits N on presence against every such branch j at once (a pairwise split
would multiply each pair's disjunction into the others'), and returns the halves that no branch j
holds (:class:`Half`, each with the value negations its branches still need). A half inside some j is
dropped (none of its objects is in exactly one branch). The halves partition i's objects, so their
union is exactly i's objects outside every one of the branches j.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema.content_dfa import DfaTooLarge
from constrained_spec.grammar.json_schema.context import Ctx
from constrained_spec.grammar.json_schema.finite_names import extra_names
from constrained_spec.grammar.json_schema.key_languages import key_cells

__all__ = ["ClosedSide", "Half", "split_closed", "pattern_names"]


@dataclass(frozen=True)
class ClosedSide:
    """A closed branch j as branch i's names see it."""

    #: names of i whose presence puts an object outside j (not a name j allows, or values disjoint)
    fails: frozenset[str]
    #: names of i that j allows and i's values of which may fail j: j's schemas for each that i's
    #: values do not always satisfy
    loose: dict[str, tuple[Ctx, ...]]
    #: the names j requires (all of them names of i; else i's objects are all outside j)
    required: frozenset[str]
    min_props: int = 0
    max_props: Optional[int] = None
    #: each a ``not: {required: [...]}`` of j: some name of it absent (only those within i's names)
    not_required: tuple[frozenset[str], ...] = ()

    def deciding(self) -> frozenset[str]:
        """The names whose presence this side's answer may depend on (without the counts)."""
        out = set(self.fails) | set(self.loose) | set(self.required)
        for x in self.not_required:
            out |= x
        return frozenset(out)


@dataclass
class Half:
    """Objects of i with the names ``present``, without ``absent``; ``negations``: per side index,
    the present names whose value must fail that side's schemas (some one of them)."""

    present: frozenset[str]
    absent: frozenset[str]
    negations: dict[int, list[str]] = field(default_factory=dict)


def _status(side: ClosedSide, present: frozenset[str], undecided: frozenset[str]) -> str:
    """``"apart"`` (no object of the half is in j), ``"inside"`` (every one is), else ``"open"``."""
    n_lo, n_hi = len(present), len(present) + len(undecided)
    if present & side.fails or not side.required <= present | undecided:
        return "apart"
    if (side.max_props is not None and n_lo > side.max_props) or n_hi < side.min_props:
        return "apart"
    if any(x <= present for x in side.not_required):
        return "apart"
    counts_hold = side.min_props <= n_lo and (side.max_props is None or n_hi <= side.max_props)
    if (side.required <= present and counts_hold and not (present | undecided) & (side.fails | set(side.loose))
            and all(not x <= present | undecided for x in side.not_required)):
        return "inside"
    return "open"


def _deciding(side: ClosedSide, present: frozenset[str], undecided: frozenset[str]) -> frozenset[str]:
    """The undecided names this side's answer may still depend on (all of them where its counts are
    not settled)."""
    counts_hold = side.min_props <= len(present) and (
        side.max_props is None or len(present) + len(undecided) <= side.max_props)
    if not counts_hold:
        return undecided
    return undecided & side.deciding()


def split_closed(names: list[str], present: frozenset[str], sides: list[ClosedSide],
                 max_halves: int, max_depth: int, counts: tuple[int, Optional[int]] = (0, None)) -> Optional[list[Half]]:
    """The halves of branch i (names ``names`` in declared order, ``present`` always there) that no
    side holds, each with the value negations left; None past ``max_halves`` halves looked at or
    ``max_depth`` names fixed (the caller refuses by name). ``counts``: branch i's own
    ``minProperties``/``maxProperties``: a half none of whose objects has them is left out (empty)."""
    order = {n: k for k, n in enumerate(names)}
    every = frozenset(names)
    kept: list[Half] = []
    budget = [max_halves]

    def visit(present: frozenset[str], absent: frozenset[str], open_sides: list[int], depth: int) -> bool:
        budget[0] -= 1
        if budget[0] < 0:
            return False
        undecided = every - present - absent
        if len(present) + len(undecided) < counts[0] or (counts[1] is not None and len(present) > counts[1]):
            return True  # branch i has no object here
        still: list[int] = []
        for k in open_sides:
            st = _status(sides[k], present, undecided)
            if st == "inside":
                return True  # dropped: every object of the half satisfies branch j too
            if st == "open":
                still.append(k)
        pending = {k: _deciding(sides[k], present, undecided) for k in still}
        choices = [n for n in names if any(n in d for d in pending.values())]
        if not choices:  # only present names' values decide: one negation per side
            kept.append(Half(present, absent, {k: sorted((n for n in present if n in sides[k].loose), key=order.__getitem__)
                                               for k in still}))
            return True
        if depth >= max_depth:
            return False

        def score(n: str) -> tuple[int, int, int]:
            return (-sum(n in sides[k].fails for k in still), -sum(n in d for d in pending.values()), order[n])

        n = min(choices, key=score)
        return visit(present | {n}, absent, still, depth + 1) and visit(present, absent | {n}, still, depth + 1)

    if not visit(present, frozenset(), list(range(len(sides))), 0):
        return None
    return kept


def pattern_names(pattern: str, limit: int) -> Optional[list[str]]:
    """The names a ``patternProperties`` pattern matches (search semantics), sorted, where they are
    at most ``limit``; None where more, infinitely many, or the pattern is not one the DFAs read."""
    try:
        cells = key_cells((pattern,), (), None)
    except (DfaTooLarge, ecma.PatternError):
        return None
    names: set[str] = set()
    for _, body in cells:
        got = extra_names('"' + body + '"', limit)
        if got is None:
            return None
        names.update(got)
    return sorted(names) if len(names) <= limit else None
