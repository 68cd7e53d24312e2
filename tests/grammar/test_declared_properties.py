"""The two narrowings that are choices: only declared properties, in declared order (by default).

Refusals that follow from them name them and the option that lifts the first
(``additional_properties="spec"``, CLI ``--additional-properties spec``); with it, the additional
properties the schema allows are generated. Oracle: ``jsonschema``.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from jsonschema import Draft202012Validator

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex

SPEC = SchemaOptions(additional_properties="spec")


def _dumps(v) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def test_min_properties_refusal_names_the_choice_and_the_option():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "minProperties": 2}
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex(schema)
    msg = str(ei.value)
    assert "only declared properties are generated" in msg and "declared order" in msg
    assert "additional_properties='spec'" in msg and "--additional-properties spec" in msg
    # with the additional properties generated, two extra properties of different names also meet
    # minProperties: 2, which no regex says: refused by name (before: a made required, silently)
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex(schema, SPEC)
    assert ei.value.keyword == "minProperties" and "names would have to differ" in str(ei.value)
    recorded = dataclasses.replace(SPEC, allow_unenforced=True)
    res = schema_to_regex(schema, recorded)
    assert res.unenforced == ("/minProperties",)
    rx = re.compile(res.regex)
    for v in ({"a": 1, "b": 2}, {"a": 1, "zz": [1]}):
        assert Draft202012Validator(schema).is_valid(v)
        assert rx.fullmatch(_dumps(v)), v
    for v in ({"a": 1}, {"a": "x", "b": 2}, {"b": 2}):
        assert not rx.fullmatch(_dumps(v)) or Draft202012Validator(schema).is_valid(v), v


@pytest.mark.parametrize("extra_allowed", [True, False])
def test_spec_option_generates_the_additional_properties_the_schema_allows(extra_allowed):
    schema: dict = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    if not extra_allowed:
        schema["additionalProperties"] = False
    declared = re.compile(schema_to_regex(schema).regex)
    spec = re.compile(schema_to_regex(schema, SPEC).regex)
    with_extra = {"a": 1, "note": "x"}
    assert not declared.fullmatch(_dumps(with_extra))  # the default narrowing (negative control)
    assert bool(spec.fullmatch(_dumps(with_extra))) == extra_allowed
    assert Draft202012Validator(schema).is_valid(with_extra) == extra_allowed
    assert declared.fullmatch('{"a":1}') and spec.fullmatch('{"a":1}')


def test_cli_exposes_the_option():
    from constrained_spec.cli.commands import build_parser, schema_options

    base = ["generate", "--prompt", "x", "--schema", "s.json"]
    assert schema_options(build_parser().parse_args(base)).additional_properties == "declared"
    args = build_parser().parse_args(base + ["--additional-properties", "spec"])
    assert schema_options(args).additional_properties == "spec"


PATTERN_SCHEMAS = [
    {"patternProperties": {"^x": {"type": "integer"}}},
    {"type": "object", "properties": {"a": {}}, "patternProperties": {"^x": {"type": "integer"}}},
    {"patternProperties": {"^x": {"type": "integer"}, "y$": {"type": "string"}}},
]
PATTERN_VALUES = [{}, {"x": 1}, {"y": "s"}, {"x": "s"}, {"a": 1, "y": 2}, {"xy": 1}, {"xy": "s"}, {"zy": "s"},
                  {"zy": 1}, {"x1": 2, "q": None}]


@pytest.mark.parametrize("schema", PATTERN_SCHEMAS, ids=range(len(PATTERN_SCHEMAS)))
def test_spec_option_with_pattern_properties_and_no_additional_properties(schema):
    """``patternProperties`` without ``additionalProperties``: a name no pattern matches takes any value
    (it generated none before 2026-12-05, even with ``additional_properties="spec"``). The default,
    the declared names and the patterns' names only, is the negative control the same check rejects."""
    judge = Draft202012Validator(schema)
    spec = re.compile(schema_to_regex(schema, SPEC).regex)
    assert [v for v in PATTERN_VALUES if bool(spec.fullmatch(_dumps(v))) != judge.is_valid(v)] == []
    declared = re.compile(schema_to_regex(schema).regex)
    assert [v for v in PATTERN_VALUES if bool(declared.fullmatch(_dumps(v))) != judge.is_valid(v)]
