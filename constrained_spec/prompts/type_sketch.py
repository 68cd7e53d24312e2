"""A JSON Schema written as a short type sketch, for the prompt's schema hint (style ``"types"``).

The grammar already enforces the schema; the hint only tells the model what the value means and
looks like. ``json.dumps`` of a schema spends most of its tokens on keywords (``"type":``,
``"properties":``, ``"required":``); the sketch keeps what a reader needs in TypeScript-like
notation: keys (``?`` marks an optional one), types, enum and const values, bounds, formats,
patterns and descriptions. Local ``$ref`` targets are written once, by name, under ``where``, so
a recursive schema gives a finite sketch.

    {"invoice_number": string /^INV-[0-9]{5}$/, "currency": "EUR" | "USD",
     "line_items": [{"quantity": integer 1..10000, "note"?: string}] (1-6 items)}
"""

from __future__ import annotations

import json
from typing import Any

#: nesting written out before a subschema becomes ``...``: bounds the work a hostile schema causes
MAX_DEPTH = 24
#: the longest description kept (characters); longer ones are cut with an ellipsis
MAX_DESCRIPTION = 120

_SCALARS = {"string", "integer", "number", "boolean", "null", "object", "array"}


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """The value at a JSON Pointer (RFC 6901) in ``doc``; KeyError where there is none."""
    if pointer == "":
        return doc
    if not pointer.startswith("/"):
        raise KeyError(pointer)
    node = doc
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(pointer)
    return node


def render_types(schema: Any) -> str:
    """The type sketch of ``schema`` (a JSON Schema: dict or bool); never raises on odd input."""
    writer = _Writer(schema)
    body = writer.render(schema, 0)
    lines = [f"Root = {body}" if "#" in writer.names else body]
    done: set[str] = set()
    while writer.pending:  # definitions reached through $ref, each written once (recursion-safe)
        pointer = writer.pending.pop(0)
        if pointer in done:
            continue
        done.add(pointer)
        target = writer.resolve(pointer)
        lines.append(f"where {writer.names[pointer]} = {writer.render(target, 0, top_ref=pointer)}")
    return "\n".join(lines)


class _Writer:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.names: dict[str, str] = {}
        self.pending: list[str] = []

    # -- references ---------------------------------------------------------------------------
    def resolve(self, pointer: str) -> Any:
        try:
            return resolve_pointer(self.root, pointer[1:] if pointer.startswith("#") else pointer)
        except KeyError:
            return True

    def ref_name(self, pointer: str) -> str:
        if pointer not in self.names:
            base = pointer.rstrip("/").rsplit("/", 1)[-1] or "Root"
            name, n = base, 2
            while name in self.names.values():
                name, n = f"{base}{n}", n + 1
            self.names[pointer] = name
            self.pending.append(pointer)
        return self.names[pointer]

    # -- subschemas ---------------------------------------------------------------------------
    def render(self, schema: Any, depth: int, top_ref: str | None = None) -> str:
        if schema is True or schema == {}:
            return "any"
        if schema is False:
            return "never"
        if not isinstance(schema, dict):
            return "any"
        if depth > MAX_DEPTH:
            return "..."
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#") and ref != top_ref:
            if ref in ("#", "#/"):
                self.names["#"] = text = "Root"
            else:
                text = self.ref_name(ref)
            rest = {k: v for k, v in schema.items() if k not in ("$ref", "description", "title")}
            if rest:
                text = f"{text} & {self.render(rest, depth + 1)}"
            return self._described(text, schema)
        return self._described(self._body(schema, depth), schema)

    def _described(self, text: str, schema: dict) -> str:
        description = schema.get("description")
        if isinstance(description, str) and description.strip():
            words = " ".join(description.split())
            if len(words) > MAX_DESCRIPTION:
                words = words[: MAX_DESCRIPTION - 3].rstrip() + "..."
            text += f" /* {words} */"
        return text

    def _body(self, schema: dict, depth: int) -> str:
        if "const" in schema:
            return _value(schema["const"])
        if isinstance(schema.get("enum"), list):
            return " | ".join(_value(v) for v in schema["enum"]) or "never"
        for key, joiner in (("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                rest = {k: v for k, v in schema.items() if k not in (key, "description", "title")}
                parts = [self.render(b, depth + 1) for b in branches]
                text = "(" + joiner.join(parts) + ")" if len(parts) > 1 else parts[0]
                return f"{self._body(rest, depth)} & {text}" if _has_type_keywords(rest) else text
        types = schema.get("type")
        if isinstance(types, list):
            names = [t for t in types if isinstance(t, str)]
            return " | ".join(self._typed(schema, t, depth) for t in names) or "any"
        if isinstance(types, str):
            return self._typed(schema, types, depth)
        if "properties" in schema or "additionalProperties" in schema or "required" in schema:
            return self._typed(schema, "object", depth)
        if "items" in schema or "prefixItems" in schema:
            return self._typed(schema, "array", depth)
        return "any"

    def _typed(self, schema: dict, kind: str, depth: int) -> str:
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind == "string":
            return "string" + _string_notes(schema)
        if kind in ("integer", "number"):
            return kind + _number_notes(schema)
        return kind if kind in _SCALARS else "any"

    def _object(self, schema: dict, depth: int) -> str:
        raw = schema.get("properties")
        properties: dict = raw if isinstance(raw, dict) else {}
        required = set(schema.get("required") or []) if isinstance(schema.get("required"), list) else set()
        parts = []
        for key, sub in properties.items():
            mark = "" if key in required else "?"
            parts.append(f"{json.dumps(key)}{mark}: {self.render(sub, depth + 1)}")
        extra = schema.get("additionalProperties", True if not properties else False)
        if extra is not False and not (extra is True and properties):
            parts.append(f"[key: string]: {self.render(extra, depth + 1)}")
        text = "{" + ", ".join(parts) + "}"
        bounds = _bounds(schema, "minProperties", "maxProperties", "keys")
        return text + bounds

    def _array(self, schema: dict, depth: int) -> str:
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(prefix, list) and prefix:
            parts = [self.render(p, depth + 1) for p in prefix]
            if items is not False:
                parts.append(f"...{self.render(items, depth + 1)}[]")
            text = "[" + ", ".join(parts) + "]"
        elif isinstance(items, list):  # draft 4-7 tuple form
            text = "[" + ", ".join(self.render(p, depth + 1) for p in items) + "]"
        else:
            text = "[" + self.render(items, depth + 1) + "]"
        notes = _bounds(schema, "minItems", "maxItems", "items")
        if schema.get("uniqueItems") is True:
            notes += " (unique)"
        return text + notes


def _has_type_keywords(schema: dict) -> bool:
    return any(k in schema for k in ("type", "properties", "items", "enum", "const"))


def _value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _bounds(schema: dict, low_key: str, high_key: str, unit: str) -> str:
    low, high = schema.get(low_key), schema.get(high_key)
    low = low if isinstance(low, int) and not isinstance(low, bool) else None
    high = high if isinstance(high, int) and not isinstance(high, bool) else None
    if low is not None and high is not None:
        return f" ({low} {unit})" if low == high else f" ({low}-{high} {unit})"
    if low is not None and low > 0:
        return f" (at least {low} {unit})"
    if high is not None:
        return f" (at most {high} {unit})"
    return ""


def _string_notes(schema: dict) -> str:
    notes = ""
    if isinstance(schema.get("format"), str):
        notes += f" ({schema['format']})"
    if isinstance(schema.get("pattern"), str):
        notes += f" /{schema['pattern']}/"
    notes += _bounds(schema, "minLength", "maxLength", "chars")
    return notes


def _number_notes(schema: dict) -> str:
    def num(key: str) -> Any:
        v = schema.get(key)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    low, high = num("minimum"), num("maximum")
    xlow, xhigh = num("exclusiveMinimum"), num("exclusiveMaximum")
    notes = ""
    if low is not None and high is not None:
        notes = f" {_value(low)}..{_value(high)}"
    else:
        if low is not None:
            notes += f" >= {_value(low)}"
        if high is not None:
            notes += f" <= {_value(high)}"
    if xlow is not None:
        notes += f" > {_value(xlow)}"
    if xhigh is not None:
        notes += f" < {_value(xhigh)}"
    if num("multipleOf") is not None:
        notes += f" (multiple of {_value(num('multipleOf'))})"
    return notes
