"""The compiler's intermediate form: the conjunction of subschemas, keyword by keyword.

A :class:`Flat` collects what every subschema of a conjunction says (``allOf`` members,
``$ref`` targets, the sibling keywords of one object, the actions of a chosen ``anyOf`` /
``oneOf`` / ``if`` branch), grouped by the JSON type each keyword constrains.  The emitters
(``emit_*``) read it; the keyword handlers (:mod:`.keywords`) and the combinators
(:mod:`.combinators`) fill it.  :data:`EMPTY` (``None``) stands for the empty language in every
emitter's result.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any, Optional, Union

from constrained_spec.grammar.json_schema.context import Ctx

__all__ = ["EMPTY", "Conjunct", "Owner", "Flat", "Holds", "Forbid", "Require", "NarrowTypes", "Action", "Group"]

#: the empty language (no value matches)
EMPTY = None

#: one member of a conjunction: a subschema and whether it must hold (True) or fail (False)
Conjunct = tuple[Ctx, bool]


# -- the actions of one branch of a branch group (``anyOf``/``oneOf``/``if``/dependencies),
# applied by :meth:`~.compiler.Compiler.apply_action` to a copy of the conjunction


@dataclass(frozen=True)
class Holds:
    """The subschema ``ctx`` holds (``positive``) or fails (not ``positive``)."""

    ctx: Ctx
    positive: bool = True


@dataclass(frozen=True)
class Forbid:
    """No property called ``name``."""

    name: str


@dataclass(frozen=True)
class Require:
    """Properties ``names`` are required."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class NarrowTypes:
    """The value is of one of ``types`` (type names, as ``Flat.types``)."""

    types: frozenset[str]


@dataclass(frozen=True)
class Unseen:
    """The branch's objects are taken never to have the properties ``names``, because in the
    declared mode they are not among the names the final object declares (the ``oneOf`` at ``ptr``
    told its branches apart on that); :func:`~.declared_names.check_unseen` checks it where the
    object is written."""

    ptr: str
    names: frozenset[str]


#: one action of a branch
Action = Union[Holds, Forbid, Require, NarrowTypes, Unseen]
#: a branch group: (kind ``"anyOf"``/``"oneOf"``/``"if"``/``"dependency"``, its branches (each a list
#: of actions), JSON pointer of the keyword)
Group = tuple[str, list[list[Action]], str]


class Owner:
    """``additionalProperties`` / ``patternProperties`` (or ``unevaluatedProperties``) of one
    schema object: they depend on the sibling ``properties`` of that same object."""

    __slots__ = ("names", "patterns", "ap", "ptr")

    def __init__(self, names: set[str], patterns: list[tuple[str, Ctx]], ap: Optional[Ctx], ptr: str) -> None:
        self.names = names  # set of property names declared next to it
        self.patterns = patterns  # list of (pattern, ctx)
        self.ap = ap  # None (absent), or a ctx (schema / bool)
        self.ptr = ptr


@dataclass(eq=False)
class Flat:
    """The conjunction of a set of subschemas, keyword by keyword.

    Fields left at their defaults mean "no constraint".  :meth:`copy` copies the containers
    (one level), so a branch can add to a copy without touching the original.
    """

    # -- every type: ``type``, ``enum``/``const``, the subschemas absorbed, ``not``, the
    # branch groups (``anyOf``/``oneOf``/``if``/dependencies) and the ``$ref``s followed
    types: Optional[set[str]] = None  # allowed type names (None: all); ``"integer"`` apart from ``"number"``
    enum: Optional[list[Any]] = None  # the finite set of allowed values (None: no enum/const)
    sources: list[Conjunct] = field(default_factory=list)  # (ctx, positive): the validation oracle's inputs
    nots: list[Ctx] = field(default_factory=list)  # ``not`` subschemas, applied at the leaf
    groups: list[Group] = field(default_factory=list)
    refs: list[int] = field(default_factory=list)  # ids of the ``$ref`` targets followed (recursion accounting)
    constrained: bool = False  # False while only annotations / ``true`` schemas were absorbed
    # values a ``not: {enum/const}`` removes: (ctx of the ``not``, values)
    excluded: list[tuple[Ctx, list[Any]]] = field(default_factory=list)

    # -- numbers: ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``
    # (draft 4's boolean forms too), ``multipleOf``; ``not: {type: integer}`` sets non_integer
    lo: Optional[Decimal] = None
    lo_strict: bool = False
    hi: Optional[Decimal] = None
    hi_strict: bool = False
    multiple_of: list[tuple[Decimal, str]] = field(default_factory=list)  # (divisor, ptr)
    non_integer: bool = False
    non_integer_ptr: str = ""  # ptr of the ``not`` that set non_integer

    # -- strings: ``minLength``, ``maxLength``, ``pattern``, ``format`` (as a pattern)
    min_len: int = 0
    max_len: Optional[int] = None
    patterns: list[tuple[str, str, str]] = field(default_factory=list)  # (pattern, ptr, keyword)
    # decoded-string languages a general ``not`` removes: (ctx of the ``not``, its DFA)
    str_not: list[tuple[Ctx, Any]] = field(default_factory=list)

    # -- arrays: ``prefixItems``/``items``/``additionalItems``/``unevaluatedItems`` (as
    # owners), ``minItems``, ``maxItems``, ``uniqueItems``, ``contains`` (+ min/maxContains)
    arr_owners: list[tuple[list[Ctx], Optional[Ctx]]] = field(default_factory=list)  # (prefix ctxs, rest ctx or None)
    min_items: int = 0
    max_items: Optional[int] = None
    unique: Optional[str] = None  # ptr of a true ``uniqueItems``
    contains: list[tuple[Ctx, int, Optional[int], str]] = field(default_factory=list)  # (ctx, min, max, ptr)

    # -- objects: ``properties``, ``required``, ``additionalProperties``/``patternProperties``/
    # ``unevaluatedProperties`` (as owners), ``propertyNames``, ``minProperties``,
    # ``maxProperties``; dependencies and ``not: {required}`` forbid names
    props: dict[str, list[Ctx]] = field(default_factory=dict)  # name -> the subschemas of its value
    required: list[str] = field(default_factory=list)
    owners: list[Owner] = field(default_factory=list)
    property_names: list[Ctx] = field(default_factory=list)
    min_props: int = 0
    min_props_ptr: str = ""  # ptr of the ``minProperties`` that set min_props
    max_props: Optional[int] = None
    max_props_ptr: str = ""  # ptr of the ``maxProperties`` that set max_props
    forbidden: set[str] = field(default_factory=set)
    unseen: list[Unseen] = field(default_factory=list)  # names taken as never declared (declared mode)

    def copy(self) -> "Flat":
        """A copy whose lists, sets and dict (of lists) are new containers (the fields alone, read
        from the instance's ``__dict__``: the field names are looked up once, not per copy)."""
        f = Flat.__new__(Flat)
        mine, theirs = self.__dict__, f.__dict__
        for name in _FLAT_FIELDS:
            v = mine[name]
            if isinstance(v, (list, set)):
                v = type(v)(v)
            elif isinstance(v, dict):
                v = {kk: list(vv) for kk, vv in v.items()}
            theirs[name] = v
        return f


#: the names of :class:`Flat`'s fields, in order (:meth:`Flat.copy`)
_FLAT_FIELDS = tuple(fd.name for fd in fields(Flat))
