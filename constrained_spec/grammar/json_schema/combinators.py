"""Combinators: ``oneOf`` made disjoint, disjointness of subschemas, and ``not``.

``anyOf``/``oneOf``/``if``/dependencies are expanded by the compiler (one alternative per
branch); :meth:`Combinators.one_of_branches` first restricts the ``oneOf`` branches so that no
value satisfies two of them, with the disjointness tests below.  :meth:`Combinators.apply_not`
turns the ``not`` forms the compiler can express into constraints of the leaf.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, Union

from constrained_spec.errors import SchemaError, UnsupportedKeywordError
from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema.base import CompilerBase
from constrained_spec.grammar.json_schema.closed_split import ClosedSide, pattern_names, split_closed
from constrained_spec.grammar.json_schema.content_dfa import MAX_STATES, DfaTooLarge
from constrained_spec.grammar.json_schema.context import Ctx, NegCtx
from constrained_spec.grammar.json_schema.declared_names import never_declared
from constrained_spec.grammar.json_schema.finite_names import MAX_NAMED_EXTRAS
from constrained_spec.grammar.json_schema.ir import Action, Flat, Forbid, Group, Holds, NarrowTypes, Require, Unseen
from constrained_spec.grammar.json_schema.keywords import IGNORED_KEYWORDS, STRUCTURAL_KEYWORDS, asserting_keys
from constrained_spec.grammar.json_schema.negation import negation_keyword, plan_not
from constrained_spec.grammar.json_schema.overlap_not import overlap_negatable, relative_members_not
from constrained_spec.grammar.json_schema.py_regex import pattern_problem, py_pattern_ok, py_search
from constrained_spec.grammar.json_schema.regex_ops import first_chars_disjoint
from constrained_spec.grammar.json_schema.values import ALL_TYPES, intersect_types, type_of
from constrained_spec.grammar.linear_regex import patterns_disjoint

__all__ = ["Combinators"]

#: keywords that say nothing about which values a schema admits (two schemas differing only in them
#: have one language)
_ANNOTATIONS = frozenset({"title", "description", "$comment", "examples", "example", "default", "readOnly",
                          "writeOnly", "deprecated"})


#: the keywords that constrain values of some types only (every value of another type satisfies them)
_OBJECT_ONLY = ("properties", "required", "additionalProperties", "patternProperties", "unevaluatedProperties",
                "propertyNames", "minProperties", "maxProperties", "dependencies", "dependentRequired",
                "dependentSchemas")
_ARRAY_ONLY = ("items", "prefixItems", "additionalItems", "unevaluatedItems", "contains", "minContains",
               "maxContains", "minItems", "maxItems", "uniqueItems")
_TYPE_KEYWORDS: dict[str, frozenset[str]] = {
    **{k: frozenset({"object"}) for k in _OBJECT_ONLY},
    **{k: frozenset({"array"}) for k in _ARRAY_ONLY},
    **{k: frozenset({"string"}) for k in ("pattern", "minLength", "maxLength", "format")},
    **{k: frozenset({"number", "integer"}) for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                                      "multipleOf")},
}

#: most alternative sets of required names :meth:`Combinators.required_options` combines
MAX_REQUIRED_OPTIONS = 32

#: most names a oneOf about present names may mention (its truth table has 2**n rows)
MAX_PRESENCE_NAMES = 6
#: most halves :meth:`Combinators._presence_halves` looks at for one pair of branches, and how deep
#: (names fixed present or absent) it splits: a chain of names each of which decides one half at
#: once costs two halves a name, a full tree of 6 names 127
MAX_PRESENCE_HALVES = 128
MAX_PRESENCE_SPLIT = 16

#: the keywords of a value schema whose language its flat's types, lengths and bounds say exactly
_LEAF_BOUNDS = frozenset({"type", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
#: keywords that read one another: ``not`` of a schema holding one is not split by De Morgan
_DEPENDENT_KEYWORDS = frozenset({"unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"})
#: keywords that read one another, kept together in one part of a conjunction (:meth:`Combinators.conjunction_parts`)
_KEYWORD_UNITS: list[frozenset[str]] = [
    frozenset({"properties", "patternProperties", "additionalProperties"}),
    frozenset({"items", "prefixItems", "additionalItems"}),
    frozenset({"contains", "minContains", "maxContains"}),
    frozenset({"if", "then", "else"}),
]
#: draft 4's bounds, whose exclusive forms are flags on them
_DRAFT4_BOUNDS: list[frozenset[str]] = [frozenset({"minimum", "exclusiveMinimum"}), frozenset({"maximum", "exclusiveMaximum"})]

#: how deep :meth:`Combinators._value_negatable` looks into a schema (properties, items, parts)
MAX_NEGATION_DEPTH = 8

#: most :meth:`Combinators._value_negatable` calls open at once (each level of a negation it checks)
MAX_NEGATABLE_NESTING = 16

#: most branches of a ``oneOf`` tested pairwise for disjointness to negate it as an ``anyOf``
MAX_DISJOINT_BRANCHES = 12

#: most object constants one branch is told apart from (each a branch group)
MAX_OBJECT_CONSTS = 4

#: most names a branch of infinitely many names is split on against closed branches (each
#: assignment two parts: :meth:`Combinators._counted_halves`)
MAX_COUNTED_NAMES = 4

#: the keywords of a closed branch :meth:`Combinators._closed_side` reads
_CLOSED_KEYS = frozenset({"type", "properties", "patternProperties", "additionalProperties", "required",
                          "minProperties", "maxProperties", "not"})


@dataclass
class _Scene:
    """The branches of one ``oneOf`` as :meth:`Combinators._one_of_branches` reads them: each
    branch's context, conjunction (None: unsupported), possible types, and the context's types."""

    ctxs: list[Ctx]
    flats: list[Optional[Flat]]
    possible: list[Optional[set[str]]]
    outer: Optional[set[str]]


@dataclass
class _TypeApart:
    """How one type of a branch was told apart from the others (:meth:`Combinators._type_apart`)."""

    ok: bool  # told apart from every other branch
    acts: list[Action]  # the actions that do it
    negs: dict[int, Action]  # j -> "not branch j", exact on this type only
    parts: Optional[list[list[Action]]]  # the branch's objects by parts apart from closed branches


class Combinators(CompilerBase):
    """``oneOf`` disjointness, subschema disjointness tests and ``not``."""

    def one_of_branches(self, branches: list[list[Action]], ptr: str, outer: Optional[set[str]] = None,
                        given: frozenset[str] = frozenset(),
                        context: Optional[frozenset[str]] = None) -> list[list[Action]]:
        """The branches of the ``oneOf`` at ``ptr`` made pairwise disjoint (:meth:`_one_of_branches`),
        telling string branches apart by their patterns' automata where ``ptr`` is in
        :attr:`automata_oneof`. Where that refuses (after the automata retry) or records the keyword
        as unenforced, once more in the *strict* mode, with the exact constructions of
        :meth:`_apart_more` / :meth:`_presence_rows` and the deeper negations tried too; either way
        the answer is exact or refused by name. ``given``: the names every object has where the ``oneOf`` is met
        (the context's ``required``): the presence split (:meth:`_presence_halves`) starts from them.
        ``context``: the names the context declares where the declared mode lets a branch count on
        the names outside them and its own being absent (:mod:`.declared_names`); None where not."""
        before = (self.oneof_given, self.oneof_context, self.unseen_now)
        self.oneof_given, self.oneof_context = given, context
        try:
            return self._one_of_rounds(branches, ptr, outer)
        finally:
            self.oneof_given, self.oneof_context, self.unseen_now = before

    def _one_of_rounds(self, branches: list[list[Action]], ptr: str, outer: Optional[set[str]]) -> list[list[Action]]:
        """:meth:`one_of_branches`' rounds: the older one, then the strict one where it must."""
        mark = len(self.unenforced)
        older: Optional[tuple[list[list[Action]], list[str]]] = None
        try:
            out = self._one_of_round(branches, ptr, outer)
        except UnsupportedKeywordError as e:
            if e.keyword != "oneOf" or e.pointer != ptr or ptr not in self.automata_oneof:
                raise
        else:
            if len(self.unenforced) == mark:
                return out
            older = (out, self.unenforced[mark:])  # allow_unenforced: the older sound part, recorded
            del self.unenforced[mark:]
        before = self.strict_oneof
        self.strict_oneof = True
        try:
            strict = self._one_of_round(branches, ptr, outer)
        finally:
            self.strict_oneof = before
        if older is not None and len(self.unenforced) > mark:  # not exact either: the older answer, as before
            del self.unenforced[mark:]
            self.unenforced.extend(older[1])
            return older[0]
        return strict

    def _one_of_round(self, branches: list[list[Action]], ptr: str, outer: Optional[set[str]]) -> list[list[Action]]:
        """One try at the branches (:meth:`one_of_branches`): refused (or recorded) by name where no
        branch keeps anything."""
        before = self.automata_now
        self.automata_now = ptr in self.automata_oneof
        try:
            out = self._presence_rows(branches) if self.strict_oneof else None  # about present names only
            if out is None:
                out = self._one_of_branches(branches, ptr, outer, set())
            if out is None:  # nothing told apart: twin branches, where there are some, admit none of theirs
                twins = self._twin_branches([_branch_ctx(b) for b in branches])
                if twins:
                    out = self._one_of_branches(branches, ptr, outer, twins)
        finally:
            self.automata_now = before
        if out is None:
            self.unsupported("oneOf", ptr, "the branches cannot be told apart (oneOf is enforced for disjoint branches only)")
            return branches
        return out

    def _one_of_branches(self, branches: list[list[Action]], ptr: str, outer: Optional[set[str]],
                         twins: set[int]) -> Optional[list[list[Action]]]:
        """Make the branches of a oneOf pairwise disjoint by restricting each one: drop the
        types it cannot be told apart on, forbid/require discriminating properties, filter
        finite branches exactly, or add "not branch j" where that negation is exact on the types
        branch i keeps within ``outer`` (the types the context allows; None: all).  Every value of
        restricted branch i fails every branch j. ``twins``: branches that admit none of their values
        (:meth:`_twin_branches`). None where no branch keeps anything (the caller refuses)."""
        if outer is not None and not outer:
            return branches  # the context admits no value: nothing to tell apart
        ctxs = [_branch_ctx(b) for b in branches]
        flats = [self._absorbed(c) for c in ctxs]
        possible = [self._possible_or_none(c) for c in ctxs]
        scene = _Scene(ctxs, flats, possible, outer)
        out: list[list[Action]] = []
        kept_any = False
        dropped: list[tuple[int, str, int]] = []  # (branch i, type t, branch j): t of i not told apart from j
        starts: list[int] = []  # where branch i's entries of out begin
        unseen: list[set[str]] = []  # the names branch i was taken never to declare (declared_names)
        for i, br in enumerate(branches):
            starts.append(len(out))
            self.unseen_now = set()
            unseen.append(self.unseen_now)
            acts = list(br)
            fi = flats[i]
            if i in twins:  # every value of branch i satisfies its twin too: never exactly one
                out.append(acts + [NarrowTypes(frozenset())])
                kept_any = True
                continue
            if fi is None:
                out.append(acts)
                continue
            if fi.enum is not None:
                acts += [Holds(ctxs[j], False) for j in range(len(ctxs)) if j != i]
                out.append(acts)
                kept_any = True
                continue
            types_i = set(ALL_TYPES) if fi.types is None else set(fi.types)
            pi = possible[i]
            if pi is not None:  # the types its nested branches allow (exact: it admits no others)
                types_i = intersect_types(types_i, pi)
            neg_types = types_i if outer is None else intersect_types(types_i, outer)
            base = [t for t in types_i if not (t == "integer" and "number" in types_i)]
            bare = fi.lo is None and fi.hi is None and not fi.multiple_of  # its numbers are unbounded
            keep: set[str] = set()
            extra: list[Action] = []
            negated: dict[int, Action] = {}  # j -> "not branch j" (exactly one: i and none of the others)
            by_type: dict[str, dict[int, Action]] = {}  # t -> j -> "not branch j", exact on type t only
            halves: dict[str, list[list[Action]]] = {}  # t -> branch i's objects apart from closed branches, by parts
            for t in base:
                if outer is not None and not intersect_types({t}, outer):
                    continue  # the context admits no value of type t: dropped below, as before
                told = self._type_apart(scene, i, fi, t, neg_types, bare, negated, dropped)
                ok, acts_t, negs_t = told.ok, told.acts, told.negs
                if told.parts is not None:
                    halves[t] = told.parts
                if ok:
                    keep.add(t)
                    if t == "number":
                        keep.add("integer")
                    extra += acts_t
                    if negs_t:
                        by_type[t] = negs_t
            kept_any = kept_any or bool(keep)
            common = extra + [negated[j] for j in sorted(negated)]
            if halves:
                out += self._branches_by_halves(acts, keep, common, by_type, halves)
                continue
            if by_type:  # one branch for the types that need no negation of their own, one per type that does
                plain = keep - set(by_type) - ({"integer"} if "number" in by_type else set())
                if plain:
                    out.append(acts + [NarrowTypes(frozenset(plain))] + common)
                for t, negs in by_type.items():
                    out.append(acts + [NarrowTypes(self._of_type(t, None))] + common + [negs[j] for j in sorted(negs)])
                continue
            if keep != types_i:
                acts.append(NarrowTypes(frozenset(keep)))
            out.append(acts + common)
        starts.append(len(out))
        for i, names in enumerate(unseen):
            if names:  # checked where the object is written (declared_names.check_unseen)
                out[starts[i]:starts[i + 1]] = [b + [Unseen(ptr, frozenset(names))] for b in out[starts[i]:starts[i + 1]]]
        if not kept_any:
            return None
        if dropped:
            groups = self._twin_groups(ctxs)
            for i, t, j in dropped:
                if not any(i in g and j in g for g in groups):  # a twin's values all satisfy i: none is lost
                    self.refuse_dropped_type(ptr, i, t, j)
        return out

    def _type_apart(self, sc: _Scene, i: int, fi: Flat, t: str, neg_types: set[str], bare: bool,
                    negated: dict[int, Action], dropped: list[tuple[int, str, int]]) -> _TypeApart:
        """Type t of branch i told apart from every other branch (:meth:`_one_of_branches`): the
        actions, the negations exact on t only, the closed branches' parts; "not branch j" exact on
        all of i's types goes to ``negated``, a pair that is not told apart to ``dropped``."""
        acts_t: list[Action] = []
        negs_t: dict[int, Action] = {}
        pending: list[int] = []  # closed branches j told apart below, all at once (:meth:`_closed_halves`)
        claimed: set[str] = set()
        acts_of: dict[int, list[Action]] = {}  # j -> the actions that told type t of i apart from j
        ok = True
        for j, fj in enumerate(sc.flats):
            if j == i:
                continue
            pj = sc.possible[j]
            if pj is not None and not intersect_types({t}, pj):
                continue  # branch j admits no value of type t
            if self._complementary(sc.ctxs[i], sc.ctxs[j]):
                continue  # one branch is "not X", the other holds X
            res = None if fj is None else self._exclude(t, fi, fj, sc.ctxs[i], sc.ctxs[j])
            if res is None and self.strict_oneof:  # the exact constructions before the negations
                res = self._apart_more(t, fi, fj, sc.ctxs[i], sc.ctxs[j])
            if res is None:
                neg = self._negated_branch(sc.ctxs[j], fj, neg_types, bare)
                if neg is not None:
                    negated[j] = neg
                    continue
                neg = self._negated_branch(sc.ctxs[j], fj, set(self._of_type(t, sc.outer)), bare)
                if neg is not None:  # exact on type t: branch i's values of type t get it apart
                    negs_t[j] = neg
                    continue
                if t == "object" and self.strict_oneof and not self.admits_all(sc.ctxs[j], t, 0):
                    if not pending:  # the names claimed never declared so far (restored where refused)
                        claimed = set(self.unseen_now)
                    pending.append(j)
                    continue
                ok = False
                if not (self.strict_oneof and self.admits_all(sc.ctxs[j], t, 0)):  # else: every value of type t satisfies branch j
                    dropped.append((i, t, (pending or [j])[0]))  # (none of branch i's is exactly one: dropped exactly)
                if pending:
                    self.unseen_now.intersection_update(claimed)
                break
            acts_t += res
            acts_of[j] = res
        found: Optional[list[list[Action]]] = None
        joint = self._jointly_closed(pending, acts_of, sc.ctxs) if ok and t == "object" else []
        if joint:
            parts = self._closed_halves(fi, [sc.ctxs[j] for j in joint])
            if parts is None and pending:  # as before: not told apart from the first of them
                ok = False
                dropped.append((i, t, pending[0]))
                self.unseen_now.intersection_update(claimed)  # (the later branches' claims: not made before)
            elif parts is not None:  # (empty: every object of i satisfies one of them, none is exactly one)
                ok = ok and bool(parts)
                found = parts
                acts_t = [a for j in acts_of if j not in joint for a in acts_of[j]]
        return _TypeApart(ok, acts_t, negs_t, found)

    def _presence_rows(self, branches: list[list[Action]]) -> Optional[list[list[Action]]]:
        """A ``oneOf`` whose branches say only which names are present (``required`` under
        ``allOf``/``anyOf``/``oneOf``/``not``, at most :data:`MAX_PRESENCE_NAMES` names): every row of
        the truth table over those names judged by the validator (an object with exactly those names;
        a non-object), the rows where exactly one branch holds kept, merged into terms (required
        names, forbidden names). Exact; None where the branches are not of this form."""
        ctxs = [_branch_ctx(b) for b in branches]
        names: set[str] = set()
        if not all(_presence_only(self.bare_ref_target(c).schema, names, 0) for c in ctxs):
            return None
        if not names or len(names) > MAX_PRESENCE_NAMES:
            return None
        order = sorted(names)
        full = (1 << len(order)) - 1
        rows = [m for m in range(full + 1)
                if sum(self.doc.valid(c, {n: None for k, n in enumerate(order) if m >> k & 1}) for c in ctxs) == 1]
        out: list[list[Action]] = []
        for bits, care in _merged_terms(rows, full):
            acts: list[Action] = [NarrowTypes(frozenset({"object"}))]
            present = tuple(n for k, n in enumerate(order) if care >> k & 1 and bits >> k & 1)
            if present:
                acts.append(Require(present))
            acts += [Forbid(n) for k, n in enumerate(order) if care >> k & 1 and not bits >> k & 1]
            out.append(acts)
        if sum(self.doc.valid(c, None) for c in ctxs) == 1:  # such a branch holds for every non-object alike
            out.append([NarrowTypes(frozenset(ALL_TYPES - {"object"}))])
        return out

    def _complementary(self, a: Ctx, b: Ctx) -> bool:
        """Whether one of two subschemas is ``not: X`` and the other holds X (is X, or has X in its
        ``allOf``), each through bare ``$ref``s: no value satisfies both."""
        for x, y in ((a, b), (b, a)):
            xt = self.bare_ref_target(x)
            xs = xt.schema
            if not (isinstance(xs, dict) and asserting_keys(xs) == {"not"}):
                continue
            negated = self.bare_ref_target(xt.child(xs["not"], "not")).schema
            yt = self.bare_ref_target(y)
            ys = yt.schema
            if ys is negated:
                return True
            if isinstance(ys, dict) and isinstance(ys.get("allOf"), list) and any(
                self.bare_ref_target(yt.child(m, "allOf", k)).schema is negated for k, m in enumerate(ys["allOf"])
            ):
                return True
        return False

    def refuse_dropped_type(self, ptr: str, i: int, t: str, j: int) -> None:
        """Refuse the ``oneOf`` at ``ptr`` (or record it: branch i then keeps no value of type t, a
        sound part): branch i's values of type t cannot be told apart from branch j's."""
        self.unsupported("oneOf", ptr, f"branch {i}'s values of type {t} cannot be told apart from branch {j}'s "
                         "(no exact negation of that branch)")

    @staticmethod
    def _of_type(t: str, outer: Optional[set[str]]) -> frozenset[str]:
        """The type names of values of type t (numbers with their integers), within outer (None: all)."""
        ts = {t, "integer"} if t == "number" else {t}
        return frozenset(ts if outer is None else intersect_types(ts, outer))

    def _branches_by_halves(self, acts: list[Action], keep: set[str], common: list[Action],
                            by_type: dict[str, dict[int, Action]],
                            halves: dict[str, list[list[Action]]]) -> list[list[Action]]:
        """Branch i's restricted branches where its values of some type (objects) are told apart from
        closed branches by parts (:meth:`_closed_halves`): one branch for the types that need nothing
        of their own, one per type with its own negations, one per part."""
        out: list[list[Action]] = []
        plain = keep - set(by_type) - set(halves) - ({"integer"} if "number" in by_type else set())
        if plain:
            out.append(acts + [NarrowTypes(frozenset(plain))] + common)
        for t, negs in by_type.items():
            if t not in halves:
                out.append(acts + [NarrowTypes(self._of_type(t, None))] + common + [negs[j] for j in sorted(negs)])
        for t, parts in halves.items():
            negs = by_type.get(t, {})
            for part in parts:
                out.append(acts + [NarrowTypes(self._of_type(t, None))] + common + [negs[j] for j in sorted(negs)]
                           + part)
        return out

    def _jointly_closed(self, pending: list[int], acts_of: dict[int, list[Action]], ctxs: list[Ctx]) -> list[int]:
        """The branches j that branch i's objects are told apart from at once (:meth:`_closed_halves`),
        in the strict round only: those told apart from no other way (``pending``), with the closed
        branches each of whose pairwise answers is a branch group (their product grows with the
        number of branches); none where neither is there twice or more, or pending."""
        if not self.strict_oneof:
            return []
        grouped = [j for j, acts in acts_of.items() if any(isinstance(a, Holds) for a in acts)]
        if not pending and len(grouped) < 2:
            return []
        return pending + [j for j in grouped if _closed_form(self.bare_ref_target(ctxs[j]).schema)]

    def _closed_halves(self, fi: Flat, cjs: list[Ctx]) -> Optional[list[list[Action]]]:
        """Branch i's objects outside every branch of ``cjs``, exactly, as the actions of each part
        (:func:`~.closed_split.split_closed`), where branch i admits finitely many names (a closed
        owner) and each branch j is closed (:meth:`_closed_side`): the names present and absent, and
        the values of present names that must fail j's schemas. An empty list where no object of i is
        left; None where not of this form or past the split's budgets (the caller refuses by name)."""
        names = self._finite_names(fi)
        if names is None:  # (infinitely many names: apart where no name of i is one j allows, else counted)
            return [[]] if all(self._names_apart(fi, cj) for cj in cjs) else self._counted_halves(fi, cjs)
        sides = self._closed_sides(fi, names, cjs)
        if sides is None:
            return None
        always = frozenset(self.oneof_given) | frozenset(fi.required)
        if not always <= set(names):
            return None
        found = split_closed(names, always, sides, MAX_PRESENCE_HALVES, MAX_PRESENCE_SPLIT, (fi.min_props, fi.max_props))
        if found is None:
            return None
        out: list[list[Action]] = []
        for half in found:
            part: list[Action] = []
            new = tuple(n for n in names if n in half.present and n not in always)
            if new:
                part.append(Require(new))
            part += [Forbid(n) for n in names if n in half.absent]
            for k, present in sorted(half.negations.items()):
                fails = [c for n in present for c in sides[k].loose[n]]
                if not all(self._value_negatable(c) for c in fails):
                    return None
                part.append(self._some_value_fails(present, sides[k]))
            out.append(part)
        return out

    def _closed_sides(self, fi: Flat, names: list[str], cjs: list[Ctx]) -> Optional[list[ClosedSide]]:
        """The closed sides (:meth:`_closed_side`) of the branches ``cjs`` against branch i's ``names``,
        those apart from i left out; None where one is not of the closed form."""
        sides: list[ClosedSide] = []
        for cj in cjs:
            side = self._closed_side(fi, names, cj)
            if side is None:
                return None
            if isinstance(side, ClosedSide):
                sides.append(side)
        return sides

    def _some_value_fails(self, present: list[str], side: ClosedSide) -> Action:
        """The action "one of the names ``present`` has a value failing one of side's schemas for it"
        (the object has the names: ``not: {properties: {n: S}}`` is n's value failing S)."""
        terms = [self.made_up({"properties": {n: c.schema}}, c) for n in present for c in side.loose[n]]
        if len(terms) == 1:
            return Holds(terms[0], False)
        return Holds(self.made_up({"anyOf": [{"not": t.schema} for t in terms]}, terms[0]))

    def _counted_halves(self, fi: Flat, cjs: list[Ctx]) -> Optional[list[list[Action]]]:
        """Branch i's objects outside every branch of ``cjs`` where i has a closed owner with a pattern
        of infinitely many names (extra properties generated in both property modes) and each
        branch j allows finitely many names: split on every name some j allows (at most
        :data:`MAX_COUNTED_NAMES` beside the names i requires), each assignment S cut by the count
        into "a name beyond S" (``minProperties: |S|+1``: outside every j) and "the names S exactly"
        (``maxProperties: |S|``: judged as a closed object of S, :func:`~.closed_split.split_closed`).
        None where not of this form."""
        if not any(o.ap is not None and o.ap.schema is False and o.patterns for o in fi.owners):
            return None
        rest = [cj for cj in cjs if not self._names_apart(fi, cj)]
        allowed: set[str] = set()
        for cj in rest:
            got = self._closed_names(fi, cj)
            if got is None:
                return None
            allowed |= got
        names = [n for n in fi.props if n in allowed] + sorted(allowed - set(fi.props))
        names = [n for n in names if not self.forbids(fi, n)]
        always = frozenset(self.oneof_given) | frozenset(fi.required)
        if not always <= set(names):
            return [[]]  # every object of i has a name no branch j allows
        free = [n for n in names if n not in always]
        if len(free) > MAX_COUNTED_NAMES:
            return None
        sides = self._closed_sides(fi, names, rest)
        if sides is None:
            return None
        near = rest[0] if rest else cjs[0]
        out: list[list[Action]] = []
        for k in range(1 << len(free)):
            present = always | {n for b, n in enumerate(free) if k >> b & 1}
            fixed: list[Action] = ([Require(tuple(n for n in free if n in present))] if present - always else [])
            fixed += [Forbid(n) for n in free if n not in present]
            if fi.max_props is None or len(present) + 1 <= fi.max_props:  # a name beyond S: outside every j
                out.append(fixed + [Holds(self.made_up({"minProperties": len(present) + 1}, near))])
            if len(present) < fi.min_props:
                continue
            exact = split_closed([n for n in names if n in present], present, sides, 1, 0, (len(present), len(present)))
            if exact is None:
                return None
            for half in exact:  # (one at most: every name fixed)
                part = fixed + [Holds(self.made_up({"maxProperties": len(present)}, near))]
                for j, ns in sorted(half.negations.items()):
                    if not all(self._value_negatable(c) for n in ns for c in sides[j].loose[n]):
                        return None
                    part.append(self._some_value_fails(ns, sides[j]))
                out.append(part)
        return out

    def _closed_names(self, fi: Flat, cj: Ctx) -> Optional[set[str]]:
        """The names a closed branch j allows, where finitely many (declared, and the names of
        patterns that spell finitely many); None where not closed or infinitely many."""
        target = self._own_member(fi, self.bare_ref_target(cj))
        s = target.schema
        if not _closed_form(s):
            return None
        props, pats = s.get("properties", {}), s.get("patternProperties", {})
        if not isinstance(props, dict) or not isinstance(pats, dict):
            return None
        out = set(props)
        for p in pats:
            got = pattern_names(p, MAX_NAMED_EXTRAS)
            if got is None:
                return None
            out.update(got)
        return out

    def _names_apart(self, fi: Flat, cj: Ctx) -> bool:
        """Whether every object of branch i is outside the closed branch j because no name i allows
        is one j allows (a closed owner of i: its declared names and patterns against j's, the
        patterns' automata disjoint) and ``{}`` is not in both (i's objects have a name, or j's must)."""
        target = self._own_member(fi, self.bare_ref_target(cj))
        s = target.schema
        if not _closed_form(s) or "$id" in s or "id" in s:
            return False
        props, pats = s.get("properties", {}), s.get("patternProperties", {})
        req, lo = s.get("required", []), s.get("minProperties", 0)
        if not isinstance(props, dict) or not isinstance(pats, dict) or any(pattern_problem(p) for p in pats):
            return False
        if not (fi.required or fi.min_props >= 1 or (isinstance(req, list) and req) or (_count(lo) and lo >= 1)):
            return False
        for o in fi.owners:
            if o.ap is None or o.ap.schema is not False or any(pattern_problem(p) for p, _ in o.patterns):
                continue
            if any(not self.forbids(fi, n) and (n in props or any(py_search(p, n) for p in pats)) for n in o.names):
                continue
            if all(patterns_disjoint(p, q) is True for p, _ in o.patterns for q in pats) and not any(
                    py_search(p, n) for p, _ in o.patterns for n in props):
                return True
        return False

    def _negatable_within(self, fi: Flat, n: str, c: Ctx) -> Ctx:
        """Branch j's schema c for name n, where its negation is not exact as it is, narrowed to the
        types branch i's values of n can have (:meth:`_within_types`): the same on those values, so
        "n's value fails c" is the same there; c itself where that does not help."""
        if self._value_negatable(c):
            return c
        ctxs = self._name_ctxs(fi, n)
        types: Optional[set[str]] = None
        for x in ctxs or []:
            got = None if isinstance(x, NegCtx) else self._possible_or_none(x)
            if got is not None:
                types = set(got) if types is None else intersect_types(types, got)
        if types is None or not ctxs:
            return c
        narrowed = self._within_types(c, types, 0)
        return narrowed if narrowed is not c and self._value_negatable(narrowed) else c

    def _within_types(self, c: Ctx, types: set[str], depth: int) -> Ctx:
        """c (through bare ``$ref``s) with the branches of its ``oneOf``/``anyOf`` that admit no value
        of ``types`` left out (false on every value of those types: c is the same on them); c
        itself where it is not of that form or nothing is left out."""
        target = self.bare_ref_target(c)
        s = target.schema
        if depth > 8 or not isinstance(s, dict) or len(asserting_keys(s)) != 1:
            return c
        (kw,) = asserting_keys(s)
        if kw not in ("oneOf", "anyOf") or not isinstance(s[kw], list) or "$id" in s or "id" in s:
            return c
        subs = [target.child(b, kw, k) for k, b in enumerate(s[kw])]
        kept = [b for b in subs if (pt := self._possible_or_none(b)) is None or intersect_types(pt, types)]
        if len(kept) == len(subs) or not kept:
            return c
        if len(kept) == 1:
            return self._within_types(kept[0], types, depth + 1)
        return self.made_up({kw: [b.schema for b in kept]}, target)

    def _finite_names(self, fi: Flat) -> Optional[list[str]]:
        """The names branch i's objects may have where finitely many (a closed owner: its declared
        names and the names of its patterns where each spells finitely many, those i does not
        forbid), in declared order; None where any name may occur."""
        closed: list[set[str]] = []
        for o in fi.owners:
            if o.ap is None or o.ap.schema is not False:
                continue
            spelled = [pattern_names(p, MAX_NAMED_EXTRAS) for p, _ in o.patterns]
            if all(names is not None for names in spelled):  # (a pattern of finitely many names: those)
                closed.append(set(o.names).union(*(names for names in spelled if names is not None)))
        if not closed:
            return None
        allowed = set.intersection(*closed)
        ordered = [n for n in fi.props if n in allowed] + sorted(allowed - set(fi.props))
        return [n for n in ordered if not self.forbids(fi, n)]

    def _closed_side(self, fi: Flat, names: list[str], cj: Ctx) -> Union[ClosedSide, bool, None]:
        """Branch j as branch i's names see it (:class:`~.closed_split.ClosedSide`), for a closed
        branch ``{type: object, properties, patternProperties, additionalProperties: false, required,
        minProperties, maxProperties, not: {required}}``: True where j requires a name i never has
        (every object of i is outside j); None for any other form."""
        target = self._own_member(fi, self.bare_ref_target(cj))
        s = target.schema
        if not isinstance(s, dict) or s.get("additionalProperties") is not False or "$id" in s or "id" in s:
            return None
        if not asserting_keys(s) <= _CLOSED_KEYS or s.get("type", "object") not in ("object", ["object"]):
            return None
        props, pats, req = s.get("properties", {}), s.get("patternProperties", {}), s.get("required", [])
        lo, hi, neg = s.get("minProperties", 0), s.get("maxProperties"), s.get("not")
        if (not isinstance(props, dict) or not isinstance(pats, dict) or not isinstance(req, list)
                or not all(isinstance(n, str) for n in req) or any(pattern_problem(p) is not None for p in pats)
                or not _count(lo) or not (hi is None or _count(hi))):
            return None
        not_req: list[frozenset[str]] = []
        if neg is not None:
            if not (isinstance(neg, dict) and asserting_keys(neg) == {"required"} and isinstance(neg["required"], list)
                    and all(isinstance(n, str) for n in neg["required"])):
                return None
            if set(neg["required"]) <= set(names):  # else every object of i lacks one of them: it holds
                not_req.append(frozenset(neg["required"]))
        if not set(req) <= set(names):
            return True
        fj = self._absorbed(target)
        if fj is None:
            return None
        fails: set[str] = set()
        loose: dict[str, tuple[Ctx, ...]] = {}
        for n in names:
            matching = [target.child(v, "patternProperties", p) for p, v in pats.items() if py_search(p, n)]
            mine = ([target.child(props[n], "properties", n)] if n in props else []) + matching
            if not mine or self._props_disjoint(fi, fj, n):
                fails.add(n)
                continue
            wide = tuple(self._negatable_within(fi, n, c) for c in mine if not self._implied(fi, c, n))
            if wide:
                loose[n] = wide
        return ClosedSide(frozenset(fails), loose, frozenset(req), lo, hi, tuple(not_req))

    def _twin_branches(self, ctxs: list[Ctx]) -> set[int]:
        """The branches whose subschema (through bare ``$ref``s) is the same JSON as another
        branch's, annotations aside, under the same base URI (so their references lead to the same
        places): the same language."""
        return {i for group in self._twin_groups(ctxs) for i in group}

    def _twin_groups(self, ctxs: list[Ctx]) -> list[set[int]]:
        """The groups (two or more) of branches that are twins (:meth:`_twin_branches`)."""
        seen: dict[tuple[str, str], list[int]] = {}
        for i, c in enumerate(ctxs):
            t = self.bare_ref_target(c)
            base = getattr(t.resolver, "_base_uri", None)
            if not isinstance(base, str) or not isinstance(t.schema, (dict, bool)):
                continue
            body = t.schema if isinstance(t.schema, bool) else {k: v for k, v in t.schema.items() if k not in _ANNOTATIONS}
            seen.setdefault((base, json.dumps(body, sort_keys=True)), []).append(i)
        return [set(group) for group in seen.values() if len(group) > 1]

    def negation_group(self, ctx: Ctx) -> Optional[Group]:
        """``not`` of a disjunction on objects as a branch group, exact: ``not: {required: [a, b]}``
        is an object without a or without b; ``not: {properties: {p: S_p, ...}, required: [...]}``
        (e.g. the discriminator of an ``if``) is an object without one of the required names, or
        with one of the properties p present and failing S_p (and, with ``type: object``, any
        other type). None for other forms (the leaf applies those, :meth:`apply_not`)."""
        ctx = self.bare_ref_target(ctx)
        s = ctx.schema
        if not isinstance(s, dict):
            return None
        keys = asserting_keys(s)
        req = s.get("required", [])
        if not isinstance(req, list) or not all(isinstance(n, str) for n in req):
            return None
        if not req and "type" not in keys and not (isinstance(s.get("properties"), dict) and len(s["properties"]) > 1):
            return None  # one property and nothing required: the leaf's (apply_not), as before
        obj = NarrowTypes(frozenset({"object"}))
        ptr = ctx.ptr + "/not"
        if keys == {"required"} and len(set(req)) > 1:
            return ("anyOf", [[obj, Forbid(n)] for n in dict.fromkeys(req)], ptr)
        props = s.get("properties", {})
        if (
            keys <= {"required", "properties", "type"}
            and s.get("type", "object") == "object"
            and isinstance(props, dict)
        ):
            # an object fails S where a required name is missing or a declared property is present
            # and fails its schema ("not: {properties: {p: S_p}}", which only objects with p satisfy)
            branches: list[list[Action]] = [[obj, Forbid(n)] for n in dict.fromkeys(req)]
            for p, ps in props.items():
                part = {"properties": {p: ps}}
                self.synthetic.append(part)  # kept alive: contexts are remembered by the schema's id
                branches.append([Holds(Ctx(part, ctx.ptr, ctx.resolver), False)])
            if "type" in keys:  # S says "type": "object", so every non-object fails it
                branches.append([NarrowTypes(frozenset(ALL_TYPES - {"object"}))])
            return ("anyOf", branches, ptr)
        return None

    def conjunction_parts(self, ctx: Ctx) -> Optional[list[Ctx]]:
        """ctx's schema as a conjunction of two or more independent parts, for ``not`` by De Morgan
        (``not (A and B)`` is ``not A or not B``, exact): each keyword alone, the keywords that read
        one another together (``properties`` with ``patternProperties``/``additionalProperties``,
        the item keywords, ``contains`` with its counts, ``if``/``then``/``else``, draft 4's bounds
        with their exclusive flags), each ``allOf`` member apart. None where it is one part, or where
        the keywords are not independent (``unevaluated*``, dynamic references, a ``$ref`` whose
        siblings a draft before 2019-09 ignores, an ``$id`` that moves the base URI)."""
        target = self.bare_ref_target(ctx)
        s = target.schema
        if not isinstance(s, dict):
            return None
        key = (id(s), target.ptr)
        if key in self.conjunction_memo:
            return self.conjunction_memo[key]
        keys = asserting_keys(s)
        parts: Optional[list[Ctx]] = None
        if not (keys & _DEPENDENT_KEYWORDS or "$id" in s or "id" in s or ("$ref" in keys and self.draft <= 7)):
            units = _KEYWORD_UNITS + (_DRAFT4_BOUNDS if self.draft == 4 else [])
            found: list[Ctx] = []
            rest = set(keys)
            for unit in units:
                if rest & unit:
                    found.append(self.made_up({k: s[k] for k in sorted(rest & unit)}, target))
                    rest -= unit
            for k in sorted(rest):
                if k == "allOf" and isinstance(s[k], list):
                    found += [target.child(m, "allOf", n) for n, m in enumerate(s[k])]
                else:
                    found.append(self.made_up({k: s[k]}, target))
            parts = found if len(found) >= 2 else None
        self.conjunction_memo[key] = parts
        return parts

    def _negated_branch(self, cj: Ctx, fj: Optional[Flat], types: set[str], bare_numbers: bool = False) -> Optional[Action]:
        """The action "branch j fails" where it can be written exactly on every type of ``types``:
        ``not: {not: X}`` as X itself, ``not: {type: ...}`` (``not: {type: integer}`` on numbers only where
        ``bare_numbers``: the branch bounds none), ``not: {anyOf: [...]}`` as every branch failing, the
        object forms, else the general negation (:meth:`negatable`); None where not."""
        s = cj.schema
        if isinstance(s, dict) and asserting_keys(s) == {"not"}:
            return Holds(cj.child(s["not"], "not"), True)
        target = self.bare_ref_target(cj)
        ts = target.schema
        keys = asserting_keys(ts) if isinstance(ts, dict) else set()
        if keys and keys <= {"type"} and (bare_numbers or not (
                fj is not None and fj.types is not None and "integer" in fj.types and "number" not in fj.types
                and "number" in types)):
            return Holds(cj, False)  # whole types dropped; integers within numbers: the non-integers
        if keys == {"anyOf"} and isinstance(ts["anyOf"], list) and ts["anyOf"] and all(
            self._negated_branch(sub, self._absorbed(sub), types) is not None
            for sub in (target.child(b, "anyOf", k) for k, b in enumerate(ts["anyOf"]))
        ):
            return Holds(cj, False)  # not anyOf [A, B]: not A and not B (absorb writes it so)
        if isinstance(ts, dict) and "items" in keys and keys <= {"items", "type"} and ts.get("type", "array") == "array" \
                and isinstance(ts["items"], (dict, bool)) and (_is_not(ts["items"]) or self._value_negatable(
                    target.child(ts["items"], "items"))):
            return Holds(cj, False)  # not {items: S}: an array with an item failing S (:meth:`_items_not`)
        if self._contains_negatable(target, ts, keys):
            return Holds(cj, False)  # not {contains: S}: an array whose items all fail S (:meth:`_contains_not`)
        if isinstance(ts, dict) and _exact_object_not(ts, types):
            props = ts.get("properties")
            if not isinstance(props, dict) or all(self._value_negatable(target.child(v, "properties", k))
                                                  for k, v in props.items()):
                return Holds(cj, False)
        if fj is None or not self.negatable(cj, fj, types):
            parts = self.conjunction_parts(cj)
            if parts is not None and all(self._value_negatable(p, deep=True) for p in parts):
                return Holds(cj, False)  # not (A and B): not A or not B (compiler.absorb), each exact
            return None
        return Holds(cj, False)

    def _possible_or_none(self, ctx: Ctx) -> Optional[set[str]]:
        """:meth:`possible_types`, None where a reference in the way cannot be followed."""
        try:
            return self.possible_types(ctx, 0)
        except (UnsupportedKeywordError, SchemaError):
            return None

    def _value_negatable(self, ctx: Ctx, depth: int = 0, deep: Optional[bool] = None) -> bool:
        """Whether ``not: ctx`` on a property's value (of any type) compiles: :meth:`apply_not` tried
        on a scratch leaf of every type (nothing recorded), and no constant left that the leaf
        cannot exclude (objects, arrays, numbers); ``deep`` (by default in the strict round of a
        ``oneOf``) also where it is a branch group (:meth:`negation_group`) whose properties'
        negations are so in turn, or a conjunction whose parts' are (:meth:`conjunction_parts`)."""
        if self.negatable_nesting >= MAX_NEGATABLE_NESTING:
            return False  # (a recursive $ref negated inside itself: not exact here)
        self.negatable_nesting += 1
        try:
            return self._value_negatable_now(ctx, depth, deep)
        finally:
            self.negatable_nesting -= 1

    def _value_negatable_now(self, ctx: Ctx, depth: int, deep: Optional[bool]) -> bool:
        """:meth:`_value_negatable` within the nesting bound."""
        deep_now = self.strict_oneof if deep is None else deep
        leaf = self._leaf_negation(ctx)
        if leaf is not None and (not deep_now or depth >= MAX_NEGATION_DEPTH or all(
                self._value_negatable(c, depth + 1, deep) for cs in leaf.props.values() for c in cs
                if isinstance(c, NegCtx))):  # deep: "p present and failing S" needs S's negation too
            return True
        if not deep_now or depth >= MAX_NEGATION_DEPTH:
            return False
        if isinstance(ctx.schema, dict) and asserting_keys(ctx.schema) == {"not"}:
            return True  # not not X: X, held as it is (compiler.absorb)
        if oneof_true_rest(self.bare_ref_target(ctx).schema) is not None:
            return True  # not oneOf [true, X, ...]: some X holds, held as it is (compiler.absorb)
        branches = self.disjoint_one_of(ctx)
        if branches is not None:  # not oneOf of disjoint branches: not anyOf, every branch failing
            return all(self._value_negatable(b, depth + 1, deep) for b in branches)
        overlap = overlap_negatable(self, ctx, depth, deep)
        if overlap is not None:  # not oneOf of overlapping branches: none holds, or two do (overlap_not)
            return overlap
        parts = None if self.negation_group(ctx) is not None else self.conjunction_parts(ctx)
        if parts is not None:  # not (A and B): not A or not B (compiler.absorb), each exact in turn
            return all(self._value_negatable(p, depth + 1, deep) for p in parts)
        target = self.bare_ref_target(ctx)
        s = target.schema
        if not isinstance(s, dict) or self.negation_group(ctx) is None:
            return False
        props = s.get("properties", {})
        return isinstance(props, dict) and all(
            self._value_negatable(target.child(v, "properties", p), depth + 1, deep) for p, v in props.items())

    def disjoint_one_of(self, ctx: Ctx) -> Optional[list[Ctx]]:
        """The branches of ctx (through bare ``$ref``s) where it is only a ``oneOf`` whose branches
        are pairwise disjoint (:meth:`disjoint`: at most one holds, so it is their ``anyOf``);
        None for any other form, or more than :data:`MAX_DISJOINT_BRANCHES` branches."""
        target = self.bare_ref_target(ctx)
        s = target.schema
        if not (isinstance(s, dict) and asserting_keys(s) == {"oneOf"} and isinstance(s["oneOf"], list)
                and 0 < len(s["oneOf"]) <= MAX_DISJOINT_BRANCHES):
            return None
        ctxs = [target.child(b, "oneOf", n) for n, b in enumerate(s["oneOf"])]
        pairs = [(c, self._absorbed(c)) for c in ctxs]
        if all(self.disjoint(pairs[i], pairs[j], 0) for i in range(len(pairs)) for j in range(i + 1, len(pairs))):
            return ctxs
        return None

    def _leaf_negatable(self, ctx: Ctx) -> bool:
        """:meth:`_value_negatable` at the leaf alone (:meth:`apply_not` on a scratch leaf)."""
        return self._leaf_negation(ctx) is not None

    def _leaf_negation(self, ctx: Ctx) -> Optional[Flat]:
        """The scratch leaf :meth:`apply_not` writes ``not: ctx`` on, where it can (nothing
        recorded, no constant left that the leaf cannot exclude); None where not."""
        flat, types = Flat(), set(ALL_TYPES)
        mark = len(self.unenforced)
        try:
            self.apply_not(flat, ctx, types)
        except UnsupportedKeywordError:
            return None
        finally:
            recorded = len(self.unenforced) > mark
            del self.unenforced[mark:]
        if recorded:
            return None
        left = [v for _, vals in flat.excluded for v in vals]
        return None if any(type_of(v) in ("object", "array", "integer", "number") for v in left) else flat

    def bare_ref_target(self, ctx: Ctx) -> Ctx:
        """ctx, or where its schema is only a ``$ref`` (and annotations), what the reference leads
        to (followed up to 8 times; ctx itself where one cannot be followed)."""
        target = ctx
        for _ in range(8):
            ts = target.schema
            if not (isinstance(ts, dict) and asserting_keys(ts) == {"$ref"}
                    and isinstance(ts["$ref"], str)):
                break
            try:
                target = self.doc.resolve_ref(target, ts["$ref"])
            except (UnsupportedKeywordError, SchemaError):
                return ctx
        return target

    def possible_types(self, ctx: Ctx, depth: int) -> Optional[set[str]]:
        """The types a subschema can admit, read through ``$ref``, ``allOf``, ``anyOf``/``oneOf``,
        ``type``, ``enum``/``const`` (a superset; None: any, or too deep to look)."""
        if depth > 8:
            return None
        ctx = self.doc.enter(ctx)
        s = ctx.schema
        if s is False:
            return set()
        if not isinstance(s, dict):
            return None
        out: Optional[set[str]] = None

        def meet(ts: Optional[set[str]]) -> None:
            nonlocal out
            if ts is not None:
                out = set(ts) if out is None else intersect_types(out, ts)

        if isinstance(s.get("type"), (str, list)):
            t = s["type"]
            named = {t} if isinstance(t, str) else set(t)
            meet(named | ({"integer"} if "number" in named else set()))
        for kw in ("enum", "const"):
            if kw in s:
                vals = s[kw] if kw == "enum" and isinstance(s[kw], list) else [s[kw]]
                of_values = {type_of(v) for v in vals}
                meet(of_values | ({"number"} if "number" in of_values else set()))
        if isinstance(s.get("$ref"), str):
            meet(self.possible_types(self.doc.resolve_ref(ctx, s["$ref"]), depth + 1))
        for i, sub in enumerate(s.get("allOf") or []):
            meet(self.possible_types(ctx.child(sub, "allOf", i), depth + 1))
        for kw in ("anyOf", "oneOf"):
            if isinstance(s.get(kw), list):
                union: Optional[set[str]] = set()
                for i, sub in enumerate(s[kw]):
                    branch = self.possible_types(ctx.child(sub, kw, i), depth + 1)
                    if branch is None or union is None:
                        union = None
                    else:
                        union |= branch
                meet(union)
        return out

    def _absorbed(self, ctx: Ctx) -> Optional[Flat]:
        """The conjunction of ctx alone; None where it holds a keyword that is not supported."""
        f = Flat()
        try:
            self.absorb(f, ctx, True)
        except UnsupportedKeywordError:
            return None
        return f

    def _exclude(self, t: str, fi: Flat, fj: Flat, ci: Ctx, cj: Ctx) -> Optional[list[Action]]:
        """Actions restricting branch i so that its values of type t fail branch j, or None."""
        if cj.schema is False or fj.types == set():
            return []
        tj = set(ALL_TYPES) if fj.types is None else fj.types
        if t == "number":
            if "number" not in tj and "integer" not in tj:
                return []
        elif t == "integer":
            if "integer" not in tj:
                return []
        elif t not in tj:
            return []
        if fj.enum is not None:
            if not any(type_of(v) == t or (t == "number" and type_of(v) == "integer") for v in fj.enum):
                return []
            if not any(self.doc.valid(ci, v) for v in fj.enum):
                return []
            return None
        if t in ("integer", "number", "string", "array"):
            return [] if self._disjoint_type(t, fi, fj, 0) else None
        if t == "object":
            for p in fi.required:
                if self.forbids(fj, p):
                    return []
            for p in fi.required:
                if p in fj.props and p in fi.props and self._props_disjoint(fi, fj, p):
                    return []
            if self._disjoint_type(t, fi, fj, 0):
                return []
            return self._presence_halves(fi, fj, cj)
        return None

    def _presence_halves(self, fi: Flat, fj: Flat, cj: Ctx) -> Optional[list[Action]]:
        """Branch i's objects told apart from branch j's by which names are present, exactly: split
        on the presence of the names that decide (one j requires, one i declares that j forbids or
        holds to disjoint values, one j declares), at most :data:`MAX_PRESENCE_SPLIT` deep and
        :data:`MAX_PRESENCE_HALVES` halves; each half
        is apart from j (kept whole), inside j (every object of it satisfies j: dropped, no object of
        it has exactly one branch) or unknown (None: the caller negates branch j or refuses). The
        actions drop the halves inside j. (The older round dropped one half on its face,
        apart or not: a silent narrowing, e.g. ``{"b": 1}`` lost where j requires b as a string.)
        In the strict round of the declared mode, the names branch i never declares count as absent
        (:mod:`.declared_names`; the older round, whose outputs stand where it answers, does without)."""
        fails: dict[str, bool] = {}  # name -> "an object of i that has it fails j"

        def present_fails(n: str) -> bool:
            if n not in fails:
                fails[n] = self.forbids(fj, n) or self._props_disjoint(fi, fj, n)
            return fails[n]

        # names branch i never declares (declared mode: its objects never have them) count as absent
        counts_on = self.strict_oneof and self.oneof_context is not None
        never = frozenset(n for n in dict.fromkeys([*fj.required, *fj.props, *self._target_names(cj)])
                          if counts_on and never_declared(fi, self.oneof_context, n))
        needed = [n for n in dict.fromkeys(fj.required) if n not in fi.required]
        declared = [n for n in fi.props if n not in fi.required and present_fails(n)]
        of_j = [n for n in fj.props if n not in fi.required and not self.forbids(fi, n) and n not in never]
        # a name j requires that i's objects fail j with decides both halves at once: those first
        split = sorted(dict.fromkeys(needed + declared + of_j), key=lambda n: not (n in needed and present_fails(n)))
        given = self.oneof_given

        def apart(present: frozenset[str], absent: frozenset[str]) -> bool:
            return (any(present_fails(n) or self.forbids(fi, n) for n in present)
                    or any(n in absent or self.forbids(fi, n) for n in needed))

        dropped: list[tuple[frozenset[str], frozenset[str]]] = []
        halves_left = MAX_PRESENCE_HALVES

        def classify(present: frozenset[str], absent: frozenset[str]) -> bool:
            nonlocal halves_left
            halves_left -= 1
            if halves_left < 0:
                return False
            if apart(present, absent):
                return True
            if self._half_inside(fi, cj, present, absent):
                dropped.append((present, absent))
                return True
            n = next((n for n in split if n not in present and n not in absent), None)
            if n is None or len(present - given) + len(absent - never) >= MAX_PRESENCE_SPLIT:
                return False
            return classify(present | {n}, absent) and classify(present, absent | {n})

        if not classify(given, never):  # the context's required names are there, the never declared not
            return None
        self.unseen_now.update(never)
        return [self._dropping(present, absent - never, cj) for present, absent in dropped]

    def _target_names(self, cj: Ctx) -> list[str]:
        """The names branch j's target (through bare ``$ref``s) declares, in its ``properties`` form
        (:func:`_object_form`); none where it has another form."""
        form = _object_form(self.bare_ref_target(cj).schema, closed_too=True)
        return [] if form is None else [*form[0], *form[1]]

    def _dropping(self, present: frozenset[str], absent: frozenset[str], near: Ctx) -> Action:
        """The action that drops a branch's objects with the names ``present`` and without
        ``absent`` (its other values kept): ``Forbid``/``Require`` for one name, else an ``anyOf``
        (a name of ``present`` missing, one of ``absent`` there, or not an object)."""
        if len(present) == 1 and not absent:
            return Forbid(next(iter(present)))
        if not present and len(absent) == 1:
            return Require((next(iter(absent)),))
        terms: list[dict] = [{"type": sorted(ALL_TYPES - {"object", "integer"})}]
        terms += [{"not": {"required": [n]}} for n in sorted(present)]
        terms += [{"required": [n]} for n in sorted(absent)]
        return Holds(self.made_up({"anyOf": terms}, near))

    def _half_inside(self, fi: Flat, cj: Ctx, present: frozenset[str], absent: frozenset[str]) -> bool:
        """Whether every object of branch i with the names ``present`` and without ``absent``
        satisfies branch j, for a branch j of the form ``{type: object, properties, required,
        additionalProperties: bool}``: j's required names are there, each property j declares is
        absent or its schema is one of i's own (:meth:`_implied`), and where j admits no other
        names, i admits none but j's and the absent ones. False where unknown."""
        target = self.bare_ref_target(cj)
        if target.schema is True:
            return True
        form = _object_form(target.schema, closed_too=True)
        if form is None:
            return False
        props, req, ap = form

        def gone(n: str) -> bool:
            return n in absent or self.forbids(fi, n)

        if not all(n in present or n in fi.required for n in req):
            return False
        if not all(gone(p) or self._implied(fi, target.child(v, "properties", p), p) for p, v in props.items()):
            return False
        return ap or any(o.ap is not None and o.ap.schema is False and not o.patterns
                         and all(n in props or gone(n) for n in o.names) for o in fi.owners)

    def _apart_more(self, t: str, fi: Flat, fj: Optional[Flat], ci: Ctx, cj: Ctx) -> Optional[list[Action]]:
        """Actions telling branch i's values of type t apart from branch j's exactly, in the strict
        round (:meth:`one_of_branches`) after :meth:`_exclude`'s tests: arrays whose first items are
        disjoint, apart from ``[]``; objects that need a property the other branch forbids in each of
        its sets of required names; objects apart from branch j's object constants; ``not`` branch j
        relative to branch i. None where none applies."""
        if fj is None:
            return None
        if t == "array":
            return self._nonempty_apart(fi, fj, ci, cj)
        if t != "object":
            return None
        if self._required_apart(fi, cj) or self._required_apart(fj, ci):
            return []
        if fj.enum is not None:
            return self._objects_unlike(fi, ci, [v for v in fj.enum if type_of(v) == "object" and self.doc.valid(ci, v)])
        rel = self._relative_not(fi, cj)
        return rel if rel is not None else relative_members_not(self, fi, cj)

    def _relative_not(self, fi: Flat, cj: Ctx) -> Optional[list[Action]]:
        """``not`` branch j within branch i, for a branch j of the form ``{type: object, properties,
        required}`` (i's other values kept where j says ``type: object``, else dropped): the names i requires too and the properties whose
        schema i has as well (the same JSON, the same base URI) hold in every object of i, so i and j
        meet where i and the rest j' of j meet, and i minus j is i and ``not j'`` (a branch group, each
        property's negation exact). No object of i where nothing is left. A branch j that is an
        ``allOf`` counts as its one member that i does not hold itself (:meth:`_own_member`). None
        where not applicable."""
        target = self._own_member(fi, self.bare_ref_target(cj))
        s = target.schema
        form = _object_form(s, closed_too=False)
        if form is None:
            return None
        props, req, _ = form
        left = {p: v for p, v in props.items() if not self._implied(fi, target.child(v, "properties", p), p)}
        need = [n for n in dict.fromkeys(req) if n not in fi.required]
        typed = "type" in asserting_keys(s)  # j admits objects only: i's other values fail it (else they all satisfy it)
        if not left and not need:  # every object of i satisfies j
            return [NarrowTypes(frozenset(ALL_TYPES - {"object"}) if typed else frozenset())]
        if not all(self._value_negatable(target.child(v, "properties", p)) for p, v in left.items()):
            return None
        part: dict = {"type": "object"} if typed else {}
        if left:
            part["properties"] = left
        if need:
            part["required"] = need
        return [Holds(self.made_up(part, target), False)]

    def _own_member(self, fi: Flat, target: Ctx) -> Ctx:
        """For a branch j that is only an ``allOf``: its one member (through bare ``$ref``s) that is
        not one of branch i's own subschemas (the same schema object i absorbed: every value of i
        satisfies those); target itself where j is not of that form or more than one is left."""
        s = target.schema
        if not (isinstance(s, dict) and asserting_keys(s) == {"allOf"} and isinstance(s["allOf"], list)):
            return target
        held = {id(c.schema) for c, positive in fi.sources if positive}
        members = [self.bare_ref_target(target.child(m, "allOf", n)) for n, m in enumerate(s["allOf"])]
        own = [m for m in members if id(m.schema) not in held]
        return own[0] if len(own) == 1 else target

    def _implied(self, fi: Flat, cv: Ctx, p: str) -> bool:
        """Whether every object of fi that has property p has a value satisfying cv: cv admits
        everything, one of fi's own subschemas for p is the same JSON under the same base URI, or
        fi's values for p lie within cv (:meth:`_values_within`)."""
        t = self.bare_ref_target(cv)
        if t.schema is True or t.schema == {}:
            return True
        text = json.dumps(t.schema, sort_keys=True)
        base = getattr(t.resolver, "_base_uri", None)
        for c in fi.props.get(p, []):
            if isinstance(c, NegCtx):
                continue
            u = self.bare_ref_target(c)
            if getattr(u.resolver, "_base_uri", None) == base and json.dumps(u.schema, sort_keys=True) == text:
                return True
        return self._values_within(fi.props.get(p, []), t)

    def _values_within(self, ctxs: list[Ctx], cv: Ctx) -> bool:
        """Whether every value satisfying all of ``ctxs`` satisfies ``cv``: a finite side (an
        ``enum``/``const``) whose admitted values cv admits each, or a cv of types, lengths and
        bounds only (its language exactly those) that holds the types, lengths and bounds the
        ctxs' conjunction says (a superset of its language). False where unknown."""
        if not ctxs or any(isinstance(c, NegCtx) for c in ctxs):
            return False
        x = Flat()
        try:
            for c in ctxs:
                self.absorb(x, c)
        except UnsupportedKeywordError:
            return False
        if x.enum is not None:
            return all(self.doc.valid(cv, v) for v in x.enum if self.doc.valid_all(x.sources, v))
        s = cv.schema
        if not isinstance(s, dict) or not asserting_keys(s) <= _LEAF_BOUNDS or (self.draft == 4 and (
                "exclusiveMinimum" in s or "exclusiveMaximum" in s)):
            return False
        y = self._absorbed(cv)
        if y is None:
            return False
        tx = set(ALL_TYPES) if x.types is None else x.types
        ty = set(ALL_TYPES) if y.types is None else y.types
        if not all(t in ty or (t == "integer" and "number" in ty) for t in tx):
            return False
        if "string" in tx and (x.min_len < y.min_len or (y.max_len is not None and (
                x.max_len is None or x.max_len > y.max_len))):
            return False
        if tx & {"number", "integer"}:
            if y.lo is not None and (x.lo is None or x.lo < y.lo or (x.lo == y.lo and y.lo_strict and not x.lo_strict)):
                return False
            if y.hi is not None and (x.hi is None or x.hi > y.hi or (x.hi == y.hi and y.hi_strict and not x.hi_strict)):
                return False
        return True

    def _required_apart(self, fa: Flat, cb: Ctx) -> bool:
        """Whether every object of cb has a property fa forbids: each of cb's alternative sets of
        required names (:meth:`required_options`, through nested ``anyOf``/``oneOf``) holds one."""
        opts = self.required_options(cb, 0)
        return opts is not None and bool(opts) and all(any(self.forbids(fa, n) for n in names) for names in opts)

    def required_options(self, ctx: Ctx, depth: int) -> Optional[list[frozenset[str]]]:
        """Sets of names such that every object satisfying ctx has all the names of one of them
        (``required`` through ``$ref``, ``allOf``, ``anyOf``/``oneOf``: a disjunction of
        conjunctions); None where unknown or past :data:`MAX_REQUIRED_OPTIONS` sets."""
        if depth > 8:
            return None
        s = ctx.schema
        if not isinstance(s, dict):
            return None
        req = s.get("required", [])
        opts = [frozenset(n for n in req if isinstance(n, str)) if isinstance(req, list) else frozenset()]
        parts: list[list[frozenset[str]]] = []
        if isinstance(s.get("$ref"), str) and self.draft <= 7:
            s = {"$ref": s["$ref"]}  # siblings of $ref are ignored before 2019-09
            opts = [frozenset()]
        if isinstance(s.get("$ref"), str):
            try:
                target = self.doc.resolve_ref(ctx, s["$ref"])
            except (UnsupportedKeywordError, SchemaError):
                target = None
            sub = None if target is None else self.required_options(target, depth + 1)
            if sub is not None:
                parts.append(sub)
        for n, m in enumerate(s.get("allOf") or []):
            sub = self.required_options(ctx.child(m, "allOf", n), depth + 1)
            if sub is not None:
                parts.append(sub)
        for kw in ("anyOf", "oneOf"):
            if isinstance(s.get(kw), list) and s[kw]:
                union: list[frozenset[str]] = []
                for n, m in enumerate(s[kw]):
                    sub = self.required_options(ctx.child(m, kw, n), depth + 1)
                    if sub is None:
                        break
                    union += sub
                else:
                    parts.append(union)
        for part in parts:  # every object meets one set of each part: the sets combined
            opts = [a | b for a in opts for b in part]
            if len(opts) > MAX_REQUIRED_OPTIONS:
                return None
        return opts

    def _nonempty_apart(self, fi: Flat, fj: Flat, ci: Ctx, cj: Ctx) -> Optional[list[Action]]:
        """Branch i's arrays apart from branch j's where their first items are disjoint, so that the
        empty array is the only array both can hold: nothing where branch j fails ``[]``, else
        ``minItems: 1`` on branch i (exact: every non-empty array of i fails j). None where the first
        items cannot be told apart."""
        a, b = self._first_item(fi), self._first_item(fj)
        if a is None or b is None or not self.disjoint(a, b, 1):
            return None
        if not self.doc.valid(cj, []):
            return []
        return [Holds(self.made_up({"minItems": 1}, ci), True)]

    def admits_all(self, ctx: Ctx, t: str, depth: int) -> bool:
        """Whether every value of type t satisfies ctx: its keywords (through ``$ref`` and ``allOf``)
        constrain only other types, and a ``type`` it has includes t (False: unknown)."""
        if depth > 8:
            return False
        s = ctx.schema
        if s is True:
            return True
        if not isinstance(s, dict):
            return False
        for k, v in s.items():
            if k in IGNORED_KEYWORDS or (k in _TYPE_KEYWORDS and t not in _TYPE_KEYWORDS[k]):
                continue
            if k == "type":
                named = {v} if isinstance(v, str) else set(v) if isinstance(v, list) else set()
                if not (t in named or (t == "integer" and "number" in named)):
                    return False
            elif k == "$ref" and isinstance(v, str):
                try:
                    target = self.doc.resolve_ref(ctx, v)
                except (UnsupportedKeywordError, SchemaError):
                    return False
                if not self.admits_all(target, t, depth + 1):
                    return False
            elif k == "allOf" and isinstance(v, list):
                if not all(self.admits_all(ctx.child(sub, "allOf", n), t, depth + 1) for n, sub in enumerate(v)):
                    return False
            elif k in STRUCTURAL_KEYWORDS or hasattr(self, "_kw_" + k.replace("$", "_")):
                return False  # a keyword the compiler reads, that may constrain type t
        return True

    def _objects_unlike(self, fi: Flat, ci: Ctx, consts: list[dict]) -> Optional[list[Action]]:
        """Branch i's objects apart from a few object constants (branch j's ``enum``) where branch i
        admits no name outside each constant's keys (``additionalProperties: false`` beside
        properties among them): an object of i differs from c exactly where a key of c is missing or
        a key's value differs, ``not: {properties: {k: {const: c[k]}}, required: [keys of c]}`` (a
        branch group). None where a constant has other keys or a value's negation is not exact."""
        if not consts or len(consts) > MAX_OBJECT_CONSTS:
            return None
        out: list[Action] = []
        for c in consts:
            if not c or not any(o.ap is not None and o.ap.schema is False and not o.patterns and o.names <= set(c)
                                for o in fi.owners):
                return None
            values = {k: self.made_up({"const": v}, ci) for k, v in c.items()}
            if not all(self._value_negatable(v) for v in values.values()):
                return None
            part = {"properties": {k: v.schema for k, v in values.items()}, "required": list(c)}
            out.append(Holds(self.made_up(part, ci), False))
        return out

    def made_up(self, part: dict, near: Ctx) -> Ctx:
        """A subschema the compiler writes (kept alive: contexts are remembered by the schema's id),
        with the pointer and base URI of ``near``."""
        self.synthetic.append(part)
        return Ctx(part, near.ptr, near.resolver)

    def _props_disjoint(self, fa: Flat, fb: Flat, p: str) -> bool:
        """Whether the values of property p under fa and fb are disjoint (each side the conjunction
        of its subschemas for p)."""
        cas, cbs = self._name_ctxs(fa, p), self._name_ctxs(fb, p)
        if not cas or not cbs or any(isinstance(c, NegCtx) for c in cas + cbs):
            return False
        x, y = Flat(), Flat()
        try:
            for c in cas:
                self.absorb(x, c)
            for c in cbs:
                self.absorb(y, c)
        except UnsupportedKeywordError:
            return False
        if len(cas) > 1 or len(cbs) > 1:  # a finite side: each of its values fails the other side
            for fx, others in ((x, cbs), (y, cas)):
                if fx.enum is not None and not any(
                    self.doc.valid_all(fx.sources, v) and all(self.doc.valid(c, v) for c in others) for v in fx.enum
                ):
                    return True
        return self.disjoint((cas[0], x), (cbs[0], y), 1)  # its value checks read the first subschema only: conservative

    @staticmethod
    def _name_ctxs(f: Flat, name: str) -> Optional[list[Ctx]]:
        """The subschemas a property ``name`` takes under ``f``: its ``properties`` entries, the
        ``patternProperties`` that match it, ``additionalProperties`` where its owner neither declares
        it nor has a pattern matching it; None where a pattern cannot be read (which would apply is
        unknown)."""
        out = list(f.props.get(name, []))
        for o in f.owners:
            matched = False
            for pat, pc in o.patterns:
                if pattern_problem(pat) is not None:
                    return None
                if py_search(pat, name):
                    out.append(pc)
                    matched = True
            if not matched and name not in o.names and o.ap is not None:
                out.append(o.ap)
        return out

    def disjoint(self, a: tuple[Ctx, Optional[Flat]], b: tuple[Ctx, Optional[Flat]], depth: int) -> bool:
        """Whether no value satisfies both a and b, each a (ctx, flat) pair (False: unknown)."""
        ca, fa = a
        cb, fb = b
        if fa is None or fb is None:
            return False
        if ca.schema is False or cb.schema is False or fa.types == set() or fb.types == set():
            return True
        # finite sets: check each value against the other schema
        for (_cx, fx), (cy, _fy) in (((ca, fa), (cb, fb)), ((cb, fb), (ca, fa))):
            if fx.enum is not None:
                if not any(self.doc.valid_all(fx.sources, v) and self.doc.valid(cy, v) for v in fx.enum):
                    return True
        ta = set(fa.types) if fa.types is not None else set(ALL_TYPES)
        tb = set(fb.types) if fb.types is not None else set(ALL_TYPES)
        pa, pb = self._possible_or_none(ca), self._possible_or_none(cb)  # through nested anyOf/oneOf/$ref/enum
        if pa is not None:
            ta = intersect_types(ta, pa)
        if pb is not None:
            tb = intersect_types(tb, pb)
        shared = intersect_types(ta, tb)
        if not shared:
            return True
        for t in shared:
            if not self._disjoint_type(t, fa, fb, depth):
                return False
        return True

    def _disjoint_type(self, t: str, fa: Flat, fb: Flat, depth: int) -> bool:
        """Whether no value of type t satisfies both fa and fb, judged by bounds, lengths,
        first characters and required/forbidden properties (False: unknown)."""
        if t in ("integer", "number"):
            if fa.hi is not None and fb.lo is not None:
                if fa.hi < fb.lo or (fa.hi == fb.lo and (fa.hi_strict or fb.lo_strict)):
                    return True
            if fb.hi is not None and fa.lo is not None:
                if fb.hi < fa.lo or (fb.hi == fa.lo and (fb.hi_strict or fa.lo_strict)):
                    return True
            return False
        if t == "string":
            for pa, _, _ in fa.patterns:
                for pb, _, _ in fb.patterns:
                    if first_chars_disjoint(pa, pb) or (self.automata_now and patterns_disjoint(pa, pb)):
                        return True  # no string matches both (the second: exactly, on the patterns' automata)
            if fa.max_len is not None and fa.max_len < fb.min_len:
                return True
            if fb.max_len is not None and fb.max_len < fa.min_len:
                return True
            return False
        if t == "array":
            if fa.max_items is not None and fa.max_items < fb.min_items:
                return True
            if fb.max_items is not None and fb.max_items < fa.min_items:
                return True
            if fa.min_items >= 1 and fb.min_items >= 1 and depth < 3:  # first items that cannot be the same
                firsts = [self._first_item(fa), self._first_item(fb)]
                if firsts[0] is not None and firsts[1] is not None:
                    return self.disjoint(firsts[0], firsts[1], depth + 1)
            return False
        if t == "object":
            for x, y in ((fa, fb), (fb, fa)):
                for p in x.required:
                    if self.forbids(y, p):
                        return True
                    if p in y.required and p in x.props and p in y.props and depth < 3:
                        fx = Flat()
                        fy = Flat()
                        try:
                            for c in x.props[p]:
                                self.absorb(fx, c)
                            for c in y.props[p]:
                                self.absorb(fy, c)
                        except UnsupportedKeywordError:
                            continue
                        cx = x.props[p][0] if len(x.props[p]) == 1 else None
                        cy = y.props[p][0] if len(y.props[p]) == 1 else None
                        if cx is not None and cy is not None and self.disjoint((cx, fx), (cy, fy), depth + 1):
                            return True
            if fa.max_props is not None and fa.max_props < fb.min_props:
                return True
            if fb.max_props is not None and fb.max_props < fa.min_props:
                return True
            return False
        return False

    def _first_item(self, f: Flat) -> Optional[tuple[Ctx, Optional[Flat]]]:
        """The one subschema an array's first item must satisfy (``prefixItems[0]`` or ``items``) and
        its flat; None where there is none or more than one, or it cannot be absorbed."""
        ctxs = [prefix[0] if prefix else rest for prefix, rest in f.arr_owners]
        if len(ctxs) != 1 or ctxs[0] is None:
            return None
        flat = Flat()
        try:
            self.absorb(flat, ctxs[0])
        except UnsupportedKeywordError:
            return None
        return ctxs[0], flat

    def forbids(self, f: Flat, name: str) -> bool:
        """Whether f forbids a property called name (a false subschema, no owner admits it, a
        ``not: {required}`` names it, or every branch of one of its groups forbids it or admits no
        object)."""
        if name in f.forbidden:
            return True
        for _kind, branches, _ptr in f.groups:
            if branches and all(any((isinstance(a, Forbid) and a.name == name)
                                    or (isinstance(a, NarrowTypes) and "object" not in a.types) for a in br)
                                for br in branches):
                return True
        for c in f.props.get(name, []):
            if c.schema is False and not isinstance(c, NegCtx):
                return True
        for o in f.owners:
            if name in o.names:
                continue
            if any(py_search(p, name) for p, _ in o.patterns if py_pattern_ok(p)):
                continue
            if o.ap is not None and o.ap.schema is False:
                return True
        return False

    def apply_not(self, flat: Flat, nctx: Ctx, types: set[str]) -> None:
        """Add ``not: nctx`` to flat (narrowing ``types`` in place) where the negation has a form
        the emitters support; refuse (or record) it otherwise."""
        nctx = self.bare_ref_target(nctx)
        s = nctx.schema
        if s is True:
            types.clear()
            return
        if s is False or s == {}:
            if s == {}:
                types.clear()
            return
        if flat.enum is not None:
            return  # exact filtering by validation
        nf = self._absorbed(nctx)
        if nf is not None:
            keys = asserting_keys(s) if isinstance(s, dict) else set()
            # not {type: ...}
            if keys and keys <= {"type"}:
                rm = nf.types or set()
                for t in list(types):
                    if t in rm or (t == "integer" and "number" in rm):
                        types.discard(t)
                if "integer" in rm and "number" in types:
                    # numbers that are not integers: not expressible simply -> keep only
                    # values with a non-zero fraction
                    flat.non_integer = True
                    flat.non_integer_ptr = flat.non_integer_ptr or nctx.ptr
                return
            # not {enum/const} over finite types only
            if keys and keys <= {"enum", "const", "type"} and nf.enum is not None:
                finite = {"boolean", "null"}
                if types <= finite:
                    vals = [v for v in ([True, False] if "boolean" in types else []) + ([None] if "null" in types else [])]
                    flat.enum = vals
                    return
                # strings/numbers/objects: values not in a finite set (those the negated schema admits:
                # not the enum's strings where it says type integer)
                flat.excluded = flat.excluded + [(nctx, [v for v in nf.enum if self.doc.valid(nctx, v)])]
                return
            # not {properties: {p: S}, required: [p]?}: p present with a value failing S (with ``type:
            # object`` every non-object too: a disjunction, :meth:`negation_group`'s)
            if (
                keys
                and keys <= {"properties", "required"}
                and isinstance(s.get("properties"), dict)
                and len(s["properties"]) == 1
                and set(s.get("required", [])) <= set(s["properties"])
            ):
                (p, sub), = s["properties"].items()
                if p not in flat.required:
                    flat.required.append(p)
                flat.props.setdefault(p, []).append(NegCtx(sub, nctx.ptr + "/properties/" + p, nctx.resolver))
                types.intersection_update({"object"})
                return
            # not {items: S} (``type: array`` allowed): an array with some item failing S (``contains:
            # {not: S}``); without ``type`` every non-array satisfies S, so only arrays are left
            if self._items_not(flat, nctx, s, keys, types):
                return
            # not {contains: S} (``type: array`` allowed): an array whose every item fails S (``items:
            # {not: S}``); without ``type`` every non-array satisfies ``contains``, so only arrays are left
            if self._contains_not(flat, nctx, s, keys, types):
                return
            # not {pattern: P}: the strings that do not match P; exact where a pattern the strings
            # already have admits no string that P matches (then the strings stay as they are)
            if keys == {"pattern"} and isinstance(s["pattern"], str) and any(
                patterns_disjoint(q, s["pattern"]) for q, _, _ in flat.patterns
            ):
                types.intersection_update({"string"})
                return
            # not {required: [...]}
            if keys and keys <= {"required", "type"} and nf.required and (nf.types is None or nf.types == {"object"}):
                # forbidding any one of the names makes `required` fail: pick one that the
                # object neither requires nor declares, where there is one
                cands = sorted(
                    nf.required, key=lambda n: (n in flat.required, n in flat.props, -nf.required.index(n))
                )
                flat.forbidden.add(cands[0])
                if nf.types is None:
                    # {required: [...]} holds for every non-object: its negation does not
                    types.intersection_update({"object"})
                return
            if keys and keys <= {"anyOf"} and all(
                isinstance(b, dict) and set(b) <= {"required"} and b.get("required") for b in s["anyOf"]
            ):
                for b in s["anyOf"]:
                    flat.forbidden.add(b["required"][0])
                types.intersection_update({"object"})
                return
        if nf is not None and self.apply_general_not(flat, nctx, nf, types):
            return
        self.unsupported(
            "not", nctx.ptr,
            "'not' is enforced type by type where it excludes whole types, null/boolean values, a regular set "
            "of strings or one number bound (and for a few object forms); this one constrains objects, arrays, "
            "numeric constants or nests combinators",
        )

    def _items_not(self, flat: Flat, nctx: Ctx, s: dict, keys: set[str], types: set[str]) -> bool:
        """``not: {items: S}`` (and ``type: array``) as ``contains: {not: S}`` where S's negation is
        exact on an item (:meth:`_value_negatable`); False (nothing changed) where not this form."""
        items = s.get("items")
        if not (keys and "items" in keys and keys <= {"items", "type"} and s.get("type", "array") == "array"
                and isinstance(items, (dict, bool))):
            return False
        ictx = nctx.child(items, "items")
        if isinstance(items, dict) and _is_not(items):
            part = self.made_up({"allOf": [items["not"]]}, ictx)  # not {items: {not: X}}: contains X
        elif self._value_negatable(ictx, deep=True):  # the item's negation compiles as a group too
            part = self.made_up({"not": items}, ictx)
        else:
            return False
        self.negated_items.add(id(part.schema))
        flat.contains = flat.contains + [(part, 1, None, nctx.ptr)]
        if "type" not in keys:  # S holds for every non-array
            types.intersection_update({"array"})
        return True

    def _contains_negatable(self, nctx: Ctx, s: object, keys: set[str]) -> bool:
        """Whether ``not: s`` is ``not: {contains: S}`` (``type: array`` allowed, no ``minContains`` or
        ``maxContains``) with S's negation exact on an item (:meth:`_value_negatable`), or S a ``not``."""
        if not (isinstance(s, dict) and "contains" in keys and keys <= {"contains", "type"}
                and s.get("type", "array") == "array" and isinstance(s["contains"], (dict, bool))):
            return False
        c = s["contains"]
        return _is_not(c) or self._value_negatable(nctx.child(c, "contains"), deep=True)

    def _contains_not(self, flat: Flat, nctx: Ctx, s: dict, keys: set[str], types: set[str]) -> bool:
        """``not: {contains: S}`` (and ``type: array``) as ``items: {not: S}`` where
        :meth:`_contains_negatable`; False (nothing changed) where not this form."""
        if not self._contains_negatable(nctx, s, keys):
            return False
        c = s["contains"]
        cctx = nctx.child(c, "contains")
        if isinstance(c, dict) and _is_not(c):
            part = self.made_up({"allOf": [c["not"]]}, cctx)  # not {contains: {not: X}}: every item X
        else:
            part = self.made_up({"not": c}, cctx)
        flat.arr_owners = flat.arr_owners + [([], part)]
        if "type" not in keys:  # {contains: S} holds for every non-array
            types.intersection_update({"array"})
        return True

    def apply_general_not(self, flat: Flat, nctx: Ctx, nf: Flat, types: set[str]) -> bool:
        """``not: nctx`` type by type (:func:`~.negation.plan_not`): applied and True where exact,
        False (nothing changed) where not; a string language past the DFA state bound is refused
        (or recorded) by name."""
        try:
            plan = plan_not(nf, types, lambda v: self.doc.valid(nctx, v))
        except DfaTooLarge:
            kw, ptr = negation_keyword(nctx.ptr)
            self.unsupported(kw, ptr, f"the strings it excludes need a DFA of more than {MAX_STATES} states")
            return True
        except ecma.PatternError:
            return False
        if plan is None:
            return False
        for t in plan.drop:
            types.discard(t)
        if "number" in plan.drop:
            types.discard("integer")
        if plan.exclude:
            flat.excluded = flat.excluded + [(nctx, plan.exclude)]
        if plan.strings is not None:
            flat.str_not = flat.str_not + [(nctx, plan.strings)]
        if plan.upper is not None:
            d, strict = plan.upper
            if flat.hi is None or d < flat.hi or (d == flat.hi and strict):
                flat.hi, flat.hi_strict = d, strict
        if plan.lower is not None:
            d, strict = plan.lower
            if flat.lo is None or d > flat.lo or (d == flat.lo and strict):
                flat.lo, flat.lo_strict = d, strict
        if plan.lengths is not None:
            flat.min_len, flat.max_len = _within(flat.min_len, flat.max_len, plan.lengths)
        if plan.items is not None:
            flat.min_items, flat.max_items = _within(flat.min_items, flat.max_items, plan.items)
        if plan.props is not None:
            lo, hi = _within(flat.min_props, flat.max_props, plan.props)
            if lo != flat.min_props:
                flat.min_props, flat.min_props_ptr = lo, nctx.ptr
            if hi != flat.max_props:
                flat.max_props, flat.max_props_ptr = hi, nctx.ptr
        return True

    def negatable(self, ctx: Ctx, f: Flat, types: set[str]) -> bool:
        """Whether :meth:`apply_general_not` can write ``not: ctx`` (flat ``f``) exactly on a leaf of
        ``types`` (the DFA of its strings built within its bound)."""
        try:
            return plan_not(f, set(types), lambda v: self.doc.valid(ctx, v)) is not None
        except (DfaTooLarge, ecma.PatternError):
            return False


def _exact_object_not(s: dict, types: set[str]) -> bool:
    """Whether ``not: s`` on values of ``types`` is one of the object forms the compiler writes exactly: one property's
    value failing (``{properties: {p: S}}``, no ``required``), one name absent (``{required: [a]}``),
    or a branch group (:meth:`Combinators.negation_group`: several properties, or names with them)."""
    keys = asserting_keys(s)
    props, req = s.get("properties"), s.get("required")
    if s.get("type", "object") != "object" or not keys or not keys <= {"properties", "required", "type"}:
        return False
    if "required" not in keys:
        if not isinstance(props, dict) or not props:
            return False
        if len(props) > 1:  # a branch group (some property present and failing; with "type", the non-objects too)
            return True
        return "type" not in keys or types <= {"object"}  # the leaf keeps objects only: exact where S does not say "type"
    if not isinstance(req, list) or not req or not all(isinstance(n, str) for n in req):
        return False
    if "properties" not in keys:  # one name: forbidden at the leaf; several without "type": a group
        return len(set(req)) == 1 or "type" not in keys
    return isinstance(props, dict) and len(props) == 1 and list(props) == list(dict.fromkeys(req))


def _presence_only(s: object, names: set[str], depth: int) -> bool:
    """Whether schema s judges an object by which names are present alone (``required`` under
    ``allOf``/``anyOf``/``oneOf``/``not``; no ``$ref``), adding those names to ``names``."""
    if isinstance(s, bool):
        return True
    if not isinstance(s, dict) or depth > 8:
        return False
    for k, v in s.items():
        if k in IGNORED_KEYWORDS:
            continue
        if k == "required" and isinstance(v, list) and all(isinstance(n, str) for n in v):
            names.update(v)
        elif k in ("allOf", "anyOf", "oneOf") and isinstance(v, list) and v:
            if not all(_presence_only(sub, names, depth + 1) for sub in v):
                return False
        elif k == "not":
            if not _presence_only(v, names, depth + 1):
                return False
        else:
            return False
    return True


def _merged_terms(rows: list[int], full: int) -> list[tuple[int, int]]:
    """Terms (bits, care mask) covering exactly the rows (bit masks over ``full``): rows merged where
    they differ in one cared bit, until no two merge (the prime implicants)."""
    terms = {(r, full) for r in rows}
    while True:
        merged: set[tuple[int, int]] = set()
        used: set[tuple[int, int]] = set()
        for a in terms:
            for b in terms:
                if a[1] == b[1] and a[0] < b[0]:
                    diff = a[0] ^ b[0]
                    if diff & (diff - 1) == 0:
                        merged.add((a[0] & ~diff, a[1] & ~diff))
                        used.update((a, b))
        if not merged:
            return sorted(terms)
        terms = (terms - used) | merged


def _object_form(s: object, closed_too: bool) -> Optional[tuple[dict, list[str], bool]]:
    """(properties, required, additionalProperties) of a schema ``{type: object, properties,
    required}`` (``additionalProperties: true/false`` too where ``closed_too``); None for any other."""
    if not isinstance(s, dict):
        return None
    allowed = {"type", "properties", "required"} | ({"additionalProperties"} if closed_too else set())
    props, req, ap = s.get("properties", {}), s.get("required", []), s.get("additionalProperties", True)
    if (not asserting_keys(s) <= allowed or s.get("type", "object") not in ("object", ["object"])
            or not isinstance(props, dict) or not isinstance(req, list) or not all(isinstance(n, str) for n in req)
            or not isinstance(ap, bool)):
        return None
    return props, req, ap


def _closed_form(s: object) -> bool:
    """Whether s may be a closed branch :meth:`Combinators._closed_side` reads (its first test)."""
    return isinstance(s, dict) and s.get("additionalProperties") is False and asserting_keys(s) <= _CLOSED_KEYS


def _count(v: object) -> bool:
    """Whether v is a property count a schema may say (a non-negative integer, not a boolean)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _within(lo: int, hi: Optional[int], bounds: tuple[int, Optional[int]]) -> tuple[int, Optional[int]]:
    """The count range ``[lo, hi]`` (``hi`` None: unbounded) narrowed to ``bounds``."""
    b_lo, b_hi = bounds
    return max(lo, b_lo), (hi if b_hi is None else b_hi if hi is None else min(hi, b_hi))


def oneof_true_rest(s: object) -> Optional[list[int]]:
    """For ``{oneOf: [...]}`` with exactly one branch that admits every value (``true``, or no
    asserting keyword, e.g. only an unknown one): the indices of the other branches (the schema
    holds where none of them does); None for any other form."""
    if not (isinstance(s, dict) and asserting_keys(s) == {"oneOf"} and isinstance(s["oneOf"], list)):
        return None
    trivial = [n for n, b in enumerate(s["oneOf"]) if b is True or (isinstance(b, dict) and not asserting_keys(b))]
    if len(trivial) != 1:
        return None
    return [n for n in range(len(s["oneOf"])) if n != trivial[0]]


def _is_not(s: object) -> bool:
    """Whether s is a schema ``{not: X}`` (annotations aside)."""
    return isinstance(s, dict) and asserting_keys(s) == {"not"}


def _branch_ctx(branch: list[Action]) -> Ctx:
    """The subschema of a ``oneOf`` branch (as :meth:`~.keywords.Keywords._kw_oneOf` writes it:
    one :class:`~.ir.Holds`)."""
    first = branch[0]
    if not isinstance(first, Holds):
        raise TypeError(f"a oneOf branch starts with {first!r}, not the subschema it holds")
    return first.ctx
