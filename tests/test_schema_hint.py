"""The prompt's schema hint: full or compact, the same schema either way, bounded in size."""

from __future__ import annotations

import json

import pytest

from constrained_spec.api import SCHEMA_HINT_MAX_CHARS, schema_hint

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "temp_c": {"type": "number"}},
          "required": ["city", "temp_c"]}


def _schema_text(hint: str) -> str:
    return hint.split("\n", 1)[1]


def test_compact_hint_is_the_same_schema_in_fewer_characters():
    full, compact = schema_hint(SCHEMA), schema_hint(SCHEMA, style="compact")
    assert json.loads(_schema_text(full)) == json.loads(_schema_text(compact)) == SCHEMA
    assert len(compact) < len(full) and ": " not in _schema_text(compact)


def test_unknown_style_is_refused():
    with pytest.raises(ValueError, match="compact"):
        schema_hint(SCHEMA, style="tiny")


def test_a_huge_schema_makes_a_bounded_hint():
    huge = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(5000)}}
    for style in ("full", "compact"):
        hint = schema_hint(huge, style=style)
        assert len(hint) < SCHEMA_HINT_MAX_CHARS + 200 and "cut at" in hint


def test_generator_writes_the_hint_in_its_style(gpt2_tokenizer, tmp_path):
    from tiny_models import tiny_llama

    from constrained_spec.api import Generator
    from constrained_spec.grammar import output_spec

    spec = output_spec(SCHEMA)
    model = tiny_llama(50257, seed=1)
    ids = {style: Generator(model, None, tokenizer=gpt2_tokenizer, cache_dir=tmp_path, progress=False,
                            schema_hint_style=style).prompt_ids("Weather in Oslo?", spec) for style in ("full", "compact")}
    assert json.dumps(SCHEMA, separators=(",", ":")) in gpt2_tokenizer.decode(ids["compact"])
    assert len(ids["compact"]) < len(ids["full"])
    with pytest.raises(ValueError):
        Generator(model, None, tokenizer=gpt2_tokenizer, cache_dir=tmp_path, progress=False, schema_hint_style="x")
