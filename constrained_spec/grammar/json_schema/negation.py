"""``not`` by JSON type: the general form behind :meth:`~.combinators.Combinators.apply_not`'s
special ones, and the string languages it needs.

A value of type t fails ``not: S`` exactly where it satisfies S. So, type by type of what the
context still allows, the negation is one of: nothing (S admits no value of type t), the whole
type (S admits every value of type t: t is dropped), or a set that the emitters can subtract:

* ``null``/``boolean``: the (at most two) values S admits, asked of the validator;
* strings: the *decoded* strings S admits, a regular language over code points (lengths,
  ``pattern``s, or a finite ``enum``), subtracted with a bounded DFA (:mod:`.content_dfa`); one
  length bound alone is flipped instead (``not: {maxLength: 9}`` is ``minLength: 10``, no DFA);
  a ``format`` inside S is read as admitting every string (a larger S, so a smaller
  complement: sound whether the judge asserts formats or not);
* numbers: one bound (``minimum``/``maximum``, exclusive or not) flipped;
* arrays and objects: one count bound (``minItems``/``maxItems``, ``minProperties``/
  ``maxProperties``) flipped, where S says nothing else of them.

Everything else (objects or arrays that S constrains, numeric ``enum``s, nested combinators)
answers None and the caller refuses by name. Exact or refused: never wider, never narrower.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Optional

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.ecma_regex import Node
from constrained_spec.grammar.json_schema.content_dfa import Dfa, DfaTooLarge, dfa_of_node, product, words_node
from constrained_spec.grammar.json_schema.ir import Flat
from constrained_spec.grammar.json_schema.values import type_of

__all__ = ["NotPlan", "plan_not", "negation_keyword", "recipe_dfa", "remembered_failure", "Recipe", "string_language", "search_node", "length_node", "own_strings_dfa"]

ANY_CHAR: Node = ("set", ecma.ANY_RANGES)


@dataclass
class NotPlan:
    """What ``not: S`` does to a leaf: types to drop, constant values to exclude, string
    languages to subtract, number bounds to add (each ``(value, strict)``)."""

    drop: set[str] = field(default_factory=set)
    exclude: list[Any] = field(default_factory=list)
    strings: Optional[Dfa] = None
    upper: Optional[tuple[Decimal, bool]] = None
    lower: Optional[tuple[Decimal, bool]] = None
    #: strings, arrays, objects: one length or count bound flipped (``not: {minItems: 3}`` is at most
    #: 2 items), each (lo, hi)
    lengths: Optional[tuple[int, Optional[int]]] = None
    items: Optional[tuple[int, Optional[int]]] = None
    props: Optional[tuple[int, Optional[int]]] = None


def search_node(pattern: str) -> Node:
    """The node of the strings in which the ECMA ``pattern`` finds a match (search semantics)."""
    anyrep: Node = ("rep", ANY_CHAR, 0, None)
    outs: list[Node] = []
    for b, sa, ea in ecma.anchored_branches(ecma.parse(pattern)):
        outs.append(("seq", ([] if sa else [anyrep]) + [b] + ([] if ea else [anyrep])))
    return ("alt", outs)


def length_node(lo: int, hi: Optional[int]) -> Node:
    """The node of the strings lo..hi code points long (none where hi < lo)."""
    if hi is not None and hi < lo:
        return ("set", ())  # e.g. minLength 2 with maxLength 1: no string (a rep of 2..1 is not that)
    return ("rep", ANY_CHAR, lo, hi)


#: a recipe of a string language: (min length, max length, patterns, words or None), see :func:`recipe_dfa`
Recipe = tuple[int, Optional[int], tuple[str, ...], Optional[tuple[str, ...]]]


def _both(a: bool, b: bool) -> bool:
    return a and b


def _first_only(a: bool, b: bool) -> bool:
    return a and not b


#: recipes (and other cache keys) whose construction passed a bound (at most 4,096 remembered)
TOO_LARGE: set[object] = set()


def recipe_dfa(recipe: Recipe) -> Dfa:
    """The DFA of the strings ``lo..hi`` long matching every pattern (search semantics) and, where
    ``words`` is given, among them; remembered (the most recent 256), its ``key`` the recipe.
    :class:`DfaTooLarge` past the state bound (remembered too: the same recipe fails again)."""
    return remembered_failure(recipe, _recipe_dfa, recipe)


def remembered_failure(key: object, build: Any, *args: Any) -> Any:
    """``build(*args)``, raising :class:`DfaTooLarge` at once for a key that raised it before."""
    if key in TOO_LARGE:
        raise DfaTooLarge("past a bound before")
    try:
        return build(*args)
    except DfaTooLarge:
        if len(TOO_LARGE) > 4096:
            TOO_LARGE.clear()
        TOO_LARGE.add(key)
        raise


@functools.lru_cache(maxsize=256)
def _recipe_dfa(recipe: Recipe) -> Dfa:
    lo, hi, patterns, words = recipe
    parts: list[Dfa] = []
    if words is not None:
        parts.append(dfa_of_node(words_node(list(words)) or ("set", ())))
    if lo > 0 or hi is not None:
        parts.append(dfa_of_node(length_node(lo, hi)))
    for p in patterns:
        parts.append(dfa_of_node(search_node(p)))
    out = parts[0] if parts else dfa_of_node(length_node(0, None))
    for d in parts[1:]:
        out = product(out, d, _both)
    out.key = recipe
    return out


def string_language(nf: Flat, valid_strings: Optional[list[str]]) -> Optional[Dfa]:
    """The DFA of every decoded string S admits (a superset where S has a ``format``), given S's
    flat ``nf`` and, where S has an ``enum``, the enum's strings S admits; None where S admits
    every string. :class:`DfaTooLarge` past the state bound, ``ecma.PatternError`` for a pattern
    the parser cannot read."""
    if valid_strings is not None:
        return recipe_dfa((0, None, (), tuple(sorted(set(valid_strings)))))
    pats = tuple(p for p, _, kw in nf.patterns if kw == "pattern")
    if nf.min_len == 0 and nf.max_len is None and not pats:
        return None
    return recipe_dfa((nf.min_len, nf.max_len, pats, None))


def own_strings_dfa(lo: int, hi: Optional[int], patterns: list[str], minus_words: list[str],
                    minus: list[Dfa]) -> Dfa:
    """The DFA of the strings lo..hi long matching every pattern, none of ``minus_words`` and
    in none of the ``minus`` languages."""
    d = recipe_dfa((lo, hi, tuple(patterns), None))
    if minus_words:
        minus = [recipe_dfa((0, None, (), tuple(sorted(set(minus_words)))))] + list(minus)
    for m in minus:
        d = product(d, m, _first_only)
    return d


def _numeric_free(nf: Flat) -> bool:
    return nf.lo is None and nf.hi is None and not nf.multiple_of and not nf.non_integer


def _object_free(nf: Flat) -> bool:
    return not (nf.props or nf.required or nf.owners or nf.property_names or nf.min_props or
                nf.max_props is not None or nf.forbidden)


def _array_free(nf: Flat) -> bool:
    return not (nf.arr_owners or nf.min_items or nf.max_items is not None or nf.unique or nf.contains)


def _flipped_count(lo: int, hi: Optional[int]) -> Optional[tuple[int, Optional[int]]]:
    """The counts outside ``[lo, hi]`` where they form one range (one bound given), as (lo, hi)."""
    if hi is None and lo > 0:
        return 0, lo - 1
    if hi is not None and lo == 0:
        return hi + 1, None
    return None


def _count_only_object(nf: Flat) -> bool:
    return not (nf.props or nf.required or nf.owners or nf.property_names or nf.forbidden)


def _count_only_array(nf: Flat) -> bool:
    return not (nf.arr_owners or nf.unique or nf.contains)


def plan_not(nf: Flat, types: set[str], valid: Any) -> Optional[NotPlan]:
    """How ``not: S`` acts on a leaf of ``types`` (S's flat is ``nf``; ``valid(value)`` asks the
    validator whether S admits a value), or None where it cannot be written exactly.
    :class:`DfaTooLarge` where a string language passes the state bound."""
    if nf.groups or nf.nots:
        return None
    plan = NotPlan()
    s_types = nf.types
    if s_types is not None and not s_types:
        return plan  # S admits nothing: not S admits everything
    enum = nf.enum

    def admits_type(t: str) -> bool:
        if s_types is None:
            return True
        return t in s_types or (t == "integer" and "number" in s_types)

    for t in ("null", "boolean"):
        if t not in types:
            continue
        vals = [None] if t == "null" else [True, False]
        bad = [v for v in vals if valid(v)]
        if len(bad) == len(vals):
            plan.drop.add(t)
        else:
            plan.exclude += bad
    if "string" in types and admits_type("string"):
        if enum is not None:
            words = [v for v in enum if isinstance(v, str) and valid(v)]
            if words:
                plan.strings = string_language(nf, words)
        elif not any(kw == "pattern" for _, _, kw in nf.patterns) and _flipped_count(nf.min_len, nf.max_len):
            plan.lengths = _flipped_count(nf.min_len, nf.max_len)  # not {maxLength: k}: k + 1 or more
        else:
            d = string_language(nf, None)
            if d is None:
                plan.drop.add("string")
            else:
                plan.strings = d
    num_types = types & {"number", "integer"}
    if num_types:
        if enum is not None:
            if any(type_of(v) in ("integer", "number") and valid(v) for v in enum):
                return None
        elif not admits_type("integer") and not admits_type("number"):
            pass
        elif s_types is not None and "number" not in s_types and "number" in num_types:
            return None  # S admits integers only: its complement among numbers holds the non-integers
        elif _numeric_free(nf):
            plan.drop |= num_types
        elif nf.multiple_of or nf.non_integer or (nf.lo is not None and nf.hi is not None):
            return None
        elif nf.lo is not None:  # not (x >= lo) is x < lo
            plan.upper = (nf.lo, not nf.lo_strict)
        elif nf.hi is not None:  # not (x <= hi) is x > hi
            plan.lower = (nf.hi, not nf.hi_strict)
    for t, free in (("object", _object_free(nf)), ("array", _array_free(nf))):
        if t not in types:
            continue
        if enum is not None:
            if any(type_of(v) == t and valid(v) for v in enum):
                return None
        elif not admits_type(t):
            continue
        elif free:
            plan.drop.add(t)
        elif t == "array" and _count_only_array(nf) and _flipped_count(nf.min_items, nf.max_items) is not None:
            plan.items = _flipped_count(nf.min_items, nf.max_items)  # not {minItems: k}: fewer than k items
        elif t == "object" and _count_only_object(nf) and _flipped_count(nf.min_props, nf.max_props) is not None:
            plan.props = _flipped_count(nf.min_props, nf.max_props)
        else:
            return None
    return plan


def negation_keyword(ptr: str) -> tuple[str, str]:
    """The keyword (and its pointer) a refused negation at ``ptr`` is reported under: a ``oneOf``
    branch negated to keep the branches apart (``.../oneOf/2``) is the ``oneOf``'s, else ``not``."""
    head, _, last = ptr.rpartition("/")
    if last.isdigit() and head.endswith("/oneOf"):
        return "oneOf", head
    return "not", ptr
