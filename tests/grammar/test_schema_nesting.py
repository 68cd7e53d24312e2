"""Schemas nested past Python's recursion limit are refused before anything recurses (issue 32)."""

from __future__ import annotations

import random

import pytest

from constrained_spec.errors import ConstrainedSpecError, SchemaError
from constrained_spec.grammar.json_schema import schema_to_regex
from constrained_spec.grammar.nesting import COMPOSE_MARGIN, MAX_SCHEMA_NESTING, nesting_depth
from constrained_spec.tools import ToolError, normalize_tools, tool_call_schema


def deep_items(n: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(n):
        schema = {"type": "array", "items": schema}
    return schema


def tool(parameters: dict) -> dict:
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


def _depth(value) -> int:  # the oracle: plain recursion, on small values only
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


def _random_json(rng: random.Random, budget: int):
    kind = rng.random()
    if budget <= 0 or kind < 0.3:
        return rng.choice([1, "s", None, True])
    if kind < 0.65:
        return [_random_json(rng, budget - 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": _random_json(rng, budget - 1) for i in range(rng.randint(0, 3))}


def test_nesting_depth_equals_a_recursive_count():
    rng = random.Random(3)
    for _ in range(300):
        value = _random_json(rng, rng.randint(0, 8))
        assert nesting_depth(value, 100) == _depth(value)
    assert nesting_depth(deep_items(10_000), 50) == 51  # stops past the cap: no walk of the rest


@pytest.mark.parametrize("depth", [330, 5000])
def test_tool_parameters_nested_too_deep_are_a_tool_error(depth):
    """They raised RecursionError (a 500 in the server) in the tool-schema helpers."""
    params = {"type": "object", "properties": {"x": deep_items(depth)}}
    with pytest.raises(ToolError, match="levels deep"):
        normalize_tools([tool(params)])
    with pytest.raises(ToolError, match="levels deep"):
        tool_call_schema([tool(params)], "required")


@pytest.mark.parametrize("depth", [330, 5000])
def test_a_content_schema_or_response_format_nested_too_deep_is_a_schema_error(depth):
    with pytest.raises(SchemaError, match="levels deep"):
        tool_call_schema([tool({"type": "object", "properties": {}})], "auto", content_schema=deep_items(depth))
    with pytest.raises(SchemaError, match="levels deep"):
        schema_to_regex(deep_items(depth))


def test_schemas_at_the_limit_still_compile_or_fail_cleanly():
    shallow = {"type": "object", "properties": {"x": deep_items(3)}, "required": ["x"]}
    schema_to_regex(tool_call_schema([tool(shallow)], "required"))
    at_limit = {"type": "object", "properties": {"x": deep_items(MAX_SCHEMA_NESTING - 3)}}
    assert nesting_depth(at_limit, 1000) == MAX_SCHEMA_NESTING  # at the limit: allowed
    combined = tool_call_schema([tool(at_limit)], "auto", parallel=True)
    assert nesting_depth(combined, 1000) <= MAX_SCHEMA_NESTING + COMPOSE_MARGIN
    try:  # deep nesting makes a large regex: a size limit is fine, a RecursionError is not
        schema_to_regex(combined)
    except ConstrainedSpecError:
        pass
