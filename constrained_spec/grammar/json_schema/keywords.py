"""Keyword handlers: each ``_kw_<keyword>`` adds what one keyword says to a :class:`Flat`.

:meth:`Keywords.handle_keyword` dispatches one keyword of a schema object;
:meth:`Keywords.absorb_structure` adds the keywords that depend on their siblings
(``additionalProperties``/``patternProperties`` next to ``properties``, ``unevaluated*`` next to
the static applicators, ``items`` next to ``prefixItems``).  Applicators that need a choice
(``anyOf``, ``oneOf``, ``if``, dependencies) only record a branch group; the compiler expands it.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.formats import format_pattern, is_spec_format
from constrained_spec.grammar.json_schema.base import CompilerBase
from constrained_spec.grammar.json_schema.context import Ctx
from constrained_spec.grammar.json_schema.ir import Action, Flat, Forbid, Holds, Owner, Require
from constrained_spec.grammar.json_schema.options import STATIC_WALK_DEPTH
from constrained_spec.grammar.json_schema.values import dec, intersect_types, json_key

__all__ = ["Keywords", "IGNORED_KEYWORDS", "STRUCTURAL_KEYWORDS"]

#: keywords without effect on validation (annotations etc.)
IGNORED_KEYWORDS = {
    "$schema", "$id", "id", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary", "title",
    "description", "default", "examples", "example", "readOnly", "writeOnly", "deprecated",
    "contentEncoding", "contentMediaType", "contentSchema", "$defs", "definitions", "nullable",
}

#: the keywords of the JSON Schema drafts (4 to 2020-12) that assert; others (annotations, a
#: schema's own extensions such as ``_uniqueItems``) are ignored by validators and by the compiler
ASSERTING_KEYWORDS = frozenset({
    "$ref", "$dynamicRef", "$recursiveRef", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    "dependentSchemas", "dependencies", "dependentRequired", "prefixItems", "items", "additionalItems",
    "contains", "minContains", "maxContains", "properties", "patternProperties", "additionalProperties",
    "propertyNames", "unevaluatedItems", "unevaluatedProperties", "type", "enum", "const", "multipleOf",
    "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern",
    "maxItems", "minItems", "uniqueItems", "maxProperties", "minProperties", "required", "format",
})


def asserting_keys(s: dict) -> set[str]:
    """The keywords of schema object ``s`` that assert (:data:`ASSERTING_KEYWORDS`)."""
    return {k for k in s if k in ASSERTING_KEYWORDS}


#: keywords that constrain only through :meth:`Keywords.absorb_structure`
STRUCTURAL_KEYWORDS = {
    "additionalProperties", "patternProperties", "unevaluatedProperties", "unevaluatedItems",
    "prefixItems", "items", "additionalItems",
}


class Keywords(CompilerBase):
    """The keyword handlers and the static walks behind ``unevaluated*``."""

    def handle_keyword(self, flat: Flat, ctx: Ctx, k: str, v: Any, ptr: str, depth: int) -> bool:
        """Apply keyword k (value v, at ptr) of ctx's schema to flat; False when k has no
        handler (annotations, unknown keywords, the structural ones)."""
        h = getattr(self, "_kw_" + k.replace("$", "_"), None)
        if h is None:
            return False
        flat.constrained = True
        h(flat, ctx, v, ptr, depth)
        return True

    def absorb_structure(self, flat: Flat, ctx: Ctx) -> None:
        """Add the keywords of ctx's schema object that depend on their siblings."""
        s = ctx.schema
        ptr = ctx.ptr
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
            flat.owners.append(Owner(names, pats, ap_ctx, ptr))
            for p, _ in pats:
                self.check_pattern(p, ptr + "/patternProperties")
        if "unevaluatedProperties" in s and "additionalProperties" not in s:
            ue = s["unevaluatedProperties"]
            if ue is not True:
                if self._dynamic_subtree(ctx):
                    self.refuse(
                        "unevaluatedProperties",
                        ptr + "/unevaluatedProperties",
                        "only supported where the evaluated properties are static",
                    )
                names, pats = self._static_names(ctx, 0)
                flat.owners.append(
                    Owner(names, pats, ctx.child(ue, "unevaluatedProperties"), ptr)
                )
        if "unevaluatedItems" in s:
            ue = s["unevaluatedItems"]
            has_items = ("items" in s and (self.draft >= 2020 or not isinstance(s["items"], list))) or (
                "additionalItems" in s and isinstance(s.get("items"), list)
            )
            if ue is not True and not has_items:
                if self._dynamic_subtree(ctx):
                    self.refuse(
                        "unevaluatedItems",
                        ptr + "/unevaluatedItems",
                        "only supported where the evaluated items are static",
                    )
                n_eval, all_eval = self._static_prefix(ctx, 0)
                if not all_eval:
                    flat.arr_owners.append(
                        ([Ctx(True, ptr, ctx.resolver)] * n_eval, ctx.child(ue, "unevaluatedItems"))
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

    def _dynamic_subtree(self, ctx: Ctx, depth: int = 0) -> bool:
        """Whether the properties/items that ctx's schema evaluates may depend on the instance
        (it or a static applicator below it has anyOf/oneOf/if/not/dependencies/contains or a
        dynamic reference), looking through ``allOf`` and ``$ref`` (each ``$ref`` against the
        base URI of its own subschema)."""
        s = ctx.schema
        if not isinstance(s, dict) or depth > STATIC_WALK_DEPTH:
            return depth > STATIC_WALK_DEPTH
        for k in ("anyOf", "oneOf", "if", "then", "else", "not", "dependentSchemas", "dependencies", "contains", "$dynamicRef", "$recursiveRef"):
            if k in s:
                return True
        for i, sub in enumerate(s.get("allOf", []) or []):
            if self._dynamic_subtree(self.doc.enter(ctx.child(sub, "allOf", i)), depth + 1):
                return True
        if "$ref" in s and isinstance(s["$ref"], str):
            if self._dynamic_subtree(self.doc.resolve_ref(ctx, s["$ref"]), depth + 1):
                return True
        return False

    def _static_names(self, ctx: Ctx, depth: int) -> tuple[set[str], list[tuple[str, Ctx]]]:
        """(property names, [(pattern, true ctx)]) that ctx's schema evaluates through its own
        keywords and its static applicators (``allOf``, ``$ref``)."""
        names: set[str] = set()
        pats: list[tuple[str, Ctx]] = []
        s = ctx.schema
        if not isinstance(s, dict) or depth > STATIC_WALK_DEPTH:
            return names, pats
        names |= set(s.get("properties", {}) or {})
        pats += [(p, ctx.child(sub, "patternProperties", p)) for p, sub in (s.get("patternProperties") or {}).items()]
        if "additionalProperties" in s and depth > 0:
            pats.append((".*", ctx.child(True)))
        for i, sub in enumerate(s.get("allOf", []) or []):
            n, p = self._static_names(self.doc.enter(ctx.child(sub, "allOf", i)), depth + 1)
            names |= n
            pats += p
        if "$ref" in s and isinstance(s["$ref"], str):
            t = self.doc.resolve_ref(ctx, s["$ref"])
            n, p = self._static_names(t, depth + 1)
            names |= n
            pats += p
        # the patterns found deeper only widen the set of evaluated names: but their
        # schemas must not constrain here; use True schemas
        return names, [(p, Ctx(True, c.ptr, c.resolver)) for p, c in pats]

    # keyword handlers -------------------------------------------------------

    def _kw_type(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        ts = {v} if isinstance(v, str) else set(v)
        if "number" in ts:
            ts.add("integer")
        f.types = ts if f.types is None else intersect_types(f.types, ts)

    def _kw_enum(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        self._set_enum(f, list(v))

    def _kw_const(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        self._set_enum(f, [v])

    def _set_enum(self, f: Flat, values: list[Any]) -> None:
        if f.enum is None:
            f.enum = values
        else:
            keys = {json_key(x) for x in values}
            f.enum = [x for x in f.enum if json_key(x) in keys]

    def _kw_allOf(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        for i, sub in enumerate(v):
            self.absorb(f, ctx.child(sub, "allOf", i), True, depth + 1)

    def _kw_anyOf(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        f.groups.append(("anyOf", [[Holds(ctx.child(sub, "anyOf", i))] for i, sub in enumerate(v)], ptr))

    def _kw_oneOf(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        f.groups.append(("oneOf", [[Holds(ctx.child(sub, "oneOf", i))] for i, sub in enumerate(v)], ptr))

    def _kw_not(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        self.absorb(f, ctx.child(v, "not"), False, depth + 1)

    def _kw_if(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        s = ctx.schema
        if "then" not in s and "else" not in s:
            return
        c_if = ctx.child(v, "if")
        c_then = ctx.child(s.get("then", True), "then")
        c_else = ctx.child(s.get("else", True), "else")
        branches: list[list[Action]] = [[Holds(c_if), Holds(c_then)], [Holds(c_if, False), Holds(c_else)]]
        f.groups.append(("if", branches, ptr))

    # numbers
    def _kw_minimum(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        strict = self.draft == 4 and ctx.schema.get("exclusiveMinimum") is True
        self._lower(f, dec(v), strict)

    def _kw_maximum(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        strict = self.draft == 4 and ctx.schema.get("exclusiveMaximum") is True
        self._upper(f, dec(v), strict)

    def _kw_exclusiveMinimum(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        if isinstance(v, bool):
            return
        self._lower(f, dec(v), True)

    def _kw_exclusiveMaximum(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        if isinstance(v, bool):
            return
        self._upper(f, dec(v), True)

    def _lower(self, f: Flat, d: Decimal, strict: bool) -> None:
        if f.lo is None or d > f.lo or (d == f.lo and strict):
            f.lo, f.lo_strict = d, strict

    def _upper(self, f: Flat, d: Decimal, strict: bool) -> None:
        if f.hi is None or d < f.hi or (d == f.hi and strict):
            f.hi, f.hi_strict = d, strict

    def _kw_multipleOf(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        f.multiple_of.append((dec(v), ptr))

    # strings
    def _kw_minLength(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        f.min_len = max(f.min_len, int(v))

    def _kw_maxLength(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        f.max_len = int(v) if f.max_len is None else min(f.max_len, int(v))

    def _kw_pattern(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        self.check_pattern(v, ptr)
        if (v, "pattern") not in [(p, k) for p, _, k in f.patterns]:
            f.patterns.append((v, ptr, "pattern"))

    def _kw_format(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
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

    def check_pattern(self, p: str, ptr: str) -> None:
        try:
            node = ecma.parse(p)
            ecma.anchored_branches(node)
        except ecma.PatternError as e:
            self.refuse("pattern" if not ptr.endswith("patternProperties") else "patternProperties", ptr, str(e))

    # arrays
    def _static_prefix(self, ctx: Ctx, depth: int) -> tuple[int, bool]:
        """(number of leading items evaluated, whether all items are evaluated) by the
        static applicators (own keywords, allOf, $ref) of a schema object."""
        s = ctx.schema
        if not isinstance(s, dict) or depth > STATIC_WALK_DEPTH:
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
            k, a = self._static_prefix(self.doc.enter(ctx.child(sub, "allOf", i)), depth + 1)
            n = max(n, k)
            all_eval = all_eval or a
        if "$ref" in s and isinstance(s["$ref"], str):
            k, a = self._static_prefix(self.doc.resolve_ref(ctx, s["$ref"]), depth + 1)
            n = max(n, k)
            all_eval = all_eval or a
        return n, all_eval

    def _kw_minItems(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        f.min_items = max(f.min_items, int(v))

    def _kw_maxItems(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        f.max_items = int(v) if f.max_items is None else min(f.max_items, int(v))

    def _kw_uniqueItems(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        if v:
            f.unique = ptr

    def _kw_contains(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        s = ctx.schema
        mn = s.get("minContains", 1) if self.draft >= 2019 else 1
        mx = s.get("maxContains") if self.draft >= 2019 else None
        f.contains.append((ctx.child(v, "contains"), int(mn), mx, ptr))

    # objects
    def _kw_properties(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        for name, sub in v.items():
            f.props.setdefault(name, []).append(ctx.child(sub, "properties", name))

    def _kw_required(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        if isinstance(v, list):
            for n in v:
                if n not in f.required:
                    f.required.append(n)

    def _kw_propertyNames(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        f.property_names.append(ctx.child(v, "propertyNames"))

    def _kw_minProperties(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        if int(v) > f.min_props:
            f.min_props_ptr = ptr
        f.min_props = max(f.min_props, int(v))

    def _kw_maxProperties(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        if f.max_props is None or int(v) < f.max_props:
            f.max_props, f.max_props_ptr = int(v), ptr

    def _kw_dependentRequired(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        for a, bs in v.items():
            self._dep(f, a, [Require((a, *bs))], ptr)

    def _kw_dependentSchemas(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        for a, sub in v.items():
            self._dep(f, a, [Require((a,)), Holds(ctx.child(sub, "dependentSchemas", a))], ptr)

    def _kw_dependencies(self, f: Flat, ctx: Ctx, v: Any, ptr: str, depth: int) -> None:
        for a, sub in v.items():
            if isinstance(sub, list):
                self._dep(f, a, [Require((a, *sub))], ptr)
            else:
                self._dep(f, a, [Require((a,)), Holds(ctx.child(sub, "dependencies", a))], ptr)

    def _dep(self, f: Flat, a: str, present_actions: list[Action], ptr: str) -> None:
        f.groups.append(("dependency", [[Forbid(a)], present_actions], ptr))
