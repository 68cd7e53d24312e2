"""The schema being compiled: where each subschema sits, which base URI it resolves
``$ref`` against, and the validator that decides single values exactly.

Registry and draft rules come from :mod:`constrained_spec.grammar.schema_refs` (nothing is
retrieved unless ``ref_allow`` lists it); :class:`SchemaDocument` applies them to one schema.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Optional, Union

from constrained_spec.errors import SchemaError, UnsupportedKeywordError
from constrained_spec.grammar.json_schema.options import SchemaOptions

if TYPE_CHECKING:  # referencing documents Resolver (what Registry.resolver() returns) but exports it from _core only
    from referencing._core import Resolver

__all__ = ["Ctx", "NegCtx", "SchemaDocument", "REF_MEMO_MAX"]

#: most resolved ``$ref``s one :class:`SchemaDocument` remembers (then it resolves the rest each time)
REF_MEMO_MAX = 4096


class Ctx:
    """A subschema with its JSON pointer and the resolver for its base URI.

    ``schema`` is the JSON value of the subschema (a dict or a boolean in a valid schema);
    ``resolver`` is None only for the ``true`` schemas the compiler makes up (they hold no
    ``$ref``)."""

    __slots__ = ("schema", "ptr", "resolver")

    def __init__(self, schema: Any, ptr: str, resolver: Optional[Resolver[Any]]) -> None:
        self.schema = schema
        self.ptr = ptr
        self.resolver = resolver

    def child(self, sub: Any, *path: Union[str, int]) -> "Ctx":
        """The subschema ``sub`` found under ``path`` (keys and indexes) below this one."""
        p = self.ptr
        for x in path:
            p += "/" + str(x).replace("~", "~0").replace("/", "~1")
        return Ctx(sub, p, self.resolver)


def _resolver(ctx: Ctx) -> Resolver[Any]:
    """ctx's resolver; the made-up ``true`` schemas that have none hold no ``$id`` or ``$ref``."""
    if ctx.resolver is None:
        raise SchemaError("internal: a subschema without a base URI was asked to resolve a reference", ctx.ptr)
    return ctx.resolver


class NegCtx(Ctx):
    """A subschema that must NOT hold (used for the negation of an ``if``)."""

    __slots__ = ()


class SchemaDocument:
    """One schema with its validator: the draft, ``$id``/``$ref`` resolution and the validation
    oracle (``valid``) that the compiler asks about single values.

    Raises :class:`SchemaError` when no validator fits the schema or the schema is not valid
    JSON Schema, and :class:`UnsupportedKeywordError` for draft-03 schemas.
    """

    def __init__(self, schema: Union[dict[str, Any], bool], options: SchemaOptions) -> None:
        from jsonschema import exceptions as js_exc

        from constrained_spec.grammar import meta_check
        from constrained_spec.grammar.nesting import COMPOSE_MARGIN, MAX_SCHEMA_NESTING, check_nesting
        from constrained_spec.grammar.schema_refs import make_registry, validator_class

        check_nesting(schema, cap=MAX_SCHEMA_NESTING + COMPOSE_MARGIN)  # before anything recurses on it
        # jsonschema ships no type information (no py.typed): its validator classes are Any to mypy
        cls: Any
        try:
            cls = validator_class(schema, options.draft)
        except Exception as e:  # unknown $schema etc.
            raise SchemaError(f"cannot choose a validator for this schema: {e}") from e
        try:
            meta_check.check_schema(cls, schema)  # jsonschema's check_schema where jsonschema-rs cannot say valid
        except js_exc.SchemaError as e:
            ptr = "/" + "/".join(str(p) for p in e.absolute_path) if e.absolute_path else ""
            raise SchemaError(f"schema is not valid JSON Schema: {e.message}", ptr) from e
        except Exception as e:
            raise SchemaError(f"schema could not be checked: {e}") from e
        from constrained_spec.grammar.pattern_keywords import refuse_nonlinear_patterns

        refuse_nonlinear_patterns(schema)  # no pattern is ever matched by a backtracking engine
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
        #: the draft as a number: 4, 6, 7, 2019 or 2020
        self.draft: int = names.get(cls.__name__, 2020)
        if self.draft == 3:
            raise UnsupportedKeywordError("$schema", "#", "draft-03 schemas are not supported")
        self._val_cache: dict[tuple[int, int], Any] = {}  # (schema id, resolver id) -> validator
        #: (id of a resolver, a ``$ref``) -> (that resolver, kept so its id is not reused, the entered
        #: target): every compile of the document (the first, the size-cap retries, the grammars)
        #: resolves the same references from the same resolvers (at most :data:`REF_MEMO_MAX`)
        self._ref_memo: dict[tuple[int, str], tuple[Resolver[Any], Ctx]] = {}
        self._keep: list[Ctx] = []

    def root_ctx(self) -> Ctx:
        """The whole schema, at pointer ``""``, with the root resolver."""
        return Ctx(self.root, "", self.validator._resolver)

    # -- $id / $ref ------------------------------------------------------------------------

    def enter(self, ctx: Ctx) -> Ctx:
        """ctx with the resolver of its own ``$id`` (if it has one); :class:`SchemaError` naming
        the ``$id`` when it cannot be a base URI.

        Every ``$id`` is parsed here, nested ones too: ``referencing`` joins a nested ``$id``
        onto an empty base without parsing it, so an unparsable one would otherwise surface
        only at a relative ``$ref`` below it, as an error naming that ``$ref``.
        """
        s = ctx.schema
        if isinstance(s, dict):
            key = "$id" if self.draft >= 6 else "id"
            if isinstance(s.get(key), str):
                from referencing.jsonschema import specification_with

                try:
                    urllib.parse.urlsplit(s[key])
                    spec = specification_with(self.validator.META_SCHEMA.get("$schema", ""))
                    res = spec.create_resource(s)
                    return Ctx(s, ctx.ptr, _resolver(ctx).in_subresource(res))
                except Exception as e:  # a malformed base URI: the $refs under it cannot be resolved
                    raise SchemaError(
                        f"{key} {s[key]!r} cannot be used as a base URI ({type(e).__name__}: {e})",
                        (ctx.ptr or "") + "/" + key,
                    ) from e
        return ctx

    def resolve_ref(self, ctx: Ctx, ref: str, kw: str = "$ref") -> Ctx:
        """The (entered) target of ``ref`` against ctx's base URI; :class:`SchemaError` (or
        :class:`~constrained_spec.errors.RefRetrievalError`) when it cannot be resolved."""
        from constrained_spec.grammar.schema_refs import ref_error

        resolver = _resolver(ctx)
        key = (id(resolver), ref)
        hit = self._ref_memo.get(key)
        if hit is not None and hit[0] is resolver:
            return hit[1]
        try:
            resolved = resolver.lookup(ref)
        except Exception as e:
            err = ref_error(e, ref, ctx.ptr + "/" + kw)
            if err is None:
                err = SchemaError(f"$ref {ref!r} cannot be resolved ({type(e).__name__})", ctx.ptr + "/" + kw)
            raise err from None
        ptr = ref if not ref.startswith("#") else ref[1:]
        out = self.enter(Ctx(resolved.contents, ptr, resolved.resolver))
        # remembered where nothing was retrieved (the registry is the resolver's own: the target is
        # an object of a document already there, the same each time); a retrieval parses anew
        registry = getattr(resolver, "_registry", None)  # (referencing names no public accessor)
        if registry is not None and getattr(resolved.resolver, "_registry", None) is registry \
                and len(self._ref_memo) < REF_MEMO_MAX:
            self._ref_memo[key] = (resolver, out)
        return out

    # -- validation oracle -------------------------------------------------------------

    def valid(self, ctx: Ctx, value: Any) -> bool:
        """Whether value is valid against the subschema ctx (False on runaway recursion)."""
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

    def valid_all(self, sources: Iterable[tuple[Ctx, bool]], value: Any) -> bool:
        """Whether value satisfies every (ctx, positive) source: valid where positive, invalid
        where not."""
        for ctx, pos in sources:
            if self.valid(ctx, value) != pos:
                return False
        return True
