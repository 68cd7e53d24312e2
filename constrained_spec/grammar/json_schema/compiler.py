"""JSON Schema -> regex compiler.

The regex full-matches the JSON text of values that the schema accepts.  It is compiled
later (by outlines-core) into a DFA over UTF-8 bytes, so it uses a dialect shared by Python
``re`` and Rust ``regex-automata``: no lookaround, no backreferences, ``[0-9]`` instead of
``\\d``, explicit character classes, anchors implicit.

Soundness first: every string the regex accepts parses to a value that the schema accepts
(checked against the ``jsonschema`` validator).  Where a keyword cannot be expressed exactly
the compiler either *restricts* the language (e.g. it never emits additional properties that
the schema does not name, fixes one key order, bounds nesting of free-form values, unrolls
recursion to a fixed depth) or raises :class:`UnsupportedKeywordError` naming the keyword
and its JSON pointer (or, with ``allow_unenforced=True``, records it in
``SchemaRegex.unenforced`` so the caller validates the finished value).

Entry point: :func:`schema_to_regex`.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any, Optional, Union

from constrained_spec.errors import (
    CompileLimitError,
    EmptyLanguageError,
    SchemaError,
    UnsupportedKeywordError,
)
from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.formats import format_pattern, is_spec_format
from constrained_spec.grammar.numeric_ranges import decimal_range, int_bounds, integer_range

__all__ = [
    "SchemaOptions",
    "SchemaRegex",
    "schema_to_regex",
    "canonical_key_orders",
    "value_regex",
]

# ---------------------------------------------------------------------------
# public API


@dataclass(frozen=True)
class SchemaOptions:
    """Options of :func:`schema_to_regex`.

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

    ``unknown_formats``: what to do with a ``format`` the compiler has no pattern for.
    ``"annotation"`` (default): a name that JSON Schema does not define (``"int32"``,
    ``"color"``, ...) is an annotation that validators ignore, so it is ignored and listed in
    ``SchemaRegex.ignored_formats``; a name the specification defines but the compiler cannot
    enforce (``"regex"``) raises :class:`UnsupportedKeywordError`.  ``"error"``: every format
    without a pattern raises.

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


def schema_to_regex(
    schema: Union[dict, bool, str], options: Optional[SchemaOptions] = None
) -> SchemaRegex:
    """Compile a JSON Schema (dict, bool or JSON text) to a regex over the JSON text.

    Raises :class:`SchemaError` for malformed schemas, :class:`UnsupportedKeywordError`
    for keywords that cannot be enforced, :class:`CompileLimitError` when the regex grows
    past ``options.max_regex_chars`` or compiling exceeds the time budget, and
    :class:`EmptyLanguageError` when no value satisfies the (restricted) schema.
    """
    options = options or SchemaOptions()
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise SchemaError(f"schema is not valid JSON: {e}") from e
    if not isinstance(schema, (dict, bool)):
        raise SchemaError(f"a schema must be an object or a boolean, not {type(schema).__name__}")
    start = time.monotonic()
    comp = _Compiler(schema, options)
    try:
        return comp.run()
    except CompileLimitError as e:
        if getattr(e, "kind", "") != "size" or not comp.reducible:
            raise
        first_error = e
    # Too large: retry with tighter (still sound) restrictions -- shallower free-form
    # values and shallower recursion.
    import dataclasses

    tried = {(options.any_value_depth, options.max_recursion_depth, options.linear_objects)}
    ad, rd = options.any_value_depth, options.max_recursion_depth
    plan = [(min(ad, 1), rd, options.linear_objects), (min(ad, 1), rd, True)]
    while rd > 1:
        rd -= 1
        plan.append((min(ad, 1), rd, True))
    plan += [(0, min(rd, 1), True), (0, 0, True)]
    for ad, rd, lin in plan:
        if (ad, rd, lin) in tried:
            continue
        tried.add((ad, rd, lin))
        budget = options.time_budget_s
        if budget is not None:
            budget = budget - (time.monotonic() - start)
            if budget <= 0:
                break
        opts2 = dataclasses.replace(
            options, any_value_depth=ad, max_recursion_depth=rd, linear_objects=lin, time_budget_s=budget
        )
        try:
            return _Compiler(schema, opts2).run()
        except CompileLimitError as e:
            if getattr(e, "kind", "") != "size":
                raise
    raise first_error


# ---------------------------------------------------------------------------
# helpers

_TYPES = ("object", "array", "string", "number", "boolean", "null")
_ALL_TYPES = frozenset(_TYPES + ("integer",))

# keywords without effect on validation (annotations etc.)
_IGNORED = {
    "$schema", "$id", "id", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary", "title",
    "description", "default", "examples", "example", "readOnly", "writeOnly", "deprecated",
    "contentEncoding", "contentMediaType", "contentSchema", "$defs", "definitions", "nullable",
}


# characters of generated extra property names: printable ASCII without '"' and '\\'
# (a restriction that keeps the name-exclusion regexes small)
_KEY_RANGES = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E))

_LOCAL_OBJECT_CAP = 40_000  # 80_000 passes 8 more JSONSchemaBench schemas but 3x their DFA build time
# cap on (bounded count x expanded element size) for array repetitions
_UNROLL_BUDGET = 60_000

_STRUCTURAL = {
    "additionalProperties", "patternProperties", "unevaluatedProperties", "unevaluatedItems",
    "prefixItems", "items", "additionalItems",
}


def _dec(x: Any) -> Decimal:
    if isinstance(x, bool):
        raise TypeError
    if isinstance(x, int):
        return Decimal(x)
    return Decimal(repr(float(x))) if isinstance(x, float) else Decimal(str(x))


def _json_key(v: Any) -> str:
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def _group(r: str) -> str:
    return r if ecma._is_atom(r) else "(" + r + ")"


def _alt(rs: list[str]) -> Optional[str]:
    rs = list(dict.fromkeys(r for r in rs if r is not None))
    if not rs:
        return None
    if len(rs) == 1:
        return rs[0]
    return "(" + "|".join(rs) + ")"


def _cat(*parts: str) -> str:
    out = []
    for p in parts:
        if p == "":
            continue
        out.append(p if not ecma._top_level_bar(p) else "(" + p + ")")
    return "".join(out)


class _Ctx:
    """A subschema with its JSON pointer and the resolver for its base URI."""

    __slots__ = ("schema", "ptr", "resolver")

    def __init__(self, schema: Any, ptr: str, resolver: Any) -> None:
        self.schema = schema
        self.ptr = ptr
        self.resolver = resolver

    def child(self, sub: Any, *path: Any) -> "_Ctx":
        p = self.ptr
        for x in path:
            p += "/" + str(x).replace("~", "~0").replace("/", "~1")
        return _Ctx(sub, p, self.resolver)


class _NegCtx(_Ctx):
    """A subschema that must NOT hold (used for the negation of an ``if``)."""

    __slots__ = ()


class _Owner:
    """additionalProperties / patternProperties of one schema object (they depend on the
    sibling ``properties`` of that same object)."""

    __slots__ = ("names", "patterns", "ap", "ptr")

    def __init__(self, names, patterns, ap, ptr):
        self.names = names  # set of property names declared next to it
        self.patterns = patterns  # list of (pattern, ctx)
        self.ap = ap  # None (absent), or a ctx (schema / bool)
        self.ptr = ptr


class _Flat:
    """The conjunction of a set of subschemas, keyword by keyword."""

    def __init__(self) -> None:
        self.types: Optional[set] = None
        self.enum: Optional[list] = None
        self.sources: list = []  # (ctx, positive)
        self.lo: Optional[Decimal] = None
        self.lo_strict = False
        self.hi: Optional[Decimal] = None
        self.hi_strict = False
        self.multiple_of: list = []
        self.min_len = 0
        self.max_len: Optional[int] = None
        self.patterns: list = []  # (pattern, ptr, keyword)
        self.arr_owners: list = []  # (list of prefix ctxs, rest ctx or None)
        self.min_items = 0
        self.max_items: Optional[int] = None
        self.unique: Optional[str] = None  # ptr
        self.contains: list = []  # (ctx, min, max, ptr)
        self.props: dict = {}
        self.required: list = []
        self.owners: list = []
        self.property_names: list = []
        self.min_props = 0
        self.max_props: Optional[int] = None
        self.forbidden: set = set()
        self.groups: list = []  # (kind, [branch actions], ptr)
        self.nots: list = []  # ctx
        self.refs: list = []  # ref keys followed
        self.unevaluated: list = []
        self.constrained = False

    def copy(self) -> "_Flat":
        f = _Flat.__new__(_Flat)
        for k, v in self.__dict__.items():
            if isinstance(v, (list, set)):
                v = type(v)(v)
            elif isinstance(v, dict):
                v = {kk: list(vv) for kk, vv in v.items()}
            setattr(f, k, v)
        return f


class _Abort(Exception):
    pass


_EMPTY = None  # the empty language


class _Compiler:
    def __init__(self, schema: Union[dict, bool], options: SchemaOptions) -> None:
        from jsonschema import exceptions as js_exc

        from constrained_spec.grammar.schema_refs import make_registry, validator_class

        self.opts = options
        try:
            cls = validator_class(schema, options.draft)
        except Exception as e:  # unknown $schema etc.
            raise SchemaError(f"cannot choose a validator for this schema: {e}") from e
        try:
            cls.check_schema(schema)
        except js_exc.SchemaError as e:
            ptr = "/" + "/".join(str(p) for p in e.absolute_path) if e.absolute_path else ""
            raise SchemaError(f"schema is not valid JSON Schema: {e.message}", ptr) from e
        except Exception as e:
            raise SchemaError(f"schema could not be checked: {e}") from e
        self.cls = cls
        self.root = schema
        self.validator = cls(schema, registry=make_registry(options.ref_allow, options.draft))
        names = {
            "Draft3Validator": 3,
            "Draft4Validator": 4,
            "Draft6Validator": 6,
            "Draft7Validator": 7,
            "Draft201909Validator": 2019,
            "Draft202012Validator": 2020,
        }
        self.draft = names.get(cls.__name__, 2020)
        if self.draft == 3:
            raise UnsupportedKeywordError("$schema", "#", "draft-03 schemas are not supported")
        self.ws = "" if options.whitespace == "compact" else "[ \\n\\t]{0,%d}" % options.max_whitespace
        self.unenforced: list[str] = []
        self.ignored_formats: dict = {}  # pointer -> format name
        self.active: dict = {}
        self.max_seen_depth = 0
        self.deadline = (
            time.monotonic() + options.time_budget_s if options.time_budget_s is not None else None
        )
        self._any_cache: dict = {}
        self._val_cache: dict = {}
        self._keep: list = []
        self.reducible = False  # whether a retry with tighter restrictions can shrink the regex
        c = ecma.emit_set(ecma.ANY_RANGES)
        self.canon_char = c
        # generic (non-canonical spellings allowed) character of a JSON string; no
        # surrogate escapes so that lengths count code points exactly
        self.str_char = '([^"\\\\\\x00-\\x1f]|\\\\(["\\\\/bfnrt]|u[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}))'

    # -- bookkeeping -------------------------------------------------------

    def tick(self) -> None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise CompileLimitError(
                f"compiling the schema took longer than {self.opts.time_budget_s} s"
            )

    def unsupported(self, keyword: str, ptr: str, reason: str = "") -> None:
        """Refuse a keyword, or record it when allow_unenforced."""
        if self.opts.allow_unenforced:
            tag = f"{ptr or '#'}/{keyword}" if not ptr.endswith("/" + keyword) else ptr
            if tag not in self.unenforced:
                self.unenforced.append(tag)
            return
        raise UnsupportedKeywordError(keyword, ptr or "#", reason)

    def refuse(self, keyword: str, ptr: str, reason: str = "") -> None:
        raise UnsupportedKeywordError(keyword, ptr or "#", reason)

    def run(self) -> SchemaRegex:
        root = _Ctx(self.root, "", self.validator._resolver)
        try:
            r = self.compile([(root, True)])
        except RecursionError as e:
            raise CompileLimitError("schema nesting too deep to compile") from e
        if r is None:
            raise EmptyLanguageError(
                "the schema (as restricted by the compiler) accepts no value"
            )
        if len(r) > self.opts.max_regex_chars:
            e = CompileLimitError(
                f"regex has {len(r)} characters, over max_regex_chars={self.opts.max_regex_chars}"
            )
            e.kind = "size"
            raise e
        return SchemaRegex(
            r, tuple(self.unenforced), self.max_seen_depth, tuple(sorted(self.ignored_formats.items()))
        )

    def check_size(self, r: Optional[str]) -> Optional[str]:
        if r is not None and len(r) > self.opts.max_regex_chars:
            e = CompileLimitError(
                f"regex grew past max_regex_chars={self.opts.max_regex_chars} characters"
            )
            e.kind = "size"
            raise e
        return r

    # -- validation oracle -------------------------------------------------

    def valid(self, ctx: _Ctx, value: Any) -> bool:
        key = (id(ctx.schema), id(ctx.resolver))
        v = self._val_cache.get(key)
        if v is None:
            v = self.validator.evolve(schema=ctx.schema, _resolver=ctx.resolver)
            self._val_cache[key] = v
            self._keep.append(ctx)  # keep ids stable
        try:
            return v.is_valid(value)
        except RecursionError:
            return False

    def valid_all(self, sources, value) -> bool:
        for ctx, pos in sources:
            if self.valid(ctx, value) != pos:
                return False
        return True

    # -- absorbing subschemas ------------------------------------------------

    def enter(self, ctx: _Ctx) -> _Ctx:
        s = ctx.schema
        if isinstance(s, dict):
            key = "$id" if self.draft >= 6 else "id"
            if isinstance(s.get(key), str):
                from referencing import Resource
                from referencing.jsonschema import specification_with

                try:
                    spec = specification_with(self.validator.META_SCHEMA.get("$schema", ""))
                    res = Resource(contents=s, specification=spec)
                    return _Ctx(s, ctx.ptr, ctx.resolver.in_subresource(res))
                except Exception as e:  # a malformed base URI: the $refs under it cannot be resolved
                    raise SchemaError(
                        f"{key} {s[key]!r} cannot be used as a base URI ({type(e).__name__}: {e})",
                        (ctx.ptr or "") + "/" + key,
                    ) from e
        return ctx

    def resolve_ref(self, ctx: _Ctx, ref: str, kw: str = "$ref") -> _Ctx:
        from constrained_spec.grammar.schema_refs import ref_error

        try:
            resolved = ctx.resolver.lookup(ref)
        except Exception as e:
            err = ref_error(e, ref, ctx.ptr + "/" + kw)
            if err is None:
                err = SchemaError(f"$ref {ref!r} cannot be resolved ({type(e).__name__})", ctx.ptr + "/" + kw)
            raise err from None
        ptr = ref if not ref.startswith("#") else ref[1:]
        return self.enter(_Ctx(resolved.contents, ptr, resolved.resolver))

    def absorb(self, flat: _Flat, ctx: _Ctx, positive: bool = True, depth: int = 0) -> None:
        """Add the constraints of ``ctx`` (or of its negation) to ``flat``."""
        self.tick()
        if depth > 60:
            self.refuse("$ref", ctx.ptr, "reference chain too long")
        ctx = self.enter(ctx)
        s = ctx.schema
        if not positive:
            flat.nots.append(ctx)
            flat.sources.append((ctx, False))
            return
        flat.sources.append((ctx, True))
        if s is True or s == {}:
            return
        if s is False:
            flat.types = set()
            flat.constrained = True
            return
        if not isinstance(s, dict):
            return
        ptr = ctx.ptr
        if "$ref" in s and isinstance(s["$ref"], str):
            target = self.resolve_ref(ctx, s["$ref"])
            key = id(target.schema)
            flat.refs.append(key)
            if flat.refs.count(key) > 1 and depth > 30:
                self.refuse("$ref", ptr + "/$ref", "reference cycle without structure")
            self.absorb(flat, target, True, depth + 1)
            if self.draft <= 7:
                return  # siblings of $ref are ignored before 2019-09
        for kw in ("$dynamicRef", "$recursiveRef"):
            if kw in s:
                self.refuse(kw, ptr + "/" + kw, "dynamic references are not supported")
        for k, v in s.items():
            if k in _IGNORED or k == "$ref":
                continue
            h = getattr(self, "_kw_" + k.replace("$", "_"), None)
            if h is not None:
                flat.constrained = True
                h(flat, ctx, v, ptr + "/" + k, depth)
            elif k in _STRUCTURAL:
                flat.constrained = True
        # additionalProperties/patternProperties need the sibling properties
        if "additionalProperties" in s or "patternProperties" in s:
            names = set(s.get("properties", {}) or {})
            pats = [
                (p, ctx.child(sub, "patternProperties", p))
                for p, sub in (s.get("patternProperties") or {}).items()
            ]
            ap = s.get("additionalProperties")
            ap_ctx = ctx.child(ap, "additionalProperties") if "additionalProperties" in s else None
            if "additionalProperties" in s and ap is True:
                ap_ctx = ctx.child(True, "additionalProperties")
            flat.owners.append(_Owner(names, pats, ap_ctx, ptr))
            for p, _ in pats:
                self.check_pattern(p, ptr + "/patternProperties")
        if "unevaluatedProperties" in s and "additionalProperties" not in s:
            ue = s["unevaluatedProperties"]
            if ue is not True:
                if self._dynamic_subtree(s):
                    self.refuse(
                        "unevaluatedProperties",
                        ptr + "/unevaluatedProperties",
                        "only supported where the evaluated properties are static",
                    )
                names, pats = self._static_names(ctx, 0)
                flat.owners.append(
                    _Owner(names, pats, ctx.child(ue, "unevaluatedProperties"), ptr)
                )
        if "unevaluatedItems" in s:
            ue = s["unevaluatedItems"]
            has_items = ("items" in s and (self.draft >= 2020 or not isinstance(s["items"], list))) or (
                "additionalItems" in s and isinstance(s.get("items"), list)
            )
            if ue is not True and not has_items:
                if self._dynamic_subtree(s):
                    self.refuse(
                        "unevaluatedItems",
                        ptr + "/unevaluatedItems",
                        "only supported where the evaluated items are static",
                    )
                n_eval, all_eval = self._static_prefix(ctx, 0)
                if not all_eval:
                    flat.arr_owners.append(
                        ([_Ctx(True, ptr, ctx.resolver)] * n_eval, ctx.child(ue, "unevaluatedItems"))
                    )
        # array item rules of this schema object
        if self.draft >= 2020:
            if "prefixItems" in s or "items" in s:
                pre = [ctx.child(x, "prefixItems", i) for i, x in enumerate(s.get("prefixItems", []) or [])]
                rest = ctx.child(s["items"], "items") if "items" in s else None
                flat.arr_owners.append((pre, rest))
        elif "items" in s:
            it = s["items"]
            if isinstance(it, list):
                pre = [ctx.child(x, "items", i) for i, x in enumerate(it)]
                rest = ctx.child(s["additionalItems"], "additionalItems") if "additionalItems" in s else None
                flat.arr_owners.append((pre, rest))
            else:
                flat.arr_owners.append(([], ctx.child(it, "items")))

    def _dynamic_subtree(self, s: dict, depth: int = 0) -> bool:
        if not isinstance(s, dict) or depth > 8:
            return depth > 8
        for k in ("anyOf", "oneOf", "if", "then", "else", "not", "dependentSchemas", "dependencies", "contains", "$dynamicRef", "$recursiveRef"):
            if k in s:
                return True
        for sub in s.get("allOf", []) or []:
            if self._dynamic_subtree(sub, depth + 1):
                return True
        if "$ref" in s and isinstance(s["$ref"], str):
            try:
                t = self.validator._resolver.lookup(s["$ref"]).contents
            except Exception as e:
                from constrained_spec.errors import RefRetrievalError
                from constrained_spec.grammar.schema_refs import ref_error

                err = ref_error(e, s["$ref"])
                if isinstance(err, RefRetrievalError):
                    raise err from None
                return True
            if self._dynamic_subtree(t, depth + 1):
                return True
        return False

    def _static_names(self, ctx: _Ctx, depth: int):
        names: set = set()
        pats: list = []
        s = ctx.schema
        if not isinstance(s, dict) or depth > 8:
            return names, pats
        names |= set(s.get("properties", {}) or {})
        pats += [(p, ctx.child(sub, "patternProperties", p)) for p, sub in (s.get("patternProperties") or {}).items()]
        if "additionalProperties" in s and depth > 0:
            pats.append((".*", ctx.child(True)))
        for i, sub in enumerate(s.get("allOf", []) or []):
            n, p = self._static_names(ctx.child(sub, "allOf", i), depth + 1)
            names |= n
            pats += p
        if "$ref" in s and isinstance(s["$ref"], str):
            t = self.resolve_ref(ctx, s["$ref"])
            n, p = self._static_names(t, depth + 1)
            names |= n
            pats += p
        # the patterns found deeper only widen the set of evaluated names: but their
        # schemas must not constrain here; use True schemas
        return names, [(p, _Ctx(True, c.ptr, c.resolver)) for p, c in pats]

    # keyword handlers -------------------------------------------------------

    def _kw_type(self, f, ctx, v, ptr, depth):
        ts = {v} if isinstance(v, str) else set(v)
        if "number" in ts:
            ts.add("integer")
        f.types = ts if f.types is None else _intersect_types(f.types, ts)

    def _kw_enum(self, f, ctx, v, ptr, depth):
        self._set_enum(f, list(v))

    def _kw_const(self, f, ctx, v, ptr, depth):
        self._set_enum(f, [v])

    def _set_enum(self, f, values):
        if f.enum is None:
            f.enum = values
        else:
            keys = {_json_key(x) for x in values}
            f.enum = [x for x in f.enum if _json_key(x) in keys]

    def _kw_allOf(self, f, ctx, v, ptr, depth):
        for i, sub in enumerate(v):
            self.absorb(f, ctx.child(sub, "allOf", i), True, depth + 1)

    def _kw_anyOf(self, f, ctx, v, ptr, depth):
        f.groups.append(("anyOf", [[("ctx", ctx.child(sub, "anyOf", i))] for i, sub in enumerate(v)], ptr))

    def _kw_oneOf(self, f, ctx, v, ptr, depth):
        f.groups.append(("oneOf", [[("ctx", ctx.child(sub, "oneOf", i))] for i, sub in enumerate(v)], ptr))

    def _kw_not(self, f, ctx, v, ptr, depth):
        self.absorb(f, ctx.child(v, "not"), False, depth + 1)

    def _kw_if(self, f, ctx, v, ptr, depth):
        s = ctx.schema
        if "then" not in s and "else" not in s:
            return
        c_if = ctx.child(v, "if")
        c_then = ctx.child(s.get("then", True), "then")
        c_else = ctx.child(s.get("else", True), "else")
        branches = [[("ctx", c_if), ("ctx", c_then)], [("not", c_if), ("ctx", c_else)]]
        f.groups.append(("if", branches, ptr))

    # numbers
    def _kw_minimum(self, f, ctx, v, ptr, depth):
        strict = self.draft == 4 and ctx.schema.get("exclusiveMinimum") is True
        self._lower(f, _dec(v), strict)

    def _kw_maximum(self, f, ctx, v, ptr, depth):
        strict = self.draft == 4 and ctx.schema.get("exclusiveMaximum") is True
        self._upper(f, _dec(v), strict)

    def _kw_exclusiveMinimum(self, f, ctx, v, ptr, depth):
        if isinstance(v, bool):
            return
        self._lower(f, _dec(v), True)

    def _kw_exclusiveMaximum(self, f, ctx, v, ptr, depth):
        if isinstance(v, bool):
            return
        self._upper(f, _dec(v), True)

    def _lower(self, f, d, strict):
        if f.lo is None or d > f.lo or (d == f.lo and strict):
            f.lo, f.lo_strict = d, strict

    def _upper(self, f, d, strict):
        if f.hi is None or d < f.hi or (d == f.hi and strict):
            f.hi, f.hi_strict = d, strict

    def _kw_multipleOf(self, f, ctx, v, ptr, depth):
        f.multiple_of.append((_dec(v), ptr))

    # strings
    def _kw_minLength(self, f, ctx, v, ptr, depth):
        f.min_len = max(f.min_len, int(v))

    def _kw_maxLength(self, f, ctx, v, ptr, depth):
        f.max_len = int(v) if f.max_len is None else min(f.max_len, int(v))

    def _kw_pattern(self, f, ctx, v, ptr, depth):
        self.check_pattern(v, ptr)
        if (v, "pattern") not in [(p, k) for p, _, k in f.patterns]:
            f.patterns.append((v, ptr, "pattern"))

    def _kw_format(self, f, ctx, v, ptr, depth):
        p = format_pattern(v)
        if p is None:
            if is_spec_format(v):
                self.unsupported(
                    "format", ptr, f"format {v!r} is defined by JSON Schema but cannot be enforced by a regex"
                )
            elif self.opts.unknown_formats == "annotation":
                # not a format the specification defines: validators ignore it, and so do we
                self.ignored_formats[ptr or "#"] = v
            else:
                self.unsupported("format", ptr, f"format {v!r} is not supported")
            return
        if (p, "format") not in [(q, k) for q, _, k in f.patterns]:
            f.patterns.append((p, ptr, "format"))

    def check_pattern(self, p, ptr):
        try:
            node = ecma.parse(p)
            ecma.anchored_branches(node)
        except ecma.PatternError as e:
            self.refuse("pattern" if not ptr.endswith("patternProperties") else "patternProperties", ptr, str(e))

    # arrays
    def _static_prefix(self, ctx: _Ctx, depth: int):
        """(number of leading items evaluated, whether all items are evaluated) by the
        static applicators (own keywords, allOf, $ref) of a schema object."""
        s = ctx.schema
        if not isinstance(s, dict) or depth > 8:
            return 0, False
        n = 0
        all_eval = False
        if self.draft >= 2020:
            n = len(s.get("prefixItems", []) or [])
            all_eval = "items" in s
        elif "items" in s:
            if isinstance(s["items"], list):
                n = len(s["items"])
                all_eval = "additionalItems" in s
            else:
                all_eval = True
        if "unevaluatedItems" in s and depth > 0:
            all_eval = True
        for i, sub in enumerate(s.get("allOf", []) or []):
            k, a = self._static_prefix(ctx.child(sub, "allOf", i), depth + 1)
            n = max(n, k)
            all_eval = all_eval or a
        if "$ref" in s and isinstance(s["$ref"], str):
            k, a = self._static_prefix(self.resolve_ref(ctx, s["$ref"]), depth + 1)
            n = max(n, k)
            all_eval = all_eval or a
        return n, all_eval

    def _kw_minItems(self, f, ctx, v, ptr, depth):
        f.min_items = max(f.min_items, int(v))

    def _kw_maxItems(self, f, ctx, v, ptr, depth):
        f.max_items = int(v) if f.max_items is None else min(f.max_items, int(v))

    def _kw_uniqueItems(self, f, ctx, v, ptr, depth):
        if v:
            f.unique = ptr

    def _kw_contains(self, f, ctx, v, ptr, depth):
        s = ctx.schema
        mn = s.get("minContains", 1) if self.draft >= 2019 else 1
        mx = s.get("maxContains") if self.draft >= 2019 else None
        f.contains.append((ctx.child(v, "contains"), int(mn), mx, ptr))

    # objects
    def _kw_properties(self, f, ctx, v, ptr, depth):
        for name, sub in v.items():
            f.props.setdefault(name, []).append(ctx.child(sub, "properties", name))

    def _kw_required(self, f, ctx, v, ptr, depth):
        if isinstance(v, list):
            for n in v:
                if n not in f.required:
                    f.required.append(n)

    def _kw_propertyNames(self, f, ctx, v, ptr, depth):
        f.property_names.append(ctx.child(v, "propertyNames"))

    def _kw_minProperties(self, f, ctx, v, ptr, depth):
        if int(v) > f.min_props:
            f.min_props_ptr = ptr
        f.min_props = max(f.min_props, int(v))

    def _kw_maxProperties(self, f, ctx, v, ptr, depth):
        f.max_props = int(v) if f.max_props is None else min(f.max_props, int(v))

    def _kw_dependentRequired(self, f, ctx, v, ptr, depth):
        for a, bs in v.items():
            self._dep(f, a, [("require", [a] + list(bs))], ptr)

    def _kw_dependentSchemas(self, f, ctx, v, ptr, depth):
        for a, sub in v.items():
            self._dep(f, a, [("require", [a]), ("ctx", ctx.child(sub, "dependentSchemas", a))], ptr)

    def _kw_dependencies(self, f, ctx, v, ptr, depth):
        for a, sub in v.items():
            if isinstance(sub, list):
                self._dep(f, a, [("require", [a] + list(sub))], ptr)
            else:
                self._dep(f, a, [("require", [a]), ("ctx", ctx.child(sub, "dependencies", a))], ptr)

    def _dep(self, f, a, present_actions, ptr):
        f.groups.append(("dependency", [[("forbid", a)], present_actions], ptr))

    # -- compiling -----------------------------------------------------------

    def compile(self, items) -> Optional[str]:
        """Compile the conjunction of a list of (ctx, positive) pairs."""
        self.tick()
        flat = _Flat()
        for ctx, pos in items:
            self.absorb(flat, ctx, pos)
        return self.compile_flat(flat)

    def compile_ctx(self, ctxs: list) -> Optional[str]:
        return self.compile([(c, True) for c in ctxs])

    def apply_action(self, flat: _Flat, action) -> None:
        kind, arg = action
        if kind == "ctx":
            self.absorb(flat, arg, True)
        elif kind == "not":
            self.absorb(flat, arg, False)
        elif kind == "forbid":
            flat.forbidden.add(arg)
        elif kind == "types":
            pass
        if kind in ("forbid", "require", "types"):
            flat.constrained = True
        if kind == "require":
            for n in arg:
                if n not in flat.required:
                    flat.required.append(n)
        elif kind == "types":
            flat.types = set(arg) if flat.types is None else _intersect_types(flat.types, set(arg))

    def compile_flat(self, flat: _Flat) -> Optional[str]:
        return self.check_size(_alt(self.flat_parts(flat)))

    def flat_parts(self, flat: _Flat) -> list:
        """Alternatives (one per JSON type and branch, deduplicated) of a flat schema."""
        self.tick()
        if flat.groups:
            n_combos = 1
            for _, branches, _ in flat.groups:
                n_combos *= max(1, len(branches))
            if n_combos > 4096:
                raise CompileLimitError(
                    f"anyOf/oneOf/dependency combinations ({n_combos}) exceed the limit of 4096"
                )
            kind, branches, ptr = flat.groups[0]
            rest = flat.copy()
            rest.groups = flat.groups[1:]
            if kind == "oneOf":
                branches = self.one_of_branches(branches, ptr)
            outs = []
            for bi, br in enumerate(branches):
                f2 = rest.copy()
                try:
                    for act in br:
                        self.apply_action(f2, act)
                    parts = self.flat_parts(f2)
                except UnsupportedKeywordError as e:
                    if kind == "if" and bi == 1 and e.keyword == "not":
                        continue  # dropping the 'else' side is a sound restriction
                    raise
                for r in parts:
                    if r not in outs:
                        outs.append(r)
            self.check_size("".join(outs))
            return outs
        # recursion accounting
        for key in set(flat.refs):
            self.active[key] = self.active.get(key, 0) + 1
        try:
            over = [k for k in set(flat.refs) if self.active[k] > self.opts.max_recursion_depth + 1]
            for k in set(flat.refs):
                if self.active[k] > 1:
                    self.max_seen_depth = max(self.max_seen_depth, min(self.active[k] - 1, self.opts.max_recursion_depth))
            if over:
                self.max_seen_depth = max(self.max_seen_depth, self.opts.max_recursion_depth)
                self.reducible = True
                return []
            parts = self.compile_leaf(flat)
            self.check_size("".join(parts))
            return parts
        finally:
            for key in set(flat.refs):
                self.active[key] -= 1

    # -- oneOf -------------------------------------------------------------

    def one_of_branches(self, branches: list, ptr: str) -> list:
        """Make the branches of a oneOf pairwise disjoint by restricting each one: drop the
        types it cannot be told apart on, forbid/require discriminating properties, filter
        finite branches exactly.  Every value of restricted branch i fails every branch j."""
        ctxs = [b[0][1] for b in branches]
        flats = []
        for c in ctxs:
            f = _Flat()
            try:
                self.absorb(f, c, True)
            except UnsupportedKeywordError:
                f = None
            flats.append(f)
        out = []
        kept_any = False
        for i, br in enumerate(branches):
            acts = list(br)
            fi = flats[i]
            if fi is None:
                out.append(acts)
                continue
            if fi.enum is not None:
                acts += [("not", ctxs[j]) for j in range(len(ctxs)) if j != i]
                out.append(acts)
                kept_any = True
                continue
            types_i = set(_ALL_TYPES) if fi.types is None else set(fi.types)
            base = [t for t in types_i if not (t == "integer" and "number" in types_i)]
            keep = set()
            extra: list = []
            for t in base:
                acts_t: list = []
                ok = True
                for j, fj in enumerate(flats):
                    if j == i:
                        continue
                    res = None if fj is None else self._exclude(t, fi, fj, ctxs[i], ctxs[j])
                    if res is None:
                        ok = False
                        break
                    acts_t += res
                if ok:
                    keep.add(t)
                    if t == "number":
                        keep.add("integer")
                    extra += acts_t
            if keep:
                kept_any = True
            if keep != types_i:
                acts.append(("types", keep))
            acts += extra
            out.append(acts)
        if not kept_any:
            self.unsupported("oneOf", ptr, "the branches cannot be told apart (oneOf is enforced for disjoint branches only)")
            return branches
        return out

    def _exclude(self, t: str, fi: _Flat, fj: _Flat, ci: _Ctx, cj: _Ctx):
        """Actions restricting branch i so that its values of type t fail branch j, or None."""
        if cj.schema is False or fj.types == set():
            return []
        tj = set(_ALL_TYPES) if fj.types is None else fj.types
        if t == "number":
            if "number" not in tj and "integer" not in tj:
                return []
        elif t == "integer":
            if "integer" not in tj:
                return []
        elif t not in tj:
            return []
        if fj.enum is not None:
            if not any(_type_of(v) == t or (t == "number" and _type_of(v) == "integer") for v in fj.enum):
                return []
            if not any(self.valid(ci, v) for v in fj.enum):
                return []
            return None
        if t in ("integer", "number", "string", "array"):
            return [] if self._disjoint_type(t, fi, fj, 0) else None
        if t == "object":
            for p in fi.required:
                if self._forbids(fj, p):
                    return []
            for p in fi.required:
                if p in fj.props and p in fi.props and self._props_disjoint(fi, fj, p):
                    return []
            for p in fj.required:
                if p not in fi.required:
                    return [("forbid", p)]
            for p in fi.props:
                if p in fj.props and self._props_disjoint(fi, fj, p):
                    return [("require", [p])]
            for p in fi.props:
                if self._forbids(fj, p) and not self._forbids(fi, p):
                    return [("require", [p])]
            if self._disjoint_type(t, fi, fj, 0):
                return []
            return None
        return None

    def _props_disjoint(self, fa: _Flat, fb: _Flat, p: str) -> bool:
        if len(fa.props[p]) != 1 or len(fb.props[p]) != 1:
            return False
        ca, cb = fa.props[p][0], fb.props[p][0]
        if isinstance(ca, _NegCtx) or isinstance(cb, _NegCtx):
            return False
        x, y = _Flat(), _Flat()
        try:
            self.absorb(x, ca)
            self.absorb(y, cb)
        except UnsupportedKeywordError:
            return False
        return self.disjoint((ca, x), (cb, y), 1)

    def disjoint(self, a, b, depth) -> bool:
        ca, fa = a
        cb, fb = b
        if fa is None or fb is None:
            return False
        if ca.schema is False or cb.schema is False or fa.types == set() or fb.types == set():
            return True
        # finite sets: check each value against the other schema
        for (_cx, fx), (cy, _fy) in (((ca, fa), (cb, fb)), ((cb, fb), (ca, fa))):
            if fx.enum is not None:
                if not any(self.valid_all(fx.sources, v) and self.valid(cy, v) for v in fx.enum):
                    return True
        ta = fa.types if fa.types is not None else set(_ALL_TYPES)
        tb = fb.types if fb.types is not None else set(_ALL_TYPES)
        shared = _intersect_types(ta, tb)
        if not shared:
            return True
        for t in shared:
            if not self._disjoint_type(t, fa, fb, depth):
                return False
        return True

    def _disjoint_type(self, t, fa, fb, depth) -> bool:
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
                    if _first_chars_disjoint(pa, pb):
                        return True
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
            return False
        if t == "object":
            for x, y in ((fa, fb), (fb, fa)):
                for p in x.required:
                    if self._forbids(y, p):
                        return True
                    if p in y.required and p in x.props and p in y.props and depth < 3:
                        fx = _Flat()
                        fy = _Flat()
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

    def _forbids(self, f: _Flat, name: str) -> bool:
        for c in f.props.get(name, []):
            if c.schema is False and not isinstance(c, _NegCtx):
                return True
        for o in f.owners:
            if name in o.names:
                continue
            if any(re.search(p, name) for p, _ in o.patterns if _py_pattern_ok(p)):
                continue
            if o.ap is not None and o.ap.schema is False:
                return True
        return False

    # -- leaf ----------------------------------------------------------------

    def compile_leaf(self, flat: _Flat) -> list:
        if not flat.constrained and not flat.nots:
            return [self.any_value()]
        types = set(_ALL_TYPES) if flat.types is None else set(flat.types)
        # 'not' subschemas
        for nctx in flat.nots:
            self.apply_not(flat, nctx, types)
        if flat.enum is not None:
            r = self.compile_enum(flat)
            return [] if r is None else [r]
        excluded = [v for _, vals in getattr(flat, "excluded", []) for v in vals]
        exb = [v for v in excluded if isinstance(v, bool)]  # 1 == True in Python: compare booleans only
        if excluded:
            ex_types = {_type_of(v) for v in excluded}
            if True in exb and False in exb:
                types.discard("boolean")
            for t in ("object", "array"):
                if t in ex_types and t in types:
                    self.unsupported("not", getattr(flat, "excluded")[0][0].ptr, f"excluding {t} constants is not supported")
            if ex_types & {"integer", "number"} and types & {"integer", "number"}:
                self.unsupported("not", getattr(flat, "excluded")[0][0].ptr, "excluding numeric constants is not supported")
            if None in excluded:
                types.discard("null")
        if not types:
            return []
        out = []
        if "object" in types:
            out.append(self.compile_object(flat))
        if "array" in types:
            out.append(self.compile_array(flat))
        if "string" in types:
            out.append(self.compile_string(flat))
        if "number" in types:
            out.append(self.compile_number(flat, integer=False))
        elif "integer" in types:
            out.append(self.compile_number(flat, integer=True))
        if "boolean" in types:
            out.append("false" if True in exb else "true" if False in exb else "(true|false)")
        if "null" in types:
            out.append("null")
        return [r for r in out if r is not None]

    def apply_not(self, flat: _Flat, nctx: _Ctx, types: set) -> None:
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
        nf = _Flat()
        try:
            self.absorb(nf, nctx, True)
        except UnsupportedKeywordError:
            nf = None
        if nf is not None:
            keys = {k for k in s if k not in _IGNORED} if isinstance(s, dict) else set()
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
                return
            # not {enum/const} over finite types only
            if keys and keys <= {"enum", "const", "type"} and nf.enum is not None:
                finite = {"boolean", "null"}
                if types <= finite:
                    vals = [v for v in ([True, False] if "boolean" in types else []) + ([None] if "null" in types else [])]
                    flat.enum = vals
                    return
                # strings/numbers/objects: values not in a finite set
                flat.excluded = getattr(flat, "excluded", []) + [(nctx, nf.enum)]
                return
            # not {properties: {p: S}, required: [p]?}: p present with a value failing S
            if (
                keys
                and keys <= {"properties", "required", "type"}
                and isinstance(s.get("properties"), dict)
                and len(s["properties"]) == 1
                and set(s.get("required", [])) <= set(s["properties"])
                and s.get("type", "object") == "object"
            ):
                (p, sub), = s["properties"].items()
                if p not in flat.required:
                    flat.required.append(p)
                flat.props.setdefault(p, []).append(_NegCtx(sub, nctx.ptr + "/properties/" + p, nctx.resolver))
                types.intersection_update({"object"})
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
        self.unsupported("not", nctx.ptr, "only 'not' of types, constants and required properties is supported")

    def compile_enum(self, flat: _Flat) -> Optional[str]:
        outs = []
        size = 0
        # the validator oracle ignores `format` (an annotation by default): keep only the
        # strings that match the compiler's own (restricting) format patterns
        formats = [p for p, _, k in flat.patterns if k == "format"]
        for v in flat.enum:
            self.tick()
            if not self.valid_all(flat.sources, v):
                continue
            if formats and isinstance(v, str) and not all(_py_fullmatch(p, v) for p in formats):
                continue
            r = self.value_regex(v)
            size += len(r) + 1
            if size > self.opts.max_regex_chars:
                self.check_size("x" * size)
            outs.append(r)
        return _alt(outs)

    def value_regex(self, v: Any) -> str:
        ws = self.ws
        if v is None:
            return "null"
        if v is True:
            return "true"
        if v is False:
            return "false"
        if isinstance(v, int):
            return ecma.escape_literal(str(v))
        if isinstance(v, float):
            if math.isfinite(v):
                return ecma.escape_literal(json.dumps(v))
            raise SchemaError("non-finite number in enum/const")
        if isinstance(v, str):
            return '"' + ecma.literal(v) + '"'
        if isinstance(v, list):
            if not v:
                return "\\[" + ws + "\\]"
            inner = (ws + "," + ws).join(self.value_regex(x) for x in v)
            return "\\[" + ws + inner + ws + "\\]"
        if isinstance(v, dict):
            if not v:
                return "\\{" + ws + "\\}"
            inner = (ws + "," + ws).join(
                '"' + ecma.literal(k) + '"' + ws + ":" + ws + self.value_regex(x) for k, x in v.items()
            )
            return "\\{" + ws + inner + ws + "\\}"
        raise SchemaError(f"unexpected value in enum/const: {v!r}")

    # -- free-form values ------------------------------------------------------

    def any_value(self, depth: Optional[int] = None) -> str:
        d = self.opts.any_value_depth if depth is None else depth
        if d > 0:
            self.reducible = True
        if d in self._any_cache:
            return self._any_cache[d]
        ws = self.ws
        string = '"([^"\\\\\\x00-\\x1f]|\\\\(["\\\\/bfnrt]|u[0-9a-fA-F]{4}))*"'
        number = "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?"
        scalar = "|".join([string, number, "true", "false", "null"])
        if d <= 0:
            r = "(" + scalar + ")"
        else:
            inner = self.any_value(d - 1)
            sep = ws + "," + ws
            arr = "\\[" + ws + "(" + inner + "(" + sep + inner + ")*)?" + ws + "\\]"
            kv = string + ws + ":" + ws + inner
            obj = "\\{" + ws + "(" + kv + "(" + sep + kv + ")*)?" + ws + "\\}"
            r = "(" + scalar + "|" + arr + "|" + obj + ")"
        self._any_cache[d] = r
        return r

    # -- numbers -----------------------------------------------------------------

    def compile_number(self, flat: _Flat, integer: bool) -> Optional[str]:
        lo, lo_s, hi, hi_s = flat.lo, flat.lo_strict, flat.hi, flat.hi_strict
        big = Decimal(10) ** 40
        if lo is not None and lo < -big:
            lo, lo_s = -big, False
        if hi is not None and hi > big:
            hi, hi_s = big, False
        mults = [m for m, _ in flat.multiple_of]
        if any(m <= 0 for m in mults):
            return _EMPTY
        if integer or (mults and all(m == m.to_integral_value() for m in mults)):
            # integers (a number that is a multiple of an integer is an integer)
            ilo, ihi = int_bounds(lo, lo_s, hi, hi_s)
            k = 1
            for m in mults:
                fr = Fraction(m)
                k = k * fr.numerator // math.gcd(k, fr.numerator)
            if k == 1:
                return integer_range(ilo, ihi)
            return self.int_multiples(k, ilo, ihi, flat.multiple_of[0][1])
        if getattr(flat, "non_integer", False):
            self.unsupported("not", "", "'not: {type: integer}' on numbers is not supported")
        q: Optional[int] = None
        frac_set = None
        for m, ptr in flat.multiple_of:
            fr = Fraction(m)
            if fr.numerator == 1 and _is_pow10(fr.denominator):
                qq = len(str(fr.denominator)) - 1
                q = qq if q is None else min(q, qq)
            elif fr.denominator > 1 and (1 / fr).denominator == 1 and (1 / fr).numerator <= 100:
                # m divides 1: fractions j*m, j < 1/m
                n = int(1 / fr)
                fs = {_frac_digits(fr * j) for j in range(n)}
                frac_set = fs if frac_set is None else frac_set & fs
            else:
                self.unsupported("multipleOf", ptr, f"multipleOf {m} is only supported for integers and divisors of 1")
        if lo is None and hi is None and q is None and frac_set is None:
            return "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?"
        if frac_set is not None:
            return self.number_frac_set(lo, lo_s, hi, hi_s, frac_set, q)
        # exclusive bounds: keep enough headroom for binary floating point
        for b, strict in ((lo, lo_s), (hi, hi_s)):
            if strict and b is not None:
                digits = len(str(abs(int(b))))
                cap = max(1, 15 - digits)
                q = cap if q is None else min(q, cap)
        return decimal_range(lo, lo_s, hi, hi_s, q)

    def number_frac_set(self, lo, lo_s, hi, hi_s, fracs, q):
        """Numbers whose fractional part is one of ``fracs`` (digit strings) in the range."""
        fr_alts = sorted(f for f in fracs if f != "")
        if q is not None:
            fr_alts = [f for f in fr_alts if len(f) <= q]
        frac_re = "(\\.(" + "|".join(fr_alts) + "))?" if fr_alts else ""
        if lo is None and hi is None:
            return "-?(0|[1-9][0-9]*)" + frac_re
        # integral bounds only
        if (lo is not None and lo != lo.to_integral_value()) or (hi is not None and hi != hi.to_integral_value()):
            self.unsupported("multipleOf", "", "multipleOf with fractional bounds")
            return _EMPTY
        # x = I + f, f in fracs (value in [0,1))
        parts = []
        ilo = int(lo) if lo is not None else None
        ihi = int(hi) if hi is not None else None
        # non-negative numbers: I >= 0 ; negative: -(I + f)
        # build via integer ranges on the integer part, handling the ends exactly
        def seg(a, b, fr):
            r = integer_range(a, b)
            if r is None:
                return None
            return _cat(_group(r), fr)

        nonzero = "(\\.(" + "|".join(fr_alts) + "))" if fr_alts else None
        # interior: integer parts strictly inside the range -> any fraction
        # (we only emit non-negative integer parts with fractions; negative numbers
        #  with fractions are emitted as '-' + positive)
        # positive side
        pos_lo = 0 if ilo is None or ilo < 0 else ilo
        if ihi is None or ihi >= 0:
            # integer values
            a = pos_lo + (1 if (ilo is not None and ilo == pos_lo and lo_s) else 0)
            b = ihi - (1 if (ihi is not None and hi_s) else 0) if ihi is not None else None
            r = integer_range(a, b)
            if r is not None:
                parts.append(r)
            # values with a non-zero fraction: I in [pos_lo, ihi-1]
            if nonzero:
                r2 = integer_range(pos_lo, None if ihi is None else ihi - 1)
                if r2 is not None and (ihi is None or ihi - 1 >= pos_lo):
                    parts.append(_cat(_group(r2), nonzero))
        if ilo is None or ilo < 0:
            # negative values -y, y > 0, y <= -ilo (strict if lo_s), y >= -ihi if ihi < 0
            ya = 1 if (ihi is None or ihi >= 0) else -ihi + (1 if hi_s else 0)
            yb = None if ilo is None else -ilo - (1 if lo_s else 0)
            r = integer_range(ya, yb)
            if r is not None and ya >= 1:
                parts.append("-" + _group(r))
            if nonzero:
                ya2 = 0 if (ihi is None or ihi >= 0) else -ihi
                yb2 = None if ilo is None else -ilo - 1
                r2 = integer_range(ya2, yb2)
                if r2 is not None and (yb2 is None or yb2 >= ya2):
                    parts.append("-" + _cat(_group(r2), nonzero))
        return _alt(parts)

    def int_multiples(self, k: int, ilo, ihi, ptr) -> Optional[str]:
        if ilo is not None and ihi is not None:
            if ilo > ihi:
                return _EMPTY
            first = -(-ilo // k) * k
            count = 0 if first > ihi else (ihi - first) // k + 1
            if count <= 256:
                vals = [str(first + i * k) for i in range(count)]
                return _alt(vals) if vals else _EMPTY
        # k = 2^a 5^b: the last t digits decide
        a = b = 0
        kk = k
        while kk % 2 == 0:
            kk //= 2
            a += 1
        while kk % 5 == 0:
            kk //= 5
            b += 1
        if kk == 1 and (ilo is None or ilo in (0, 1) or ilo < -(10**18)) and (ihi is None):
            t = max(a, b)
            ends = sorted({str(j * k % 10**t).rjust(t, "0") for j in range(10**t // math.gcd(k, 10**t) + 1)})
            # small numbers (fewer than t digits) that are multiples
            small = [str(j) for j in range(0, 10 ** (t - 1)) if j % k == 0] if t > 1 else ["0"]
            tail = "(" + "|".join(ends) + ")"
            pos_small = [s for s in small if s != "0"]
            body_pos = "[1-9][0-9]*" + tail if t >= 1 else "[1-9][0-9]*"
            pos = _alt(pos_small + [body_pos, *([e.lstrip("0") for e in ends if e.lstrip("0") and len(e.lstrip("0")) == t and int(e) % k == 0])])
            parts = []
            if ilo is None or ilo <= 0:
                parts.append("0")
            parts.append(pos)
            if ilo is None:
                parts.append("-" + pos)
            return _alt(parts)
        self.unsupported("multipleOf", ptr, f"multipleOf {k} with this range is not supported")
        return integer_range(ilo, ihi)

    # -- strings -------------------------------------------------------------------

    def compile_string(self, flat: _Flat) -> Optional[str]:
        lo, hi = flat.min_len, flat.max_len
        if hi is not None and hi < lo:
            return _EMPTY
        excluded = [(c, [v for v in vals if isinstance(v, str)]) for c, vals in getattr(flat, "excluded", [])]
        excluded = [(c, vals) for c, vals in excluded if vals]
        pats = flat.patterns
        if excluded:
            if pats:
                self.unsupported("not", excluded[0][0].ptr, "excluding constants from patterned strings is not supported")
            else:
                strs = set()
                for _, vals in excluded:
                    strs |= {v for v in vals if isinstance(v, str)}
                body = self.content_excluding(sorted(strs), lo, hi)
                return None if body is None else '"' + body + '"'
        if not pats:
            return '"' + _rep(self.str_char, lo, hi) + '"'
        if len(pats) > 1:
            body = self.intersect_patterns(pats, lo, hi)
            if body is not False:
                return _EMPTY if body is None else '"' + body + '"'
            kws = [k for _, _, k in pats]
            kw = "pattern" if "pattern" in kws else "format"
            self.unsupported(kw, pats[1][1], "several patterns/formats on one string need a regex intersection")
            pats = pats[:1]
        p, ptr, kw = pats[0]
        try:
            body = self.pattern_content(p, lo, hi, ptr)
        except ecma.PatternError as e:
            self.refuse(kw, ptr, str(e))
        if body is None:
            return _EMPTY
        return '"' + body + '"'

    def intersect_patterns(self, pats, lo, hi):
        """Content regex for strings matching all patterns, where all but one of them
        only fix a finite set of prefixes (``^(https?|file)://``) or are a finite set of
        whole strings.  Returns False when not possible, None when empty."""
        finite = []
        others = []
        for p, ptr, kw in pats:
            try:
                brs = ecma.anchored_branches(ecma.parse(p))
            except ecma.PatternError:
                return False
            words = []
            kind = None
            for b, sa, ea in brs:
                ws = _finite_strings(b, 32)
                if ws is None or not sa:
                    words = None
                    break
                k = "whole" if ea else "prefix"
                if kind not in (None, k):
                    words = None
                    break
                kind = k
                words += ws
            if words is None:
                others.append((p, ptr, kw))
            else:
                finite.append((kind, words, p))
        if len(others) > 1 or not finite:
            return False
        if others:
            onode = ecma.parse(others[0][0])
            anyrep = ("rep", ("set", ecma.ANY_RANGES), 0, None)
            alts = []
            for b, sa, ea in ecma.anchored_branches(onode):
                alts.append(("seq", ([] if sa else [anyrep]) + [b] + ([] if ea else [anyrep])))
            base = alts[0] if len(alts) == 1 else ("alt", alts)
        else:
            base = ("seq", [("rep", ("set", ecma.ANY_RANGES), 0, None)])
        # intersect the finite constraints one after the other
        outs = [("", base)]
        for kind, words, _p in finite:
            new = []
            for prefix, node in outs:
                for w in dict.fromkeys(words):
                    d = node
                    for ch in w:
                        d = _deriv(d, ord(ch))
                        if d is None:
                            break
                    if d is None:
                        continue
                    if kind == "whole":
                        if _nullable_node(d):
                            new.append((prefix + w, ("seq", [])))
                    else:
                        new.append((prefix + w, d))
            outs = new
            if len(outs) > 64:
                return False
        res = []
        for prefix, node in outs:
            full = ("seq", [("seq", [("set", ((ord(c), ord(c)),)) for c in prefix]), node])
            full = self.constrain_length(full, lo, hi, pats[0][1])
            if full is None:
                continue
            r = ecma.emit(full)
            if r is not None:
                res.append(r)
        return _alt(res)

    def pattern_content(self, pattern: str, lo: int, hi: Optional[int], ptr: str) -> Optional[str]:
        node = ecma.parse(pattern)
        anyrep = ("rep", ("set", ecma.ANY_RANGES), 0, None)
        outs = []
        for b, sa, ea in ecma.anchored_branches(node):
            b = _trim_unanchored(b, sa, ea)
            if b is None:
                # the pattern matches the empty string somewhere: every string qualifies
                b, sa, ea = ("seq", []), True, False
            if not sa and not ea and hi is not None:
                bmin, bmax = ecma.node_len(b)
                if bmax is not None and bmin >= lo and 0 <= hi - bmax <= 12:
                    # the match may sit anywhere: enumerate the prefix length
                    room = hi - bmax
                    for i in range(room + 1):
                        seq = ("seq", [("rep", anyrep[1], i, i), b, ("rep", anyrep[1], 0, room - i)])
                        r = ecma.emit(seq)
                        if r is not None:
                            outs.append(r)
                    continue
            items = ([] if sa else [anyrep]) + [b] + ([] if ea else [anyrep])
            seq = ("seq", items)
            seq = self.constrain_length(seq, lo, hi, ptr)
            if seq is None:
                continue
            r = ecma.emit(seq)
            if r is not None:
                outs.append(r)
        return _alt(outs)

    def constrain_length(self, seq, lo: int, hi: Optional[int], ptr: str):
        """Restrict a pattern node so that every match has lo <= length <= hi.

        Upper bounds shrink the node (a sub-language, so sound); lower bounds raise the
        counts of fixed-width repetitions.  Raises (or records) 'minLength'/'maxLength'
        when that is not possible."""
        mn, mx = ecma.node_len(seq)
        if mn >= lo and (hi is None or (mx is not None and mx <= hi)):
            return seq
        if hi is not None and mn > hi:
            return None
        if mx is not None and mx < lo:
            return None
        node = seq
        if hi is not None and (mx is None or mx > hi):
            node = _shrink(node, hi)
            if node is None:
                return None
        mn, mx = ecma.node_len(node)
        if mn < lo:
            node = _grow(node, lo)
            if node is None:
                self.unsupported("minLength", ptr, "pattern and minLength cannot be combined exactly")
                return seq
            mn, mx = ecma.node_len(node)
            if mn < lo:
                self.unsupported("minLength", ptr, "pattern and minLength cannot be combined exactly")
        if hi is not None and (mx is None or mx > hi):
            self.unsupported("maxLength", ptr, "pattern and maxLength cannot be combined exactly")
        return node

    def content_excluding(self, words: list, lo: int, hi: Optional[int], ranges=None) -> Optional[str]:
        """Canonical string content not equal to any of ``words`` (lengths in [lo, hi]),
        made of characters in ``ranges`` (all characters by default)."""
        universe = ecma.ANY_RANGES if ranges is None else ranges
        c = self.canon_char if ranges is None else ecma.emit_set(ranges)
        words = [w for w in words if all(ecma.contains(universe, ord(ch)) for ch in w)]
        trie: dict = {}
        for w in words:
            node = trie
            for ch in w:
                node = node.setdefault(ch, {})
            node[""] = {}
        if hi is not None and hi < 64 or lo > 0:
            # length limits and exclusions together: enumerate by trie depth is complex;
            # only allow when no excluded word fits the length window
            if not any(lo <= len(w) and (hi is None or len(w) <= hi) for w in words):
                return _rep(c, lo, hi)
            self.unsupported("not", "", "excluding strings together with length bounds is not supported")
            return _rep(c, lo, hi)

        def build(node, depth) -> str:
            # strings that, from this trie node on, are not a word
            self.tick()
            alts = []
            kids = [k for k in node if k != ""]
            other = ecma.subtract(universe, ecma.norm([(ord(k), ord(k)) for k in kids]))
            o = ecma.emit_set(other)
            if o is not None:
                alts.append(_group(o) + _group(c) + "*")
            for k in kids:
                sub = build(node[k], depth + 1)
                if sub is None:
                    continue
                alts.append(ecma.literal(k) + _group(sub) if sub else ecma.literal(k))
            body = "|".join(alts)
            if "" in node:
                # the word ends here: need at least one more character
                return "(" + body + ")" if alts else None
            return "(" + body + ")?" if alts else ""

        r = build(trie, 0)
        return r

    # -- arrays ------------------------------------------------------------------

    def _pos_ctxs(self, flat: _Flat, i: int) -> list:
        out = []
        for pre, rest in flat.arr_owners:
            if i < len(pre):
                out.append(pre[i])
            elif rest is not None:
                out.append(rest)
        return out

    def _rest_ctxs(self, flat: _Flat) -> list:
        return [rest for _, rest in flat.arr_owners if rest is not None]

    def compile_array(self, flat: _Flat) -> Optional[str]:
        ws = self.ws
        sep = ws + "," + ws
        m = flat.min_items
        M = flat.max_items
        if M is not None and M < m:
            return _EMPTY
        contains = [c for c in flat.contains if c[1] > 0]
        for _cctx, _mn, mx, ptr in flat.contains:
            if mx is not None:
                self.unsupported("maxContains", ptr.rsplit("/", 1)[0] + "/maxContains", "maxContains is not supported")
        n_contains = max([mn for _, mn, _, _ in contains], default=0)
        n_prefix = max([len(pre) for pre, _ in flat.arr_owners], default=0)
        if flat.unique:
            return self.unique_array(flat, max(m, n_contains), M)
        rest_ctxs = self._rest_ctxs(flat)
        rest = self.compile_ctx(rest_ctxs) if rest_ctxs else self.any_value()
        if contains and n_prefix == 0 and M is None and m <= n_contains:
            # X* C (X* C){k-1} X*  -- the k matching items anywhere
            cre = self.compile_ctx(rest_ctxs + [c for c, _, _, _ in contains])
            if cre is None:
                return _EMPTY
            c = _group(cre)
            if rest is None:
                body = c + _rep("(" + sep + c + ")", n_contains - 1, n_contains - 1)
            else:
                x = _group(rest)
                body = _rep("(" + x + sep + ")", 0, None) + c + _rep(
                    "(" + _rep("(" + sep + x + ")", 0, None) + sep + c + ")", n_contains - 1, n_contains - 1
                ) + _rep("(" + sep + x + ")", 0, None)
            return "\\[" + ws + body + ws + "\\]"
        m = max(m, n_contains)
        if M is not None and M < m:
            return _EMPTY
        positions = max(n_prefix, n_contains)
        elems: list = []
        for i in range(positions):
            if M is not None and i >= M:
                break
            ctxs = self._pos_ctxs(flat, i)
            if i < n_contains:
                ctxs += [c for c, _, _, _ in contains]
            elems.append(self.compile_ctx(ctxs) if ctxs else self.any_value())

        def tail(i: int) -> Optional[str]:
            if M is not None and i >= M:
                return ""
            if i < len(elems):
                e = elems[i]
                if e is None:
                    return "" if i >= m else None
                t = tail(i + 1)
                if t is None:
                    return "" if i >= m else None
                piece = (sep if i > 0 else "") + _group(e) + t
                return "(" + piece + ")?" if i >= m else piece
            # the rest
            need = max(0, m - i)
            most = None if M is None else M - i
            if rest is None:
                return "" if need == 0 else None
            if most == 0:
                return ""
            e = _group(rest)
            if most is not None and most > need:
                # bounded repetition is unrolled by the DFA builder: cap the count of heavy
                # elements (lowering maxItems is a sound restriction)
                cost = _expanded_size(e) + len(sep) + 1
                if cost * most > _UNROLL_BUDGET:
                    most = max(need, _UNROLL_BUDGET // cost, 1)
            if i == 0:
                inner_lo = max(0, need - 1)
                inner_hi = None if most is None else most - 1
                body = e + _rep("(" + sep + e + ")", inner_lo, inner_hi) if (inner_hi is None or inner_hi > 0) else e
                return body if need >= 1 else "(" + body + ")?"
            return _rep("(" + sep + e + ")", need, most)

        body = tail(0)
        if body is None:
            return _EMPTY
        return "\\[" + ws + body + ws + "\\]"

    def unique_array(self, flat: _Flat, m: int, M: Optional[int]) -> Optional[str]:
        ws = self.ws
        sep = ws + "," + ws
        if M is not None and M <= 1:
            f2 = flat.copy()
            f2.unique = None
            return self.compile_array(f2)
        # finite item domain -> strictly ordered subsequences of the domain
        n_prefix = max([len(pre) for pre, _ in flat.arr_owners], default=0)
        rest_ctxs = self._rest_ctxs(flat)
        if n_prefix == 0 and rest_ctxs and not flat.contains:
            itf = _Flat()
            for c in rest_ctxs:
                self.absorb(itf, c)
            values = None
            if itf.enum is not None and not itf.groups:
                values = [v for v in itf.enum if self.valid_all(itf.sources, v)]
            elif itf.types is not None and itf.types <= {"boolean", "null"} and not itf.groups:
                values = [v for v in ([True, False] if "boolean" in itf.types else []) + ([None] if "null" in itf.types else []) if self.valid_all(itf.sources, v)]
            if values is not None and len(values) <= 64:
                seen = set()
                vals = []
                for v in values:
                    k = _json_key(_norm_numbers(v))
                    if k not in seen:
                        seen.add(k)
                        vals.append(v)
                if m > len(vals):
                    return _EMPTY
                if m <= 1:
                    if M is not None and M < len(vals):
                        vals = vals[:M]
                    regs = [("opt", self.value_regex(v)) for v in vals]
                    body = _sequence(regs, sep, self)
                    if m == 1:
                        body = _strip_opt(body)
                    return "\\[" + ws + body + ws + "\\]"
        self.unsupported("uniqueItems", flat.unique, "uniqueItems is only enforced for finite item types or maxItems <= 1")
        f2 = flat.copy()
        f2.unique = None
        return self.compile_array(f2)

    # -- objects -----------------------------------------------------------------

    def compile_object(self, flat: _Flat) -> Optional[str]:
        ws = self.ws
        sep = ws + "," + ws
        owners = flat.owners
        required = list(flat.required)
        names = list(flat.props)
        for r in required:
            if r not in flat.props:
                names.append(r)
        if flat.property_names:
            pn_ok = {n: all(self.valid(c, n) for c in flat.property_names) for n in names}
        else:
            pn_ok = {n: True for n in names}
        items = []  # (kind, regex, name)
        n_req = 0
        for name in names:
            self.tick()
            forbidden = name in flat.forbidden or not pn_ok[name] or self._forbids(flat, name)
            is_req = name in required
            if forbidden:
                if is_req:
                    return _EMPTY
                continue
            ctxs = list(flat.props.get(name, []))
            for o in owners:
                matched = False
                for p, pc in o.patterns:
                    if _py_search(p, name):
                        ctxs.append(pc)
                        matched = True
                if name not in o.names and not matched and o.ap is not None:
                    ctxs.append(o.ap)
            if not ctxs:
                v = self.any_value()
            else:
                v = self.compile([(c, not isinstance(c, _NegCtx)) for c in ctxs])
            if v is None:
                if is_req:
                    return _EMPTY
                continue
            kv = '"' + ecma.literal(name) + '"' + ws + ":" + ws + _group(v)
            items.append(["req" if is_req else "opt", kv, name])
            n_req += is_req
        extras = self.object_extras(flat, [it[2] for it in items] + sorted(flat.forbidden), names)
        # minProperties / maxProperties
        n_opt = sum(1 for it in items if it[0] == "opt")
        if flat.max_props is not None:
            M = flat.max_props
            if n_req > M:
                return _EMPTY
            budget = M - n_req
            if n_opt > budget:
                kept = 0
                for it in items:
                    if it[0] == "opt":
                        if kept >= budget:
                            it[0] = "drop"
                        kept += 1
                items = [it for it in items if it[0] != "drop"]
                extras = []
                budget = 0
            else:
                budget -= n_opt
            # the budget is shared: give it to the first extra rule only
            extras = [(k, v, (min(c, budget) if c is not None else budget) if i == 0 else 0) for i, (k, v, c) in enumerate(extras)]
            extras = [e for e in extras if e[2] != 0]
        if flat.min_props > n_req:
            need = flat.min_props - n_req
            for it in items:
                if need <= 0:
                    break
                if it[0] == "opt":
                    it[0] = "req"
                    need -= 1
            plus_extra = False
            if need == 1 and len(extras) == 1:
                plus_extra = True  # one extra property is enough (duplicates still count one)
                need = 0
            if need > 0:
                self.unsupported(
                    "minProperties", getattr(flat, "min_props_ptr", ""),
                    "minProperties larger than the declared properties (extra properties may repeat a name)",
                )
        else:
            plus_extra = False
        if self.opts.linear_objects and n_req == 0 and len(items) > 1:
            items[0][0] = "req"  # a sound restriction that keeps the regex linear
        seq_items = [(it[0], it[1]) for it in items]
        for k, v, count in extras:
            e = k + ws + ":" + ws + _group(v)
            if plus_extra:
                more = None if count is None else count - 1
                seq_items.append(("req", _group(e) + _rep("(" + sep + _group(e) + ")", 0, more)))
            else:
                seq_items.append(("star", (e, count)))
        if self.opts.property_order == "any" and len(seq_items) <= self.opts.max_any_order_properties and all(
            k in ("req", "opt") for k, _ in seq_items
        ) and len(seq_items) > 1:
            body = self.any_order(seq_items, sep)
        else:
            body = _sequence(seq_items, sep, self)
            if n_req == 0 and len(items) > 1:
                self.reducible = True
            if body is not None and n_req == 0 and len(items) > 1 and len(body) > _LOCAL_OBJECT_CAP:
                # all-optional objects cost O(n log n) copies; past a size, require the
                # first property (a sound restriction) so that the regex stays linear
                seq_items[0] = ("req", seq_items[0][1])
                body = _sequence(seq_items, sep, self)
        if body is None:
            return _EMPTY
        return "\\{" + ws + body + ws + "\\}"

    def any_order(self, seq_items, sep):
        import itertools

        outs = []
        for perm in itertools.permutations(seq_items):
            r = _sequence(list(perm), sep, self)
            if r is not None:
                outs.append(r)
        return _alt(outs)

    def object_extras(self, flat: _Flat, declared: list, all_names: list):
        """Regexes (key, value, max_count) for properties beyond the declared ones."""
        owners = flat.owners
        explicit = [o for o in owners if o.patterns or o.ap is not None]
        if not explicit:
            # additionalProperties absent: the schema allows any extra property.  We only
            # generate extras for free-form objects (no declared properties) unless
            # additional_properties="spec"; not generating them is a sound restriction.
            if self.opts.additional_properties == "spec" or not all_names:
                owners = owners + [_Owner(set(), [], _Ctx(True, "", None), "")]
                explicit = owners[-1:]
            else:
                return []
        nontrivial = [o for o in owners if o.patterns or (o.ap is not None and o.ap.schema is not True)]
        if len(nontrivial) > 1:
            return []
        owner = nontrivial[0] if nontrivial else explicit[0]
        out = []
        pn_ctxs = flat.property_names
        # value schema for a pattern key: all pattern schemas (conservative when several)
        all_pat_ctxs = [pc for _, pc in owner.patterns]
        declared_set = set(declared) | set(all_names)
        for p, _pc in owner.patterns:
            if pn_ctxs:
                continue  # would need an intersection
            if _universal_pattern(p) or _line_pattern(p):
                key = self.content_excluding(sorted(declared_set), 0, None, _KEY_RANGES)
            elif any(_py_search(p, n) for n in declared_set):
                continue  # would need a set difference
            else:
                try:
                    key = ecma.to_content_regex(p, self.canon_char)
                except ecma.PatternError:
                    continue
            if key is None:
                continue
            v = self.compile_ctx(all_pat_ctxs)
            if v is None:
                continue
            out.append(('"' + key + '"', v, None))
        if owner.ap is not None and owner.ap.schema is not False:
            ctxs = [owner.ap] + all_pat_ctxs
            if pn_ctxs:
                pf = _Flat()
                for c in pn_ctxs:
                    self.absorb(pf, c)
                if pf.enum is not None and not pf.groups:
                    for n in pf.enum:
                        if isinstance(n, str) and n not in declared_set and self.valid_all(pf.sources, n):
                            ok = not any(_py_search(p, n) for p, _ in owner.patterns)
                            if ok:
                                v = self.compile_ctx([owner.ap])
                                if v is not None:
                                    out.append(('"' + ecma.literal(n) + '"', v, 1))
                    return out
                if any(all(self.valid(c, n) for c in pn_ctxs) for n in declared_set):
                    return out
                try:
                    key = self.compile_ctx(pn_ctxs)
                except UnsupportedKeywordError:
                    return out
                if key is None or not key.startswith('"'):
                    return out
                # keep only the string alternative
                ks = self._string_only(pn_ctxs)
                if ks is None:
                    return out
                v = self.compile_ctx(ctxs)
                if v is not None:
                    out.append((ks, v, None))
                return out
            key = self.content_excluding(sorted(declared_set), 0, None, _KEY_RANGES)
            if key is None:
                return out
            v = self.compile_ctx(ctxs)
            if v is not None:
                out.append(('"' + key + '"', v, None))
        return out

    def _string_only(self, ctxs) -> Optional[str]:
        f = _Flat()
        for c in ctxs:
            self.absorb(f, c)
        if f.groups or f.nots:
            return None
        if f.types is not None and "string" not in f.types:
            return None
        return self.compile_string(f)


# ---------------------------------------------------------------------------
# sequence construction (comma separated, some items optional)


def _shrink(node, limit: int):
    """A sub-language of node whose strings have at most ``limit`` code points (or None)."""
    kind = node[0]
    mn, mx = ecma.node_len(node)
    if mn > limit:
        return None
    if mx is not None and mx <= limit:
        return node
    if kind == "alt":
        bs = [x for x in (_shrink(b, limit) for b in node[1]) if x is not None]
        return ("alt", bs) if bs else None
    if kind == "seq":
        items = list(node[1])
        lens = [ecma.node_len(x) for x in items]
        budget = limit - sum(a for a, _ in lens)
        var = [i for i, (a, b) in enumerate(lens) if b is None or b > a]
        out = list(items)
        # bounded variable items that fit are kept; the rest share what is left evenly
        shares = {}
        remaining = budget
        todo = list(var)
        while todo:
            each = remaining // len(todo)
            fixed_now = [i for i in todo if lens[i][1] is not None and lens[i][1] - lens[i][0] <= each]
            if not fixed_now:
                for k, i in enumerate(todo):
                    shares[i] = each + (remaining - each * len(todo) if k == 0 else 0)
                break
            for i in fixed_now:
                shares[i] = lens[i][1] - lens[i][0]
                remaining -= shares[i]
                todo.remove(i)
        for i, extra in shares.items():
            sub = _shrink(items[i], lens[i][0] + extra)
            if sub is None:
                return None
            out[i] = sub
        return ("seq", out)
    if kind == "rep":
        body, a, b = node[1], node[2], node[3]
        bmn, bmx = ecma.node_len(body)
        if bmx is not None and bmn == bmx:
            if bmn == 0:
                return ("rep", body, a, a)
            c = limit // bmn
            if c < a:
                return None
            return ("rep", body, a, c if b is None else min(b, c))
        # variable-width body: keep as few copies as possible
        copies = max(a, 1)
        per = limit // copies
        sub = _shrink(body, per)
        if sub is None:
            return None if a > 0 else ("seq", [])
        return ("rep", sub, a, copies if b is None else min(b, copies))
    return node if (mx is not None and mx <= limit) else None


def _grow(node, need: int):
    """Raise the minimum length of node to ``need`` by raising fixed-width repetitions."""
    mn, mx = ecma.node_len(node)
    if mn >= need:
        return node
    if mx is not None and mx < need:
        return None
    kind = node[0]
    if kind == "rep":
        body, a, b = node[1], node[2], node[3]
        bmn, bmx = ecma.node_len(body)
        if bmn == bmx and bmn > 0:
            c = -(-need // bmn)
            if b is not None and c > b:
                return None
            return ("rep", body, c, b)
        return None
    if kind == "seq":
        items = list(node[1])
        deficit = need - mn
        for i, it in enumerate(items):
            if deficit <= 0:
                break
            a, b = ecma.node_len(it)
            if b is None or b > a:
                target = a + deficit if b is None else min(b, a + deficit)
                g = _grow(it, target)
                if g is not None:
                    got = ecma.node_len(g)[0] - a
                    items[i] = g
                    deficit -= got
        return ("seq", items) if deficit <= 0 else None
    if kind == "alt":
        bs = [x for x in (_grow(b, need) for b in node[1]) if x is not None]
        return ("alt", bs) if bs else None
    return None


def _expanded_size(r: str) -> int:
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


def _finite_strings(node, limit: int):
    """The finite language of a node as a list of strings (None if infinite or large)."""
    kind = node[0]
    if kind == "set":
        r = node[1]
        n = sum(b - a + 1 for a, b in r)
        if n > limit:
            return None
        return [chr(c) for a, b in r for c in range(a, b + 1)]
    if kind == "seq":
        acc = [""]
        for it in node[1]:
            ws = _finite_strings(it, limit)
            if ws is None:
                return None
            acc = [x + y for x in acc for y in ws]
            if len(acc) > limit:
                return None
        return acc
    if kind == "alt":
        acc = []
        for b in node[1]:
            ws = _finite_strings(b, limit)
            if ws is None:
                return None
            acc += ws
            if len(acc) > limit:
                return None
        return acc
    if kind == "rep":
        if node[3] is None:
            return None
        ws = _finite_strings(node[1], limit)
        if ws is None:
            return None
        acc = []
        cur = [""]
        for i in range(node[3] + 1):
            if i >= node[2]:
                acc += cur
            if len(acc) > limit:
                return None
            if i < node[3]:
                cur = [x + y for x in cur for y in ws]
                if len(cur) > limit:
                    return None
        return acc
    return None


def _nullable_node(node) -> bool:
    return ecma.node_len(node)[0] == 0


def _deriv(node, c: int):
    """Brzozowski derivative of a (anchor-free) node by code point c; None = empty."""
    kind = node[0]
    if kind == "set":
        return ("seq", []) if ecma.contains(node[1], c) else None
    if kind == "seq":
        items = node[1]
        alts = []
        for i, it in enumerate(items):
            d = _deriv(it, c)
            if d is not None:
                alts.append(("seq", [d] + list(items[i + 1 :])))
            if not _nullable_node(it):
                break
        if not alts:
            return None
        return alts[0] if len(alts) == 1 else ("alt", alts)
    if kind == "alt":
        alts = [d for d in (_deriv(b, c) for b in node[1]) if d is not None]
        if not alts:
            return None
        return alts[0] if len(alts) == 1 else ("alt", alts)
    if kind == "rep":
        body, a, b = node[1], node[2], node[3]
        if b == 0:
            return None
        d = _deriv(body, c)
        if d is None:
            return None
        rest = ("rep", body, max(a - 1, 0), None if b is None else b - 1)
        return ("seq", [d, rest])
    return None


def _trim_unanchored(b, sa: bool, ea: bool):
    """Drop unbounded repetitions at unanchored ends (``.*`` absorbs them); None when the
    branch can match the empty string at an unanchored end (then every string matches)."""
    if not sa or not ea:
        if _nullable_node(b):
            return None
    if b[0] != "seq":
        b = ("seq", [b])
    items = list(b[1])
    while len(items) == 1 and items[0][0] == "seq":
        items = list(items[0][1])
    changed = True
    while changed and items:
        changed = False
        if not sa and items and items[0][0] == "rep" and items[0][3] is None:
            body, a = items[0][1], items[0][2]
            items = ([("rep", body, a, a)] if a else []) + items[1:]
            changed = True
        if not ea and items and items[-1][0] == "rep" and items[-1][3] is None:
            body, a = items[-1][1], items[-1][2]
            items = items[:-1] + ([("rep", body, a, a)] if a else [])
            changed = True
    if not items and (not sa or not ea):
        return None
    return ("seq", items)


def _first(node):
    """(first code points, nullable) of a pattern node."""
    kind = node[0]
    if kind == "set":
        return node[1], False
    if kind in ("bol", "eol"):
        return (), True
    if kind == "seq":
        acc = ()
        for it in node[1]:
            f, n = _first(it)
            acc = ecma.union(acc, f)
            if not n:
                return acc, False
        return acc, True
    if kind == "alt":
        acc, nul = (), False
        for b in node[1]:
            f, n = _first(b)
            acc = ecma.union(acc, f)
            nul = nul or n
        return acc, nul
    if kind == "rep":
        f, n = _first(node[1])
        return f, n or node[2] == 0
    return ecma.ANY_RANGES, True


def _first_chars_disjoint(pa: str, pb: str) -> bool:
    """True when no string matches both (search) patterns, judged by their first
    characters: both must be start-anchored and non-nullable with disjoint first sets."""
    try:
        sets = []
        for p in (pa, pb):
            brs = ecma.anchored_branches(ecma.parse(p))
            acc = ()
            for b, sa, _ in brs:
                if not sa:
                    return False
                f, n = _first(b)
                if n:
                    return False
                acc = ecma.union(acc, f)
            sets.append(acc)
        return not ecma.intersect(sets[0], sets[1])
    except ecma.PatternError:
        return False


def _rep(e: str, lo: int, hi: Optional[int]) -> str:
    if hi is not None and hi <= 0:
        return ""
    g = _group(e)
    if (lo, hi) == (0, None):
        return g + "*"
    if (lo, hi) == (1, None):
        return g + "+"
    if (lo, hi) == (0, 1):
        return g + "?"
    if hi is None:
        return g + "{%d,}" % lo
    if lo == hi:
        return g if lo == 1 else g + "{%d}" % lo
    return g + "{%d,%d}" % (lo, hi)


def _strip_opt(r: str) -> str:
    if r.startswith("(") and r.endswith(")?") and ecma._is_atom(r[:-1]):
        return r[1:-2]
    return r


def _sequence(items: list, sep: str, comp=None) -> Optional[str]:
    """Comma-separated concatenation of items, in order.

    items: (kind, x) with kind 'req' / 'opt' (x a regex) or 'star' (x = (regex, max_count)).
    Linear in size when a required item exists; O(n log n) copies otherwise.
    """
    if not items:
        return ""

    def one(kind, x):
        # regex of the item when it is the first one emitted (no leading comma) and
        # present at least once
        if kind == "star":
            e, cnt = x
            more = None if cnt is None else cnt - 1
            return _group(e) + _rep("(" + sep + _group(e) + ")", 0, more) if (more is None or more > 0) else _group(e)
        return _group(x)

    def after(kind, x):
        # item after something was emitted (leading comma), possibly absent if optional
        if kind == "star":
            e, cnt = x
            return _rep("(" + sep + _group(e) + ")", 0, cnt)
        if kind == "req":
            return sep + _group(x)
        return "(" + sep + _group(x) + ")?"

    def before(kind, x):
        # optional item before the first required one: 'X,' repeated
        if kind == "star":
            e, cnt = x
            return _rep("(" + _group(e) + sep + ")", 0, cnt)
        return "(" + _group(x) + sep + ")?"

    first_req = next((i for i, (k, _) in enumerate(items) if k == "req"), None)
    if first_req is not None:
        out = [before(k, x) for k, x in items[:first_req]]
        out.append(_group(items[first_req][1]))
        out += [after(k, x) for k, x in items[first_req + 1 :]]
        return "".join(out)

    # all optional: non-empty subsequence, divide and conquer
    def tail(lo, hi):
        return "".join(after(k, x) for k, x in items[lo:hi])

    # split at the first trailing 'star' item (extra properties) at the top level, so that
    # their (often large) regex is copied a constant number of times, not once per level
    n_decl = len(items)
    while n_decl > 0 and items[n_decl - 1][0] == "star":
        n_decl -= 1

    def ne(lo, hi):
        if hi - lo == 1:
            k, x = items[lo]
            return one(k, x)
        mid = (lo + hi) // 2
        if lo < n_decl < hi and hi == len(items):
            mid = n_decl
            if hi - mid == 1:
                # (D | X)(,X)*: X once as the first item, once repeated
                k, x = items[mid]
                return "(" + _group(ne(lo, mid)) + "|" + _group(x[0]) + ")" + after(k, x)
        left = ne(lo, mid)
        right = ne(mid, hi)
        return "(" + _cat(_group(left), tail(mid, hi)) + "|" + right + ")"

    body = ne(0, len(items))
    if comp is not None:
        comp.check_size(body)
    return "(" + body + ")?"


# ---------------------------------------------------------------------------
# small utilities


def _intersect_types(a: set, b: set) -> set:
    out = set(a) & set(b)
    if "integer" in a and "number" in b and "integer" not in out:
        out.add("integer")
    if "integer" in b and "number" in a:
        out.add("integer")
    if "number" in out and not ("number" in a and "number" in b):
        out.discard("number")
    return out


def _universal_pattern(p: str) -> bool:
    """Patterns that every string matches (search semantics)."""
    return p in ("", ".*", "^.*", ".*$", "(.*)", "[\\s\\S]*", "^[\\s\\S]*$") or (
        not p.startswith("^") and p.endswith("*") and p[:-1] in (".", "\\S", "\\w", "[a-z]", "[A-Za-z]", "\\d")
    )


def _line_pattern(p: str) -> bool:
    """Patterns matching exactly the strings without line terminators."""
    return p in ("^.*$", "^(.*)$", "^.*?$")


def _norm_numbers(v: Any) -> Any:
    """Numbers replaced by a canonical decimal text, so that 1 and 1.0 compare equal."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        try:
            return "#num:" + str(_dec(v).normalize())
        except (InvalidOperation, ValueError, OverflowError):
            return "#num:" + repr(v)
    if isinstance(v, list):
        return [_norm_numbers(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm_numbers(x) for k, x in v.items()}
    return v


def _type_of(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _is_pow10(n: int) -> bool:
    while n % 10 == 0 and n > 1:
        n //= 10
    return n == 1


def _frac_digits(fr: Fraction) -> str:
    """Fraction in [0,1) with a finite decimal expansion -> its digits (no trailing zeros)."""
    d = Decimal(fr.numerator) / Decimal(fr.denominator)
    s = format(d, "f")
    if "." not in s:
        return ""
    return s.split(".", 1)[1].rstrip("0")


_PY_RE_CACHE: dict = {}


def _py_pattern_ok(p: str) -> bool:
    try:
        _compile_py(p)
        return True
    except re.error:
        return False


def _compile_py(p: str):
    r = _PY_RE_CACHE.get(p)
    if r is None:
        r = re.compile(p)
        _PY_RE_CACHE[p] = r
    return r


def _py_fullmatch(p: str, s: str) -> bool:
    """Whether the anchored pattern p matches s; False when Python cannot compile it."""
    try:
        return _compile_py(p).fullmatch(s) is not None
    except re.error:
        return False


def _py_search(p: str, s: str) -> bool:
    """Whether pattern p matches somewhere in s (the jsonschema semantics)."""
    try:
        return _compile_py(p).search(s) is not None
    except re.error:
        return True  # conservative: assume it matches


# ---------------------------------------------------------------------------
# helpers for callers that check instances


def value_regex(value: Any, options: Optional[SchemaOptions] = None) -> str:
    """Regex matching exactly the serialisation of one JSON value (compact or flexible)."""
    comp = _Compiler(True, options or SchemaOptions())
    return comp.value_regex(value)


def canonical_key_orders(schema: Any) -> dict:
    """Property name -> rank in the order the compiler emits properties (first declaration
    in the schema, depth first).  Used to re-order instance keys before matching."""
    order: dict = {}
    seen: set = set()

    def walk(s, depth):
        if depth > 50 or not isinstance(s, (dict, list)) or id(s) in seen:
            return
        seen.add(id(s))
        if isinstance(s, list):
            for x in s:
                walk(x, depth + 1)
            return
        if "$ref" in s and isinstance(s["$ref"], str):
            pass
        props = s.get("properties")
        if isinstance(props, dict):
            for k in props:
                order.setdefault(k, len(order))
        req = s.get("required")
        for k, v in s.items():
            if k in ("properties",):
                if isinstance(v, dict):
                    for sub in v.values():
                        walk(sub, depth + 1)
            elif k in ("enum", "const", "examples", "default", "required"):
                continue
            else:
                walk(v, depth + 1)
        if isinstance(req, list):
            for k in req:
                if isinstance(k, str):
                    order.setdefault(k, len(order) + 100000)

    walk(schema, 0)
    return order
