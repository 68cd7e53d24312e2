"""jsonschema validators whose regex keywords run in linear time.

``jsonschema`` matches ``pattern``, ``patternProperties`` (and, through them,
``additionalProperties`` and ``unevaluatedProperties``) with Python's backtracking ``re``: a
schema such as ``{"patternProperties": {"^(a+)+$": {}}}`` and a 40-character key hold the
process for hours. :func:`linear_validator` extends a draft's validator class so that each of
those keywords matches with :mod:`constrained_spec.grammar.linear_regex` instead (ECMA-262
semantics as the compiler reads them); every other keyword stays jsonschema's own.

A pattern the linear engine refuses (a back reference, lookaround) raises
:class:`~constrained_spec.errors.UnsupportedKeywordError` naming the keyword; one too large
raises :class:`~constrained_spec.errors.CompileLimitError`. Schemas are checked for both before
compiling (:func:`refuse_nonlinear_patterns`), so a request meets them as a 400 up front.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar.linear_regex import PatternRefused, compile_pattern

__all__ = ["linear_validator", "refuse_nonlinear_patterns", "schema_patterns", "search"]

#: how deep :func:`schema_patterns` walks a schema (deeper parts are left to the validator, which
#: refuses the same patterns when it meets them)
WALK_DEPTH = 512


def search(pattern: str, text: str, keyword: str = "pattern") -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, in linear time; a pattern that cannot be
    matched so raises :class:`UnsupportedKeywordError` naming ``keyword``."""
    try:
        compiled = compile_pattern(pattern)
    except PatternRefused as exc:
        raise UnsupportedKeywordError(keyword, "", str(exc)) from None
    return compiled.search(text)


# -- keywords ----------------------------------------------------------------------------------


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator: Any, pp: dict, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pp.items():
        for k, v in instance.items():
            if search(pattern, k, "patternProperties"):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _matches_any(schema: Any, name: str) -> bool:
    return any(search(p, name, "patternProperties") for p in schema.get("patternProperties", {}))


def _additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema._utils import extras_msg
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    extras = {k for k in instance if k not in properties and not _matches_any(schema, k)}
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            error = "Additional properties are not allowed (%s %s unexpected)"
            yield ValidationError(error % extras_msg(sorted(extras, key=str)))


def _evaluated_keys(validator: Any, instance: dict, schema: Any, legacy: bool) -> list:
    """jsonschema's ``find_evaluated_property_keys_by_schema`` (2020-12, or 2019-09 when
    ``legacy``) with ``patternProperties`` matched in linear time."""
    from jsonschema._utils import is_valid

    if validator.is_type(schema, "boolean"):
        return []
    keys: list = []

    def follow(resolved: Any) -> None:
        sub = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
        keys.extend(_evaluated_keys(sub, instance, resolved.contents, legacy))

    if schema.get("$ref") is not None:
        follow(validator._resolver.lookup(schema["$ref"]))
    if legacy and "$recursiveRef" in schema:
        from jsonschema._legacy_keywords import lookup_recursive_ref

        follow(lookup_recursive_ref(validator._resolver))
    if not legacy and schema.get("$dynamicRef") is not None:
        follow(validator._resolver.lookup(schema["$dynamicRef"]))

    if legacy:
        for keyword in ("properties", "additionalProperties", "unevaluatedProperties"):
            if keyword in schema:
                value = schema[keyword]
                if validator.is_type(value, "boolean") and value:
                    keys += instance.keys()
                elif validator.is_type(value, "object"):
                    keys += [p for p in value if p in instance]
    else:
        properties = schema.get("properties")
        if validator.is_type(properties, "object"):
            keys += properties.keys() & instance.keys()
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            if (sub := schema.get(keyword)) is None:
                continue
            keys += [k for k, v in instance.items() if is_valid(validator.descend(v, sub))]

    if "patternProperties" in schema:
        for name in instance:
            keys += [name for p in schema["patternProperties"] if search(p, name, "patternProperties")]

    for name, sub in schema.get("dependentSchemas", {}).items():
        if name in instance:
            keys += _evaluated_keys(validator, instance, sub, legacy)

    for keyword in ("allOf", "oneOf", "anyOf"):
        for sub in schema.get(keyword, []):
            if is_valid(validator.descend(instance, sub)):
                keys += _evaluated_keys(validator, instance, sub, legacy)

    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys += _evaluated_keys(validator, instance, schema["if"], legacy)
            if "then" in schema:
                keys += _evaluated_keys(validator, instance, schema["then"], legacy)
        elif "else" in schema:
            keys += _evaluated_keys(validator, instance, schema["else"], legacy)
    return keys


def _unevaluated(legacy: bool) -> Any:
    def unevaluated_properties(validator: Any, up: Any, instance: Any, schema: Any) -> Iterator[Any]:
        from jsonschema._utils import extras_msg
        from jsonschema.exceptions import ValidationError

        if not validator.is_type(instance, "object"):
            return
        evaluated = _evaluated_keys(validator, instance, schema, legacy)
        bad = []
        for name in instance:
            if name not in evaluated:
                for _ in validator.descend(instance[name], up, path=name, schema_path=name):
                    bad.append(name)
        if bad:
            if up is False:
                error = "Unevaluated properties are not allowed (%s %s unexpected)"
                yield ValidationError(error % extras_msg(sorted(bad, key=str)))
            else:
                error = ("Unevaluated properties are not valid under the given schema "
                         "(%s %s unevaluated and invalid)")
                yield ValidationError(error % extras_msg(bad))

    return unevaluated_properties


_OVERRIDES = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


@functools.lru_cache(maxsize=None)  # one per draft class: a handful
def linear_validator(base: type) -> type:
    """``base`` (a jsonschema validator class) with its regex keywords matched in linear time.

    The class keeps ``base``'s name, meta-schema and every other keyword; it is not registered
    with jsonschema, so nothing else in the process changes.
    """
    from jsonschema import validators

    own = base.VALIDATORS  # type: ignore[attr-defined]
    overrides = {k: f for k, f in _OVERRIDES.items() if k in own}
    if "unevaluatedProperties" in own:
        from jsonschema import _keywords

        legacy = own["unevaluatedProperties"] is not _keywords.unevaluatedProperties
        overrides["unevaluatedProperties"] = _unevaluated(legacy)
    cls = validators.extend(base, overrides)
    cls.__name__ = cls.__qualname__ = base.__name__
    return cls


# -- refusing up front ----------------------------------------------------------------------------

#: keywords whose value is one subschema
_ONE = ("additionalProperties", "additionalItems", "items", "contains", "propertyNames", "not", "if", "then",
        "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema")
#: keywords whose value is a list of subschemas
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
#: keywords whose value maps names to subschemas
#: (``$defs``/``definitions`` are left out: a definition nothing refers to is never matched)
_MAP = ("properties", "patternProperties", "dependentSchemas", "dependencies")


def schema_patterns(schema: Any) -> Iterator[tuple[str, str, str]]:
    """Every (pattern, JSON pointer, keyword) of ``pattern`` and ``patternProperties`` in
    ``schema``'s subschemas, walked by the applicator keywords (not into ``enum``/``const``/
    ``default``/``examples`` data); at most :data:`WALK_DEPTH` levels, without recursion."""
    stack: list[tuple[Any, str, int]] = [(schema, "", 0)]
    while stack:
        s, ptr, depth = stack.pop()
        if not isinstance(s, dict) or depth > WALK_DEPTH:
            continue
        if isinstance(s.get("pattern"), str):
            yield s["pattern"], ptr + "/pattern", "pattern"
        pp = s.get("patternProperties")
        if isinstance(pp, dict):
            for p in pp:
                if isinstance(p, str):
                    yield p, ptr + "/patternProperties", "patternProperties"
        for kw in _ONE:
            if isinstance(s.get(kw), dict):
                stack.append((s[kw], f"{ptr}/{kw}", depth + 1))
        for kw in _LIST:
            if isinstance(s.get(kw), list):
                stack += [(sub, f"{ptr}/{kw}/{i}", depth + 1) for i, sub in enumerate(s[kw])]
        for kw in _MAP:
            if isinstance(s.get(kw), dict):
                stack += [(sub, f"{ptr}/{kw}/{name}", depth + 1) for name, sub in s[kw].items()]


def refuse_nonlinear_patterns(schema: Any) -> None:
    """Raise :class:`UnsupportedKeywordError` (or :class:`CompileLimitError`) for the first pattern
    of ``schema`` that cannot be matched in linear time; patterns are compiled here once, so that
    validation later reuses them."""
    for pattern, ptr, keyword in schema_patterns(schema):
        try:
            compile_pattern(pattern)
        except PatternRefused as exc:
            raise UnsupportedKeywordError(keyword, ptr, str(exc)) from None
