"""``not`` of a ``oneOf`` whose branches may overlap: no branch holds, or two of them do.

A value fails ``oneOf: [B1, ..., Bn]`` exactly where the number of branches it satisfies is not
one: zero (every ``Bk`` fails) or at least two (some pair ``Bi``, ``Bj`` both hold). Written as a
branch group, ``anyOf: [[not B1, ..., not Bn], [B1, B2], [B1, B3], ...]``, it is exact wherever each
``not Bk`` is (:meth:`~.combinators.Combinators._value_negatable`); the pairs hold the branches as
they are. The compiler uses it where the branches are not pairwise disjoint (a disjoint ``oneOf`` is
its ``anyOf``, negated branch by branch) and the leaf cannot negate the schema whole.
"""

from __future__ import annotations

from itertools import combinations
from typing import TYPE_CHECKING, Optional

from constrained_spec.grammar.json_schema.context import Ctx
from constrained_spec.grammar.json_schema.ir import Action, Flat, Group, Holds
from constrained_spec.grammar.json_schema.keywords import asserting_keys

if TYPE_CHECKING:
    from constrained_spec.grammar.json_schema.combinators import Combinators

__all__ = ["MAX_OVERLAP_BRANCHES", "overlap_branches", "overlap_not_group", "overlap_negatable",
           "relative_members_not"]

#: most branches of a ``oneOf`` negated as "none or two" (n branches make 1 + n(n-1)/2 alternatives)
MAX_OVERLAP_BRANCHES = 4


def overlap_branches(comp: "Combinators", ctx: Ctx) -> Optional[list[Ctx]]:
    """The branches of ctx (through bare ``$ref``s) where it is only a ``oneOf`` of two to
    :data:`MAX_OVERLAP_BRANCHES` branches; None for any other form."""
    target = comp.bare_ref_target(ctx)
    s = target.schema
    if not (isinstance(s, dict) and asserting_keys(s) == {"oneOf"} and isinstance(s["oneOf"], list)
            and 2 <= len(s["oneOf"]) <= MAX_OVERLAP_BRANCHES):
        return None
    return [target.child(b, "oneOf", n) for n, b in enumerate(s["oneOf"])]


def overlap_not_group(comp: "Combinators", ctx: Ctx) -> Optional[Group]:
    """``not: ctx`` for a ``oneOf`` of :func:`overlap_branches` as the branch group "every branch
    fails, or some two hold"; None where ctx is not of that form."""
    branches = overlap_branches(comp, ctx)
    if branches is None:
        return None
    none_holds: list[Action] = [Holds(b, False) for b in branches]
    alternatives: list[list[Action]] = [none_holds]
    alternatives += [[Holds(a, True), Holds(b, True)] for a, b in combinations(branches, 2)]
    return ("anyOf", alternatives, ctx.ptr)


def overlap_negatable(comp: "Combinators", ctx: Ctx, depth: int, deep: Optional[bool]) -> Optional[bool]:
    """Whether :func:`overlap_not_group` writes ``not: ctx`` exactly: each branch's negation is
    exact in turn (one level deeper); None where ctx is not of that form."""
    branches = overlap_branches(comp, ctx)
    if branches is None:
        return None
    return all(comp._value_negatable(b, depth + 1, deep) for b in branches)


def relative_members_not(comp: "Combinators", fi: Flat, cj: Ctx) -> Optional[list[Action]]:
    """``not`` branch j within branch i, for a branch j that is only an ``allOf`` some of whose
    members (through bare ``$ref``s) branch i holds itself (the same schema objects i absorbed:
    every value of i satisfies them): i and ``not j`` is i and ``not R``, R the conjunction of the
    other members (``not (A and B)`` is ``not A or not B``), exact where each member's negation is
    (:meth:`~.combinators.Combinators._value_negatable`). None where not of that form."""
    target = comp.bare_ref_target(cj)
    s = target.schema
    if not (isinstance(s, dict) and asserting_keys(s) == {"allOf"} and isinstance(s["allOf"], list)):
        return None
    held = {id(c.schema) for c, positive in fi.sources if positive}
    own = [(m, target.child(m, "allOf", n)) for n, m in enumerate(s["allOf"])
           if id(comp.bare_ref_target(target.child(m, "allOf", n)).schema) not in held]
    if not own or len(own) == len(s["allOf"]):
        return None  # nothing held by i (the whole negation is tried elsewhere)
    if not all(comp._value_negatable(c, 0, True) for _, c in own):
        return None
    if len(own) == 1:
        return [Holds(own[0][1], False)]
    return [Holds(comp.made_up({"allOf": [m for m, _ in own]}, target), False)]

