"""JSON Schema edits the call grammar needs: walk subschemas, drop titles, close objects, move ``$ref`` s."""

from __future__ import annotations

import copy
from typing import Any, Callable

__all__ = ["close_objects", "has_root_refs", "rebase_refs", "strip_titles", "walk"]

_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains",
                  "propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems")


def walk(schema: Any, fn: Callable[[dict, bool], None], in_all_of: bool = False) -> None:
    """Call ``fn(node, in_all_of)`` on every subschema node (keys of ``properties`` are not nodes)."""
    if not isinstance(schema, dict):
        return
    fn(schema, in_all_of)
    for key in _SUBSCHEMA_MAPS:
        sub = schema.get(key)
        if isinstance(sub, dict):
            for v in sub.values():
                walk(v, fn)
    for key in _SUBSCHEMA_LISTS:
        sub = schema.get(key)
        if isinstance(sub, list):
            for v in sub:
                walk(v, fn, in_all_of=key == "allOf")
    for key in _SUBSCHEMA_ONE:
        sub = schema.get(key)
        if isinstance(sub, dict):
            walk(sub, fn)
        elif key == "items" and isinstance(sub, list):
            for v in sub:
                walk(v, fn)


def strip_titles(schema: dict) -> dict:
    """Drop Pydantic's generated ``title`` keywords (noise in prompts); property names are kept."""
    schema = copy.deepcopy(schema)

    def drop(node: dict, _: bool) -> None:
        if isinstance(node.get("title"), str):
            del node["title"]

    walk(schema, drop)
    return schema


def close_objects(schema: dict) -> dict:
    """Add ``additionalProperties: false`` where an object lists properties and is otherwise open.

    Skipped under ``allOf`` and next to composition keywords, where closing one part would
    forbid the properties another part allows. The result accepts a subset of the original.
    """
    schema = copy.deepcopy(schema)
    open_keys = ("additionalProperties", "patternProperties", "unevaluatedProperties", "allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas")

    def close(node: dict, in_all_of: bool) -> None:
        if in_all_of or not isinstance(node.get("properties"), dict):
            return
        if any(k in node for k in open_keys):
            return
        node["additionalProperties"] = False

    walk(schema, close)
    return schema


def has_root_refs(schema: Any) -> bool:
    """Whether ``schema`` holds a local ``$ref`` (``#...``) anywhere."""
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            return True
        return any(has_root_refs(v) for v in schema.values())
    if isinstance(schema, list):
        return any(has_root_refs(v) for v in schema)
    return False


def rebase_refs(schema: Any, base: str) -> Any:
    """Rewrite local ``$ref`` ``#...`` to ``#<base>...`` (the schema now lives at ``base``)."""
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#"):
                rest = v[1:]
                out[k] = "#" + base + (rest if rest.startswith("/") or not rest else "/" + rest)
            else:
                out[k] = rebase_refs(v, base)
        return out
    if isinstance(schema, list):
        return [rebase_refs(v, base) for v in schema]
    return schema
