"""Extra-property rules whose names are finitely many, as one optional member per name.

An extra-property rule (``patternProperties``/``additionalProperties``, :data:`~.emit_object.Extra`)
is a repeated member whose names may repeat, so a property count can only bound its copies from
above: ``minProperties`` two or more above the declared properties cannot be met by a repeated
rule (the names would have to differ, which no regex says of an infinite name set). Where a rule's
names are finitely many (``^(a|b|c)$``, ``^x[0-9]$``), it is the same language of *values* as one
optional member per name, each name at most once, in a fixed order: then the names count exactly
like declared optional properties (:func:`~.member_counts.member_shapes`).
"""

from __future__ import annotations

import json
from typing import Optional

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema.regex_ops import finite_strings

__all__ = ["MAX_NAMED_EXTRAS", "extra_names", "named_extras"]

#: most names all of an object's finite extra-property rules may spell out together
MAX_NAMED_EXTRAS = 16


def extra_names(key_regex: str, limit: int) -> Optional[list[str]]:
    """The decoded names of a key regex (its quotes included), sorted, where they are at most
    ``limit``; None where they are more, infinitely many, or the regex is not one this reads."""
    try:
        node = ecma.parse(key_regex)
    except ecma.PatternError:
        return None
    texts = finite_strings(node, limit * 4)
    if texts is None:
        return None
    names: set[str] = set()
    for t in texts:
        try:
            name = json.loads(t)
        except ValueError:
            return None
        if not isinstance(name, str):
            return None
        names.add(name)
    return sorted(names) if len(names) <= limit else None


def named_extras(extras: list[tuple[str, str, Optional[int]]],
                 limit: int = MAX_NAMED_EXTRAS) -> list[tuple[str, str, Optional[int]]]:
    """``extras`` with every rule of finitely many names (at most ``limit`` of them in all, none
    shared with another rule, the rule not capped below its number of names) replaced by one rule
    per name with count 1 (one optional member each, the name in its canonical spelling); the
    other rules as they are."""
    named: list[Optional[list[str]]] = []
    seen: set[str] = set()
    total = 0
    for k, _v, count in extras:
        names = None if count == 1 else extra_names(k, limit)
        if names is not None and count is not None and count < len(names):
            names = None
        if names is not None and (seen & set(names) or total + len(names) > limit):
            names = None
        if names is not None:
            seen |= set(names)
            total += len(names)
        named.append(names)
    if total == 0:
        return extras
    out: list[tuple[str, str, Optional[int]]] = []
    for (k, v, count), names in zip(extras, named):
        if names is None:
            out.append((k, v, count))
        else:
            out += [('"' + ecma.literal(n) + '"', v, 1) for n in names]
    return out
