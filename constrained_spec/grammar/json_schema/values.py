"""JSON values: type names, numbers as decimals, canonical keys, and the regex of one value.

No compiler state; :func:`json_value_regex` is also what the public
:func:`~constrained_spec.grammar.json_schema.value_regex` runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Set as AbstractSet
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

from constrained_spec.errors import SchemaError
from constrained_spec.grammar import ecma_regex as ecma

__all__ = [
    "TYPES",
    "ALL_TYPES",
    "dec",
    "json_key",
    "norm_numbers",
    "type_of",
    "intersect_types",
    "is_pow10",
    "frac_digits",
    "json_value_regex",
]

#: the JSON types of ``type`` (``"integer"`` is a subtype of ``"number"``)
TYPES = ("object", "array", "string", "number", "boolean", "null")
ALL_TYPES = frozenset(TYPES + ("integer",))


def dec(x: Any) -> Decimal:
    """A schema number as an exact Decimal (floats by their shortest repr); TypeError for booleans."""
    if isinstance(x, bool):
        raise TypeError
    if isinstance(x, int):
        return Decimal(x)
    return Decimal(repr(float(x))) if isinstance(x, float) else Decimal(str(x))


def json_key(v: Any) -> str:
    """A canonical text of v (sorted keys), to compare JSON values."""
    return json.dumps(v, sort_keys=True, ensure_ascii=False)


def norm_numbers(v: Any) -> Any:
    """Numbers replaced by a canonical decimal text, so that 1 and 1.0 compare equal."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        try:
            return "#num:" + str(dec(v).normalize())
        except (InvalidOperation, ValueError, OverflowError):
            return "#num:" + repr(v)
    if isinstance(v, list):
        return [norm_numbers(x) for x in v]
    if isinstance(v, dict):
        return {k: norm_numbers(x) for k, x in v.items()}
    return v


def type_of(v: Any) -> str:
    """The JSON type name of v (``"integer"`` for integral floats)."""
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


def intersect_types(a: AbstractSet[str], b: AbstractSet[str]) -> set[str]:
    """The intersection of two sets of type names, ``"integer"`` counting as a ``"number"``."""
    out = set(a) & set(b)
    if "integer" in a and "number" in b and "integer" not in out:
        out.add("integer")
    if "integer" in b and "number" in a:
        out.add("integer")
    if "number" in out and not ("number" in a and "number" in b):
        out.discard("number")
    return out


def is_pow10(n: int) -> bool:
    """Whether n is a power of ten (1 included)."""
    while n % 10 == 0 and n > 1:
        n //= 10
    return n == 1


def frac_digits(fr: Fraction) -> str:
    """Fraction in [0,1) with a finite decimal expansion -> its digits (no trailing zeros)."""
    d = Decimal(fr.numerator) / Decimal(fr.denominator)
    s = format(d, "f")
    if "." not in s:
        return ""
    return s.split(".", 1)[1].rstrip("0")


def json_value_regex(v: Any, ws: str) -> str:
    """Regex matching exactly the serialisation of v, with ws between tokens."""
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
        inner = (ws + "," + ws).join(json_value_regex(x, ws) for x in v)
        return "\\[" + ws + inner + ws + "\\]"
    if isinstance(v, dict):
        if not v:
            return "\\{" + ws + "\\}"
        inner = (ws + "," + ws).join(
            '"' + ecma.literal(k) + '"' + ws + ":" + ws + json_value_regex(x, ws) for k, x in v.items()
        )
        return "\\{" + ws + inner + ws + "\\}"
    raise SchemaError(f"unexpected value in enum/const: {v!r}")
