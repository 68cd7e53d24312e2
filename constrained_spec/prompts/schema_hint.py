"""The prompt sentence that gives the model the JSON Schema its answer follows."""

from __future__ import annotations

import json
from typing import Any

from constrained_spec.config import SCHEMA_HINT_STYLES
from constrained_spec.prompts.type_sketch import render_types

__all__ = ["SCHEMA_HINT_MAX_CHARS", "schema_hint"]

#: the longest schema text a prompt hint carries (characters); longer schemas are cut there
SCHEMA_HINT_MAX_CHARS = 6000


def schema_hint(schema: Any, subject: str = "Answer with a single JSON value", max_chars: int = SCHEMA_HINT_MAX_CHARS,
                style: str = "full") -> str:
    """The prompt sentence that gives the model the JSON Schema its answer follows.

    The one place this text is written: ``Generator.prompt_ids`` appends it (after a blank line)
    to the last message (:func:`constrained_spec.prompts.chat.prompt_token_ids`), the
    function-calling prompts (:mod:`constrained_spec.prompts.tools`) use it with their own
    ``subject`` for a reply's ``content``. The schema is ``json.dumps``'d as is; past
    ``max_chars`` characters it is written compactly and cut there (with a note saying so), so a
    huge schema cannot make a huge prompt. The constraint is always the whole schema.
    """
    if style not in SCHEMA_HINT_STYLES:
        raise ValueError(f"unknown schema hint style {style!r}; choose one of {', '.join(SCHEMA_HINT_STYLES)}")
    if style == "types":
        sketch = render_types(schema)
        if len(sketch) > max_chars:
            sketch = sketch[:max_chars] + f" ... (cut at {max_chars} of {len(sketch)} characters)"
        return f"{subject} of this shape (? marks an optional key):\n" + sketch
    text = json.dumps(schema, separators=(",", ":")) if style == "compact" else json.dumps(schema)
    if len(text) > max_chars:
        compact = json.dumps(schema, separators=(",", ":"))
        if len(compact) > max_chars:
            compact = compact[:max_chars] + f" ... (cut at {max_chars} of {len(compact)} characters)"
        text = compact
    return f"{subject} that follows this JSON Schema:\n" + text
