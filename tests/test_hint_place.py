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
    assert GeneratorConfig().schema_hint_place == "user"
    with pytest.raises(ConfigError, match="schema hint place"):
        GeneratorConfig(schema_hint_place="assistant")


def test_a_generator_places_the_hint_as_configured(tiny_generator):
    """``Generator(schema_hint_place="system")`` writes each call's prompt with the hint first."""
    gen = tiny_generator(draft=False, schema_hint_place="system")
    spec = gen.compile(SCHEMA).spec
    ids = [gen.prompt_ids(p, spec) for p in PROMPTS]
    assert json.dumps(SCHEMA) in gen.tokenizer.decode(ids[0][:shared(*ids)])
    assert ids[0] == prompt_token_ids(gen.tokenizer, PROMPTS[0], SCHEMA, hint_place="system")
    assert ids[0] != prompt_token_ids(gen.tokenizer, PROMPTS[0], SCHEMA)
