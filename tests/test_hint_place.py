"""Where the prompt's schema hint goes (``schema_hint_place``): after the user's text, or first in a
system message, where prompts with the same schema share their first tokens (a prefix cache can
reuse them). Checked on the token ids the tokenizers make, with and without a chat template: the
shared prefix is computed here, and the hint's text is looked for in its decoded text."""

from __future__ import annotations

import json

import pytest
from conftest import real_tokenizer

from constrained_spec.config import GeneratorConfig
from constrained_spec.errors import ConfigError
from constrained_spec.prompts.chat import prompt_token_ids

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}, "temp_c": {"type": "number"}},
          "required": ["city", "temp_c"]}
PROMPTS = ["Weather in Paris: 21 degrees and sunny.", "Oslo reports minus four this morning, with snow expected later."]


def shared(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.mark.parametrize("name", ["qwen2", "gpt-2"], ids=["chat-template", "no-template"])
@pytest.mark.parametrize("style", ["full", "types"])
def test_a_system_hint_is_a_shared_prefix_and_a_user_hint_is_not(name, style):
    """``system``: two prompts with one schema share a prefix whose text holds the whole schema (the
    hint's last key and its closing); ``user`` (the default, the control): the shared prefix ends
    before the prompts' text differs, with no schema in it. Both prompts hold their text and the hint once."""
    tok = real_tokenizer(name)
    marker = json.dumps(SCHEMA) if style == "full" else "temp_c"
    for place in ("system", "user"):
        ids = [prompt_token_ids(tok, p, SCHEMA, style, hint_place=place) for p in PROMPTS]
        texts = [tok.decode(i) for i in ids]
        assert all(p in t and t.count(marker) == 1 for p, t in zip(PROMPTS, texts))
        prefix = tok.decode(ids[0][:shared(*ids)])
        assert (marker in prefix) == (place == "system"), (place, prefix)


def test_a_system_hint_goes_before_the_callers_own_system_text():
    tok = real_tokenizer("gpt-2")
    messages = [{"role": "system", "content": "You extract weather reports."}, {"role": "user", "content": PROMPTS[0]}]
    text = tok.decode(prompt_token_ids(tok, messages, SCHEMA, hint_place="system"))
    assert text.index(json.dumps(SCHEMA)) < text.index("You extract weather reports.") < text.index(PROMPTS[0])


def test_the_place_is_checked():
    assert GeneratorConfig().schema_hint_place == "system"  # chosen on benchmarks/quality.py (docs/cli.md)
    with pytest.raises(ConfigError, match="schema hint place"):
        GeneratorConfig(schema_hint_place="assistant")


def test_a_generator_places_the_hint_as_configured(tiny_generator):
    """``Generator(schema_hint_place="system")`` writes each call's prompt with the hint first."""
    gen = tiny_generator(draft=False, schema_hint_place="system", schema_hint_style="full")
    spec = gen.compile(SCHEMA).spec
    ids = [gen.prompt_ids(p, spec) for p in PROMPTS]
    assert json.dumps(SCHEMA) in gen.tokenizer.decode(ids[0][:shared(*ids)])
    style = gen.schema_hint_style
    assert ids[0] == prompt_token_ids(gen.tokenizer, PROMPTS[0], SCHEMA, hint_place="system", hint_style=style)
    assert ids[0] != prompt_token_ids(gen.tokenizer, PROMPTS[0], SCHEMA, hint_place="user", hint_style=style)


def test_serve_takes_the_place_and_refuses_it_with_ray(monkeypatch, capsys):
    """``serve --schema-hint-place system`` reaches the server's Generator; with ``--ray`` (whose
    replicas do not take it yet) it is an argument error, before anything loads."""
    pytest.importorskip("uvicorn")
    from constrained_spec.api import Generator
    from constrained_spec.cli import serve

    with pytest.raises(SystemExit) as exit_info:
        serve.main(["--ray", "--schema-hint-place", "system", "--model", "m", "--draft", "none"])
    assert exit_info.value.code == 2 and "not passed to Ray replicas" in capsys.readouterr().err

    class Loaded(Exception):
        pass

    def from_config(cls, models, decode=None, **options):
        raise Loaded(options)

    monkeypatch.setattr(Generator, "from_config", classmethod(from_config))
    with pytest.raises(Loaded) as loaded:
        serve.main(["--schema-hint-place", "system", "--model", "m", "--draft", "none"])
    assert loaded.value.args[0]["schema_hint_place"] == "system"
    for given, placed in (([], "system"), (["--schema-hint-place", "user"], "user")):  # system is the default without --ray
        with pytest.raises(Loaded) as loaded:
            serve.main([*given, "--model", "m", "--draft", "none"])
        assert loaded.value.args[0]["schema_hint_place"] == placed and loaded.value.args[0]["schema_hint_style"] == "types"


def test_with_batch_rows_the_system_hint_is_reused_from_the_prefix_cache(tiny_generator):
    """On batch rows (the server's default), a second call with the same schema and another prompt
    restores at least the whole hint from the prefix cache when the hint is in the system message;
    with the hint after the user's text (the control) it restores less than the hint's tokens."""
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"], "description": "where the report is from"},
                                               "temp_c": {"type": "integer", "minimum": -9, "maximum": 9}},
              "required": ["city", "temp_c"], "additionalProperties": False}  # a short output on random weights
    reused, hint_tokens = {}, 0
    for place in ("system", "user"):
        gen = tiny_generator(draft=False, schema_hint_place=place, schema_hint_style="full", max_batch_size=2, batch_max_tokens=512,
                             max_new_tokens=40)
        if place == "system":
            spec = gen.compile(schema).spec
            hint_tokens = shared(*(gen.prompt_ids(p, spec) for p in PROMPTS))
        gen.run(PROMPTS[0], schema)
        before = gen.batch.metrics.reused_tokens
        gen.run(PROMPTS[1], schema)
        reused[place] = gen.batch.metrics.reused_tokens - before
    assert hint_tokens > 50 and reused["system"] >= hint_tokens > reused["user"], (reused, hint_tokens)


def test_hint_heads_are_what_prompts_with_unlike_schemas_start_with():
    """``hint_heads``: per hint style, the first tokens every system-hinted prompt starts with, whatever its schema
    and text (llama.cpp cuts prefills after them, so a prompt with a new schema keeps them from the one before).
    Checked on schemas and texts the function never saw: each prompt starts with its style's head, the head holds no
    schema's own words, and two prompts with unlike schemas differ right after it or within the next few tokens.
    Without a chat template (no system message of its own) there is none."""
    from constrained_spec.prompts.chat import hint_heads

    tok = real_tokenizer("qwen2")
    heads = hint_heads(tok)
    assert len(heads) >= 2 and all(len(h) >= 8 for h in heads)
    schemas = [SCHEMA, {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}},
               {"type": "number", "minimum": 3}, {"anyOf": [{"type": "null"}, {"type": "boolean"}]}]
    for style in ("full", "compact", "types"):
        ids = [prompt_token_ids(tok, p, s, style, hint_place="system") for p, s in zip(PROMPTS * 2, schemas)]
        starts = [h for h in heads if all(i[: len(h)] == h for i in ids)]
        assert len(starts) == 1, style
        text = tok.decode(starts[0])
        assert "city" not in text and "sku" not in text and "system" in text
        assert shared(ids[0], ids[1]) - len(starts[0]) <= 3
    assert hint_heads(real_tokenizer("gpt-2")) == []
