"""A schema checked against its draft's meta-schema, fast where it is valid.

``jsonschema``'s ``check_schema`` is the authority (its errors name what is wrong), but on a large
schema it costs 100-300 ms (a Kubernetes schema of the JSONSchemaBench splits: 94 ms on average,
2026-12-05): most of the compile time of a schema that compiles in a few milliseconds otherwise.
``jsonschema-rs`` answers the same question in well under a millisecond. Where it says valid,
and every format ``check_schema`` would assert on the schema is one this module checks the same
way (``regex``, by the validator class's own format checker, on every ``pattern`` value and
``patternProperties`` name), the schema is valid; anywhere else (jsonschema-rs missing, it says
invalid or fails, a ``uri`` format checker installed) ``check_schema`` decides, as before. Over
the two JSONSchemaBench development splits (7,537 schemas) the two never disagree where
jsonschema-rs says valid (they do on 5 it calls invalid: ``check_schema`` then answers).
"""

from __future__ import annotations

import threading
from typing import Any

#: the formats the drafts' meta-schemas ask about (``pattern``: ``regex``; ``$id``/``$ref``: URIs)
META_FORMATS = frozenset({"regex", "uri", "uri-reference", "iri", "iri-reference"})

_validators: dict[str, Any] = {}  # meta-schema URI -> jsonschema-rs validator (one per draft: bounded)
_lock = threading.Lock()


def check_schema(cls: Any, schema: Any) -> None:
    """``cls.check_schema(schema)`` (raises ``jsonschema.exceptions.SchemaError`` where invalid),
    skipped where jsonschema-rs and the format checks here say the schema is valid."""
    if not _fast_valid(cls, schema):
        cls.check_schema(schema)


def _fast_valid(cls: Any, schema: Any) -> bool:
    checkers = set(getattr(getattr(cls, "FORMAT_CHECKER", None), "checkers", {}) or {})
    if (checkers & META_FORMATS) - {"regex"}:
        return False  # a URI checker is installed: check_schema asserts formats this module does not
    validator = _validator(cls)
    if validator is None:
        return False
    try:
        if not validator.is_valid(schema):
            return False
    except Exception:  # noqa: BLE001 - any failure of the fast path: check_schema decides
        return False
    return "regex" not in checkers or all(cls.FORMAT_CHECKER.conforms(p, "regex") for p in _patterns(schema))


def _validator(cls: Any) -> Any:
    meta = getattr(cls, "META_SCHEMA", None)
    if not isinstance(meta, dict):
        return None
    key = str(meta.get("$id") or meta.get("id") or meta.get("$schema") or "")
    with _lock:
        if key not in _validators:
            try:
                import jsonschema_rs

                _validators[key] = jsonschema_rs.validator_for(meta)
            except Exception:  # noqa: BLE001 - not installed, or a meta-schema it cannot read
                _validators[key] = None
        return _validators[key]


def _patterns(schema: Any) -> list[str]:
    """Every ``pattern`` string value and ``patternProperties`` name anywhere in the document (a
    superset of those the meta-schema checks as ``regex``)."""
    out: list[str] = []
    todo = [schema]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            if isinstance(x.get("pattern"), str):
                out.append(x["pattern"])
            if isinstance(x.get("patternProperties"), dict):
                out.extend(k for k in x["patternProperties"] if isinstance(k, str))
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return out
