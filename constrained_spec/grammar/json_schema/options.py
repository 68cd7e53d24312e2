"""Options and result of the JSON Schema compiler, and the limits it works under.

The limits below are fixed (not options): each one either caps work that would otherwise grow
without bound on hostile schemas, or picks where a sound restriction starts.  Raising one never
makes the compiler unsound, only slower or its regexes larger.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = [
    "SchemaOptions",
    "SchemaRegex",
    "DECLARED_PROPERTIES_NOTE",
    "whitespace_regex",
    "LOCAL_OBJECT_CAP",
    "HOIST_CHARS",
    "HOIST_CHARS_SMALL",
    "NO_REGEX_NOTE",
    "UNROLL_BUDGET",
    "MAX_BRANCH_COMBINATIONS",
    "MAX_REF_CHAIN",
    "REF_CYCLE_DEPTH",
    "STATIC_WALK_DEPTH",
    "MAX_UNIQUE_DOMAIN",
    "MAX_ENUMERATED_MULTIPLES",
]

#: the compiler's two default choices (not bugs), named in every refusal that may follow from them
DECLARED_PROPERTIES_NOTE = (
    "by default only declared properties are generated, in declared order (a choice, not the schema's "
    "language: additional_properties='spec' (CLI --additional-properties spec) also generates the additional "
    "properties the schema allows; property_order='any' allows other orders of small objects)"
)
#: size (characters) past which an all-optional object requires its first property, so that
#: its regex stays linear (80_000 passes 8 more JSONSchemaBench schemas but triples their DFA
#: build time)
LOCAL_OBJECT_CAP = 40_000
#: a schema whose regex passes ``max_regex_chars``: its grammar makes every conjunction whose regex
#: passes this many characters a rule of its own (named wherever it occurs), so the grammar's size
#: grows with the schema, not with the product of its optional parts
HOIST_CHARS = 1_000
#: where the grammar with :data:`HOIST_CHARS` is not built either (a conjunction of many small parts,
#: e.g. an object of hundreds of properties, still passes ``max_regex_chars``), the last try hoists
#: every conjunction past this many characters
HOIST_CHARS_SMALL = 100
#: ``SchemaRegex.narrowed`` of a schema compiled to a grammar only (``regex`` is then ``""``)
NO_REGEX_NOTE = "# (no regex within max_regex_chars: only the Lark grammar holds the language)"
#: cap on (bounded count x expanded element size) of an array repetition: the DFA builder
#: unrolls bounded repetitions, so a heavier one gets a lower maxItems (a sound restriction)
UNROLL_BUDGET = 60_000
#: most combinations of anyOf/oneOf/if/dependency branches one schema object may expand to
#: (:class:`~constrained_spec.errors.CompileLimitError` beyond)
MAX_BRANCH_COMBINATIONS = 4096
#: longest chain of subschemas (``$ref`` and applicators) absorbed into one conjunction
MAX_REF_CHAIN = 60
#: depth past which a ``$ref`` met twice in one conjunction is a cycle without structure
REF_CYCLE_DEPTH = 30
#: how deep the static walks behind ``unevaluatedProperties``/``unevaluatedItems`` look
#: (through ``allOf`` and ``$ref``) before they give up
STATIC_WALK_DEPTH = 8
#: most distinct item values for which ``uniqueItems`` is enforced exactly
MAX_UNIQUE_DOMAIN = 64
#: most multiples of an integer ``multipleOf`` in a bounded range that are listed one by one
MAX_ENUMERATED_MULTIPLES = 256


@dataclass(frozen=True)
class SchemaOptions:
    """Options of :func:`~constrained_spec.grammar.json_schema.schema_to_regex`.

    ``whitespace``: ``"compact"`` (the text of ``json.dumps(v, separators=(",", ":"),
    ensure_ascii=False)``) or ``"flexible"`` (at most ``max_whitespace`` of ``[ \\n\\t]``
    between tokens).  ``property_order``: ``"schema"`` (declared order) or ``"any"`` (any
    order of the declared properties where an object declares at most
    ``max_any_order_properties`` of them; larger objects keep schema order).
    ``max_recursion_depth``: how deep recursive ``$ref``s are unrolled.  ``allow_unenforced``:
    accept keywords that cannot be enforced and list them in ``SchemaRegex.unenforced``; the
    caller must then validate the finished value.  ``max_regex_chars``: size cap
    (:class:`CompileLimitError`).  ``time_budget_s``: compile time cap
    (:class:`CompileLimitError`).  ``any_value_depth``: nesting depth of free-form values
    (``{}``/``true`` schemas, arrays without ``items``).

    ``additional_properties``: ``"declared"`` (default): an object whose schema declares properties
    and has no ``additionalProperties``/``patternProperties`` gets only its declared properties (a
    sound narrowing; free-form objects still get any); ``"spec"``: it also gets the additional
    properties the schema allows (a larger regex, slower to compile).

    ``unknown_formats``: what to do with a ``format`` the compiler has no pattern for.
    ``"annotation"`` (default): a name that JSON Schema does not define (``"int32"``,
    ``"color"``, ...) is an annotation that validators ignore, so it is ignored and listed in
    ``SchemaRegex.ignored_formats``; a name the specification defines but the compiler cannot
    enforce (``"regex"``) raises :class:`UnsupportedKeywordError`.  ``"error"``: every format
    without a pattern raises.

    ``recursive_refs``: ``"grammar"`` (default): a schema whose ``$ref`` targets recur inside
    themselves also gets ``SchemaRegex.lark``, a Lark grammar with one rule per recursive
    subschema, so nesting is unbounded (the regex stays, unrolled ``max_recursion_depth`` deep, for
    engines without grammars); ``"unroll"``: the regex only.

    ``draft``: the JSON Schema draft of a schema without ``$schema`` (``"2020-12"`` when
    ``None``; also ``"2019-09"``, ``"7"``, ``"6"``, ``"4"``); a ``$schema`` in the schema wins.
    ``ref_allow``: local folders and ``http(s)://`` URL prefixes a ``$ref`` may retrieve from
    (see :mod:`constrained_spec.grammar.schema_refs`); empty by default, so a ``$ref`` to a file
    or URL raises :class:`~constrained_spec.errors.RefRetrievalError`. Never fill it from input
    you do not trust.
    """

    whitespace: str = "compact"
    max_whitespace: int = 2
    property_order: str = "schema"
    max_recursion_depth: int = 3
    allow_unenforced: bool = False
    max_regex_chars: int = 200_000
    time_budget_s: Optional[float] = 20.0
    any_value_depth: int = 2
    max_any_order_properties: int = 4
    additional_properties: str = "declared"
    linear_objects: bool = False
    unknown_formats: str = "annotation"
    draft: Optional[str] = None
    ref_allow: tuple[str, ...] = ()
    recursive_refs: str = "grammar"

    def __post_init__(self) -> None:
        from constrained_spec.grammar.schema_refs import normalize_draft

        object.__setattr__(self, "draft", normalize_draft(self.draft))
        if isinstance(self.ref_allow, str):
            raise ValueError("ref_allow must be a sequence of folder paths / URL prefixes, not one string")
        object.__setattr__(self, "ref_allow", tuple(str(x) for x in self.ref_allow))
        if self.whitespace not in ("compact", "flexible"):
            raise ValueError("whitespace must be 'compact' or 'flexible'")
        if self.additional_properties not in ("declared", "spec"):
            raise ValueError("additional_properties must be 'declared' or 'spec'")
        if self.unknown_formats not in ("annotation", "error"):
            raise ValueError("unknown_formats must be 'annotation' or 'error'")
        if self.recursive_refs not in ("grammar", "unroll"):
            raise ValueError("recursive_refs must be 'grammar' or 'unroll'")
        if self.property_order not in ("schema", "any"):
            raise ValueError("property_order must be 'schema' or 'any'")
        if self.max_whitespace < 0 or self.max_recursion_depth < 0 or self.any_value_depth < 0:
            raise ValueError("negative limit")


@dataclass(frozen=True)
class SchemaRegex:
    """A compiled schema: ``regex`` must full-match the whole JSON text."""

    regex: str
    unenforced: tuple[str, ...] = ()
    recursion_depth: int = 0
    # (JSON pointer of the keyword, format name) of each ``format`` ignored as an annotation
    # (names JSON Schema does not define; validators ignore them too, so this is sound)
    ignored_formats: tuple[tuple[str, str], ...] = ()
    #: for a recursive schema: the Lark grammar of its whole language (recursion unbounded; None
    #: where the schema does not recur, or the grammar could not be built exactly)
    lark: Optional[str] = None
    #: where ``regex`` holds only a sound part of the schema's language for its size: JSON pointers
    #: of strings whose ``pattern`` and length bounds one regex cannot hold exactly, and of large
    #: all-optional objects that must start with their first property (noted so); ``lark``, when
    #: set, holds the whole language there (a ``%json`` string, objects as rules) for the lazy engine
    narrowed: tuple[str, ...] = ()


def whitespace_regex(options: SchemaOptions) -> str:
    """The regex of the whitespace allowed between two JSON tokens under ``options``."""
    return "" if options.whitespace == "compact" else "[ \\n\\t]{0,%d}" % options.max_whitespace
