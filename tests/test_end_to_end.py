"""End to end: tiny random-weight models over a real tokenizer produce values that validate."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import BaseModel, Field
from tiny_models import tiny_llama

from constrained_spec.api import Generator
from constrained_spec.errors import SchemaError, TokenBudgetExceeded, UnsupportedKeywordError, VocabularyMismatchError
from constrained_spec.grammar import Regex

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


@pytest.fixture(scope="module")
def generator(tiny_generator):
    return tiny_generator(num_draft_tokens=3, max_new_tokens=400, debug_checks=True)


# Random-weight models sample digits uniformly, so unbounded number fractions would run on for ever
# under sampling: the sampled cases use the schemas whose numbers are bounded integers.
CASES = [(name, 0.0) for name in ("person", "order", "inventory", "weather", "tool_call")] + [
    (name, 1.0) for name in ("person", "order", "tool_call")
]


@pytest.mark.parametrize("name,temperature", CASES)
def test_values_validate_against_example_schemas(generator, name, temperature):
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    result = generator.run("Produce a value.", schema, temperature=temperature, seed=5)
    jsonschema.validate(result.value, schema)
    assert json.loads(result.text) == result.value
    s = result.stats
    assert s.generated_tokens == len(result.token_ids) and s.target_forwards >= 1
    assert s.accepted_tokens <= s.drafted_tokens


class Pet(BaseModel):
    kind: str = Field(pattern="^(cat|dog|fish)$")
    legs: int = Field(ge=0, le=8)
    name: str = Field(max_length=12)


def test_pydantic_output_type_returns_an_instance(generator):
    pet = generator.generate("A pet:", Pet, temperature=1.0, seed=3)
    assert isinstance(pet, Pet) and 0 <= pet.legs <= 8


def test_regex_output_type(generator):
    import re

    text = generator.generate("A date:", Regex(r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]"), temperature=1.0, seed=1)
    assert re.fullmatch(r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-3][0-9]", text)


@pytest.mark.parametrize("proposers,adaptive", [
    (("draft",), False), (("draft", "grammar"), False), (("draft", "grammar", "lookup"), True), (("grammar", "lookup"), False),
])
def test_greedy_speculative_equals_greedy_target_only(generator, proposers, adaptive):
    schema = json.loads((SCHEMAS / "inventory.json").read_text())
    prompt = 'Stock: {"warehouse":"North","items":[{"sku":"ABC-1234","quantity":5,"price":10}]}'
    base = generator.run(prompt, schema, temperature=0.0, num_draft_tokens=0, proposers=())
    spec = generator.run(prompt, schema, temperature=0.0, num_draft_tokens=4, proposers=proposers, adaptive=adaptive)
    assert spec.token_ids == base.token_ids
    assert base.stats.drafted_tokens == 0 and spec.stats.drafted_tokens > 0
    assert spec.stats.target_forwards < base.stats.target_forwards
    if "grammar" in proposers:
        assert spec.stats.grammar_proposed > 0 and spec.stats.grammar_accepted > 0


@pytest.mark.parametrize("window", [1, 8])
def test_windowed_draft_keeps_greedy_identity(generator, window):
    """The draft sees only the last ``window`` prompt tokens: its prefill is short, the output the same."""
    schema = json.loads((SCHEMAS / "order.json").read_text())
    prompt = "Order 17: two pens at 1.50 each for Ada, shipped to 12 Analytical Row, London."
    base = generator.run(prompt, schema, temperature=0.0, num_draft_tokens=0, proposers=())
    spec = generator.run(prompt, schema, temperature=0.0, num_draft_tokens=4, proposers=("draft",), draft_window=window)
    assert spec.token_ids == base.token_ids and spec.stats.drafted_tokens > 0
    assert generator.draft.length <= window + len(spec.token_ids) + 1 < generator.target.length


def test_draft_head_prefix_and_confidence_stops_keep_greedy_identity(generator):
    """The draft scoring only the leading ids, and blocks ending at unsure draft tokens, change the
    proposals but never the output."""
    schema = json.loads((SCHEMAS / "order.json").read_text())
    prompt = "Order 17: two pens at 1.50 each for Ada."
    base = generator.run(prompt, schema, temperature=0.0, num_draft_tokens=0, proposers=())
    assert generator.draft.set_head_prefix(20000) and generator.draft.head_prefix == 20000
    try:
        spec = generator.run(prompt, schema, temperature=0.0, num_draft_tokens=4, proposers=("draft",), draft_confidence=0.9)
    finally:
        generator.draft.set_head_prefix(0)
    assert generator.draft.head_prefix == 0
    assert spec.token_ids == base.token_ids
    assert spec.stats.prefix_head_forwards > 0 and spec.stats.confidence_stops > 0


def test_budget_too_small_raises_with_partial_text(generator):
    schema = json.loads((SCHEMAS / "order.json").read_text())
    with pytest.raises(TokenBudgetExceeded) as info:
        generator.run("Order:", schema, max_new_tokens=5)
    assert info.value.partial_text and len(info.value.partial_text) < 60


def test_bad_inputs_get_clear_errors(generator):
    with pytest.raises(SchemaError):
        generator.run("x", {"type": "object", "properties": 5})
    with pytest.raises(SchemaError, match="not valid JSON"):
        generator.run("x", "{not json")
    with pytest.raises(UnsupportedKeywordError, match="uniqueItems"):
        generator.run("x", {"type": "array", "items": {"type": "integer"}, "uniqueItems": True})


def test_draft_with_other_vocabulary_is_refused(gpt2_tokenizer):
    with pytest.raises(VocabularyMismatchError):
        Generator(tiny_llama(50257, seed=1), tiny_llama(300, seed=2), tokenizer=gpt2_tokenizer, progress=False)
