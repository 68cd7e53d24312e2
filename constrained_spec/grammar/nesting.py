"""How deep a schema from a request may nest: checked without recursion, before anything recurses.

jsonschema's meta-schema check, the compiler and the tool-schema helpers walk a schema by
recursion; a request with ``items`` nested a few hundred levels deep would meet Python's recursion
limit there (a 500 in the server). Schemas are refused up front instead, with a
:class:`~constrained_spec.errors.SchemaError` (400 ``invalid_schema``) naming the limit.
"""

from __future__ import annotations

from typing import Any

from constrained_spec.errors import SchemaError

__all__ = ["MAX_SCHEMA_NESTING", "COMPOSE_MARGIN", "nesting_depth", "check_nesting"]

#: the most levels of JSON objects and arrays a schema from a caller may nest (``{"items": {}}``
#: is 2 levels; an object property ``{"properties": {"a": {}}}`` is 3)
MAX_SCHEMA_NESTING = 80
#: the levels the library's own wrappers (tool calls, their ``anyOf``, the reply branch) may add
#: around the caller's schemas; the compiler checks ``MAX_SCHEMA_NESTING + COMPOSE_MARGIN``
COMPOSE_MARGIN = 16


def nesting_depth(value: Any, cap: int) -> int:
    """Levels of dicts and lists in ``value`` (a scalar is 0), counted without recursion; the walk
    stops past ``cap`` (then the answer is ``cap + 1``)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        depth += 1
        if depth > cap:
            return cap + 1
        deepest = max(deepest, depth)
        stack.extend((child, depth) for child in children)
    return deepest


def check_nesting(schema: Any, what: str = "the schema", cap: int = MAX_SCHEMA_NESTING) -> None:
    """Raise :class:`SchemaError` when ``schema`` nests more than ``cap`` levels."""
    if nesting_depth(schema, cap) > cap:
        raise SchemaError(f"{what} nests objects/arrays more than {cap} levels deep; flatten it")
