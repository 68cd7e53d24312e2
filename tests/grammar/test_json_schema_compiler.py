"""Unit tests of the JSON Schema -> regex compiler (constrained_spec.grammar.json_schema).

Every test checks accepted *and* rejected instances: the regex must full-match the compact
JSON text of values it claims, and ``jsonschema`` is the oracle -- a text the regex accepts
must be valid (soundness), and the listed valid examples must be accepted (coverage).
"""

from __future__ import annotations

import itertools
import json
import random
import re
from decimal import Decimal

import pytest
from jsonschema.validators import Draft202012Validator, validator_for

from constrained_spec.errors import (
    CompileLimitError,
    EmptyLanguageError,
    SchemaError,
    UnsupportedKeywordError,
)
from constrained_spec.grammar import ecma_regex
from constrained_spec.grammar.formats import FORMAT_PATTERNS, SPEC_FORMATS
from constrained_spec.grammar.json_schema import SchemaOptions, SchemaRegex, schema_to_regex
from constrained_spec.grammar.numeric_ranges import decimal_range, int_bounds, integer_range


def dumps(v) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def is_valid(schema, value) -> bool:
    cls = validator_for(schema, default=Draft202012Validator)
    return cls(schema).is_valid(value)


def check(schema, good=(), bad=(), options=None) -> SchemaRegex:
    """Compile; every `good` value must match, no `bad` value may match, and every value
    that matches must be valid for jsonschema."""
    res = schema_to_regex(schema, options)
    rx = re.compile(res.regex)
    for v in good:
        assert is_valid(schema, v), f"test bug: {v!r} is not valid"
        assert rx.fullmatch(dumps(v)), f"valid value rejected: {dumps(v)} by {res.regex[:300]}"
    for v in bad:
        if rx.fullmatch(dumps(v)):
            assert is_valid(schema, v), f"FALSE ACCEPT: {dumps(v)} by {res.regex[:300]}"
            raise AssertionError(f"expected {dumps(v)} to be rejected (restriction), regex {res.regex[:300]}")
    return res


def assert_sound(schema, texts, options=None):
    """No text accepted by the regex may be invalid."""
    res = schema_to_regex(schema, options)
    rx = re.compile(res.regex)
    for t in texts:
        if rx.fullmatch(t):
            v = json.loads(t)
            assert is_valid(schema, v), f"FALSE ACCEPT {t!r} for {schema}"
    return res


# ---------------------------------------------------------------------------
# API and basics


def test_api_types_and_json_text_input():
    res = schema_to_regex('{"type": "integer"}')
    assert isinstance(res, SchemaRegex)
    assert res.unenforced == ()
    assert res.recursion_depth == 0
    assert re.fullmatch(res.regex, "-12")
    assert not re.fullmatch(res.regex, "1.5")


def test_invalid_schema_raises_schema_error():
    with pytest.raises(SchemaError):
        schema_to_regex({"type": "integr"})
    with pytest.raises(SchemaError):
        schema_to_regex("{not json")
    with pytest.raises(SchemaError):
        schema_to_regex({"minLength": -1})


def test_boolean_schemas():
    res = check(True, good=[1, "a", None, [1, {"a": 2}], {"x": [1]}])
    assert res.regex
    with pytest.raises(EmptyLanguageError):
        schema_to_regex(False)
    check({"type": "object", "properties": {"a": False, "b": True}}, good=[{}, {"b": 1}], bad=[{"a": 1}])


def test_type_single_and_list():
    check({"type": "null"}, good=[None], bad=[0, "null", False])
    check({"type": "boolean"}, good=[True, False], bad=[0, "true", None])
    check({"type": ["string", "null"]}, good=["x", None, ""], bad=[1, [], {}])
    check({"type": "number"}, good=[0, -1, 1.5, 1e10, -0.25], bad=["1", None])
    check({"type": "integer"}, good=[0, -7, 12345678901234567890], bad=[1.5, "1", True])


def test_string_escapes_and_lengths():
    check(
        {"type": "string", "minLength": 2, "maxLength": 3},
        good=["ab", "abc", 'a"', "é日本", "\n\t", "\\x"],
        bad=["a", "abcd", "", "日本語の"],
    )
    res = schema_to_regex({"type": "string", "maxLength": 1})
    # a surrogate pair written as two escapes is one code point: must not be counted as two
    assert not re.fullmatch(res.regex, '"\\ud83d\\ude00"')
    # the minLength side: two escapes may not satisfy minLength 2 with one code point
    res2 = schema_to_regex({"type": "string", "minLength": 2})
    assert not re.fullmatch(res2.regex, '"\\ud83d\\ude00"')


def test_properties_required_optional():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["b"],
    }
    check(
        schema,
        good=[{"b": "x"}, {"a": 1, "b": "x"}, {"a": 1, "b": "x", "c": True}, {"b": "", "c": False}],
        bad=[{}, {"a": 1}, {"a": "1", "b": "x"}, {"b": "x", "d": 1}],
    )


def test_all_optional_properties_every_subset():
    props = {k: {"type": "integer"} for k in "abcde"}
    schema = {"type": "object", "properties": props, "additionalProperties": False}
    res = schema_to_regex(schema)
    rx = re.compile(res.regex)
    for n in range(6):
        for sub in itertools.combinations("abcde", n):
            assert rx.fullmatch(dumps({k: 1 for k in sub})), sub
    assert not rx.fullmatch('{"a":1,}')
    assert not rx.fullmatch('{,"a":1}')
    assert not rx.fullmatch('{"a":1"b":1}')


def test_additional_properties_false_true_schema():
    base = {"type": "object", "properties": {"a": {"type": "integer"}}}
    check({**base, "additionalProperties": False}, good=[{}, {"a": 1}], bad=[{"b": 1}, {"a": 1, "b": 1}])
    check(
        {**base, "additionalProperties": {"type": "string"}},
        good=[{"a": 1, "b": "x"}, {"zz": "y"}],
        bad=[{"b": 1}, {"a": "x"}],
    )
    # additionalProperties: true -> extras with free-form values
    check({**base, "additionalProperties": True}, good=[{"a": 1, "b": [1, 2]}, {"q": {"r": None}}])
    # absent: declared properties only (a sound restriction) ...
    res = schema_to_regex(base)
    assert not re.fullmatch(res.regex, '{"a":1,"b":2}')
    # ... or the spec behaviour on request
    check(base, good=[{"a": 1, "b": 2}], options=SchemaOptions(additional_properties="spec"))
    # an extra property may never repeat a declared name with another schema
    res = schema_to_regex({**base, "additionalProperties": {"type": "string"}})
    assert not re.fullmatch(res.regex, '{"a":"x"}')
    assert not re.fullmatch(res.regex, '{"a":1,"a":"x"}')


def test_free_form_object_and_array():
    check({"type": "object"}, good=[{}, {"a": 1}, {"a": {"b": [1, "x"]}}], bad=[[], "x"])
    check({"type": "array"}, good=[[], [1, "a", None], [[1], {"a": 2}]], bad=[{}, 1])


def test_pattern_properties():
    schema = {
        "type": "object",
        "patternProperties": {"^x-": {"type": "integer"}},
        "additionalProperties": False,
    }
    check(schema, good=[{}, {"x-a": 1}, {"x-a": 1, "x-b": 2}], bad=[{"y": 1}, {"x-a": "s"}])
    schema2 = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "patternProperties": {".*": {"type": "string"}},
    }
    check(schema2, good=[{"name": "a", "other": "b"}, {"k": "v"}], bad=[{"k": 1}])


def test_property_names():
    check(
        {"type": "object", "propertyNames": {"enum": ["a", "b"]}, "additionalProperties": {"type": "integer"}},
        good=[{}, {"a": 1}, {"b": 2}],
        bad=[{"c": 1}, {"a": "x"}],
    )
    check(
        {"type": "object", "properties": {"abc": {"type": "integer"}, "x": {}}, "propertyNames": {"maxLength": 2}},
        good=[{}, {"x": 1}],
        bad=[{"abc": 1}],
    )


def test_enum_and_const_any_json_value():
    values = ["a", 1, 2.5, None, True, [1, "x"], {"k": [None]}, ""]
    check({"enum": values}, good=values, bad=["b", 3, False, [1], {"k": []}])
    check({"const": {"a": [1, 2]}}, good=[{"a": [1, 2]}], bad=[{"a": [2, 1]}, {}])
    check({"type": "string", "enum": ["a", 1, "b"]}, good=["a", "b"], bad=[1])
    check({"enum": ['quo"te', "back\\slash", "new\nline"]}, good=['quo"te', "back\\slash", "new\nline"])


def test_any_of_and_one_of():
    check(
        {"anyOf": [{"type": "integer", "maximum": 3}, {"type": "string", "maxLength": 1}]},
        good=[1, -5, "a", ""],
        bad=[4, "ab", None],
    )
    # disjoint by type
    check({"oneOf": [{"type": "string"}, {"type": "integer"}]}, good=["a", 1], bad=[None, 1.5])
    # discriminated objects
    check(
        {
            "oneOf": [
                {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
                {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}}, "required": ["kind"]},
            ]
        },
        good=[{"kind": "a"}, {"kind": "a", "x": 1}, {"kind": "b", "y": "s"}],
        bad=[{"kind": "c"}, {}],
    )
    # required-based branches: the other branch's key is forbidden
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
    }
    check(schema, good=[{"a": 1}, {"b": 2}], bad=[{"a": 1, "b": 2}, {}])
    # overlapping branches: each one minus the others (issue 49), exact
    check({"oneOf": [{"type": "integer"}, {"type": "integer", "minimum": 2}]}, good=[1, -3], bad=[2, 3, "a", 1.5])
    # partly overlapping branches: integers below 2 (not minimum 2), non-numbers and the non-integers
    # of at least 2, which no regex here writes: refused by name (before, they were dropped silently)
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex({"oneOf": [{"type": "integer"}, {"minimum": 2}]})
    assert ei.value.keyword == "oneOf" and "type number" in str(ei.value)
    check({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, good=["a", None, 1, -4], bad=[3, 2],
          options=SchemaOptions(allow_unenforced=True))
    # without a bound the non-integers are written: exact
    check({"oneOf": [{"type": "integer"}, {"type": "number"}]}, good=[1.5, -0.25], bad=[3, 0, "a"])
    # overlapping on counts: one count bound flipped is the negation (2026-12-05)
    check({"oneOf": [{"type": "array", "minItems": 1}, {"type": "array", "maxItems": 3}]},
          good=[[], [1, 2, 3, 4]], bad=[[1], [1, 2, 3], "a"])
    # overlapping where a negation cannot be written (uniqueItems) is refused by name
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex({"oneOf": [{"type": "array", "uniqueItems": True}, {"type": "array", "maxItems": 3}]})
    assert ei.value.keyword == "oneOf"
    # ... unless allow_unenforced
    res = schema_to_regex({"oneOf": [{"type": "array", "uniqueItems": True}, {"type": "array", "maxItems": 3}]},
                          SchemaOptions(allow_unenforced=True))
    assert res.unenforced


def test_one_of_with_enum_branches_is_exact():
    schema = {"oneOf": [{"enum": [1, 2, 3]}, {"enum": [3, 4]}]}
    check(schema, good=[1, 2, 4], bad=[3, 5])


def test_all_of_merges():
    schema = {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
            {"properties": {"a": {"maximum": 10}, "b": {"type": "string"}}},
        ]
    }
    check(schema, good=[{"a": 0}, {"a": 10, "b": "x"}], bad=[{"a": 11}, {"a": -1}, {}, {"b": "x"}])
    # additionalProperties in one branch applies to that branch's properties only
    s2 = {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}, "additionalProperties": False}], "type": "object"}
    check(s2, good=[{}, {"b": 1}], bad=[{"a": 1}])


def test_refs_defs_definitions_pointers():
    schema = {
        "$defs": {"pos": {"type": "integer", "minimum": 1}, "a/b": {"type": "string"}},
        "definitions": {"flag": {"type": "boolean"}},
        "type": "object",
        "properties": {
            "n": {"$ref": "#/$defs/pos"},
            "s": {"$ref": "#/$defs/a~1b"},
            "f": {"$ref": "#/definitions/flag"},
        },
        "required": ["n"],
    }
    check(schema, good=[{"n": 1}, {"n": 2, "s": "x", "f": True}], bad=[{"n": 0}, {"n": 1, "s": 1}])
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex({"$ref": "http://example.invalid/none.json"})
    assert ei.value.keyword == "$ref"
    assert "http://example.invalid/none.json" in str(ei.value)  # never fetched: refused by name
    with pytest.raises(SchemaError, match="#/nope"):
        schema_to_regex({"$ref": "#/nope"})


def test_recursion_unrolled_to_depth():
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["v"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    }
    opts = SchemaOptions(max_recursion_depth=2)
    res = check(
        schema,
        good=[{"v": 1}, {"v": 1, "kids": [{"v": 2}]}, {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}],
        bad=[{"v": 1, "kids": [{}]}],
        options=opts,
    )
    assert res.recursion_depth == 2
    too_deep = {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3, "kids": [{"v": 4}]}]}]}
    assert not re.fullmatch(res.regex, dumps(too_deep))


def test_pattern_translation_and_anchors():
    check({"type": "string", "pattern": "^[a-z]+$"}, good=["abc"], bad=["", "aB", "ab1"])
    check({"type": "string", "pattern": "b"}, good=["b", "abc", "xxb"], bad=["a", ""])
    check({"type": "string", "pattern": "^ab"}, good=["ab", "abz"], bad=["zab"])
    check({"type": "string", "pattern": "z$"}, good=["z", "az"], bad=["za"])
    check({"type": "string", "pattern": "^(foo|bar)$"}, good=["foo", "bar"], bad=["foobar", "fo"])
    check({"type": "string", "pattern": "^\\d{3}-\\d{2}$"}, good=["123-45"], bad=["12-345", "١٢٣-45"])
    check({"type": "string", "pattern": '^a"b\\\\c$'}, good=['a"b\\c'], bad=["abc"])
    for pat in ("(?=a)", "(?!a)b", "(a)\\1", "\\bword\\b"):
        with pytest.raises(UnsupportedKeywordError) as ei:
            schema_to_regex({"type": "string", "pattern": pat})
        assert ei.value.keyword == "pattern"
        assert "/pattern" in str(ei.value)


def test_pattern_with_length_bounds():
    check(
        {"type": "string", "pattern": "^[a-z]+$", "maxLength": 4, "minLength": 2},
        good=["ab", "abcd"],
        bad=["a", "abcde", "AB"],
    )
    check({"type": "string", "pattern": "^[0-9]{5}$", "maxLength": 5}, good=["12345"], bad=["1234"])
    check({"type": "string", "pattern": "x", "maxLength": 3}, good=["x", "xab"], bad=["abcx"])


def test_ecma_regex_random_strings_agree_with_python():
    rng = random.Random(0)
    patterns = ["^[a-c]{1,3}$", "a|b", "^(ab)*$", "[^x]", "^\\w+@\\w+\\.com$", "^.?$", "\\s", "^[\\-+]?\\d+$"]
    alphabet = ["a", "b", "c", "x", "@", ".", "com", " ", "-", "+", "1", "\n", '"', "\\"]
    for p in patterns:
        rx = re.compile(ecma_regex.search_regex(p))
        for _ in range(200):
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))
            enc = json.dumps(s, ensure_ascii=False)[1:-1]
            got = bool(rx.fullmatch(enc))
            want = bool(re.search(p, s)) and not (s.endswith("\n") and p.endswith("$"))
            if got:
                assert re.search(p, s), (p, s)  # soundness
            else:
                assert not want, (p, s)


def test_formats():
    cases = {
        "date": (["2024-02-29", "1999-12-31"], ["2023-02-29", "1999-13-01", "1999-1-01"]),
        "time": (["12:30:00Z", "23:59:59.5+02:00"], ["24:00:00Z", "12:30"]),
        "date-time": (["2020-01-01T00:00:00Z"], ["2020-01-01 00:00:00Z", "2020-01-01"]),
        "email": (["a.b@example.com"], ["a@", "@b.com", "a b@c.com"]),
        "uuid": (["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000"]),
        "uri": (["https://example.com/a?b=c#d"], ["example.com", "http://"]),
        "ipv4": (["192.168.0.1", "0.0.0.0"], ["256.1.1.1", "1.2.3"]),
        "ipv6": (["::1", "2001:db8::ff00:42:8329", "1:2:3:4:5:6:7:8"], ["1:2:3:4:5:6:7:8:9", ":::"]),
        "hostname": (["example.com", "a-b.c"], ["-ab.com", "a..b"]),
    }
    fc = Draft202012Validator.FORMAT_CHECKER
    for fmt, (good, bad) in cases.items():
        schema = {"type": "string", "format": fmt}
        res = schema_to_regex(schema)
        rx = re.compile(res.regex)
        for g in good:
            assert rx.fullmatch(dumps(g)), (fmt, g)
        for b in bad:
            assert not rx.fullmatch(dumps(b)), (fmt, b)
        for g in good:
            # accepted strings also pass the jsonschema format checkers (where available)
            try:
                ok = fc.conforms(g, fmt)
            except Exception:  # pragma: no cover
                ok = True
            assert ok, (fmt, g)
    strict = SchemaOptions(unknown_formats="error")
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex({"type": "string", "format": "made-up"}, strict)
    assert ei.value.keyword == "format"
    res = schema_to_regex(
        {"type": "string", "format": "made-up"}, SchemaOptions(unknown_formats="error", allow_unenforced=True)
    )
    assert res.unenforced == ("/format",)
    assert set(FORMAT_PATTERNS) >= {"date", "time", "date-time", "email", "uuid", "uri", "ipv4", "ipv6", "hostname"}


def test_integer_ranges_exact():
    for lo, hi in [(0, 10), (-5, 5), (7, 123), (-1000, -37), (None, 0), (3, None), (99, 101)]:
        schema = {"type": "integer"}
        if lo is not None:
            schema["minimum"] = lo
        if hi is not None:
            schema["maximum"] = hi
        rx = re.compile(schema_to_regex(schema).regex)
        for v in range(-1200, 1200):
            assert bool(rx.fullmatch(str(v))) == is_valid(schema, v), (schema, v)
    check({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3}, good=[1, 2], bad=[0, 3])


def test_number_ranges_exact_for_decimals():
    schema = {"type": "number", "minimum": -1.5, "exclusiveMaximum": 2.25}
    rx = re.compile(schema_to_regex(schema).regex)
    for i in range(-300, 300):
        for txt in (str(Decimal(i) / 100), str(Decimal(i) / 10), str(i)):
            v = json.loads(txt)
            if rx.fullmatch(txt):
                assert is_valid(schema, v), txt
            elif Decimal(txt) >= Decimal("-1.5") and Decimal(txt) < Decimal("2.25") and not txt.startswith("-0"):
                raise AssertionError(f"{txt} rejected")
    # draft-04 boolean exclusiveMinimum
    d4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "number", "minimum": 0, "exclusiveMinimum": True}
    check(d4, good=[0.5, 1], bad=[0, -1])


def test_numeric_range_helpers_bruteforce():
    rng = random.Random(1)
    vals = ["0", "1", "5", "10", "0.5", "2.75", "12.3", "0.05", "100"]
    cands = [str(i) for i in range(0, 30)] + [f"{i}.{f}" for i in range(0, 15) for f in ("0", "05", "5", "25", "75", "9", "123")]
    cands += ["-" + c for c in cands if c != "0"]
    for _ in range(300):
        lo = Decimal(rng.choice(vals)) * rng.choice([1, -1]) if rng.random() < 0.8 else None
        hi = Decimal(rng.choice(vals)) * rng.choice([1, -1]) if rng.random() < 0.8 else None
        ls, hs = rng.random() < 0.5, rng.random() < 0.5
        q = rng.choice([None, 1, 2])
        rx = decimal_range(lo, ls, hi, hs, q)
        ilo, ihi = int_bounds(lo, ls, hi, hs)
        irx = integer_range(ilo, ihi)
        for c in cands:
            d = Decimal(c)
            inr = (lo is None or (d > lo if ls else d >= lo)) and (hi is None or (d < hi if hs else d <= hi))
            fd = len(c.split(".")[1]) if "." in c else 0
            want = inr and (q is None or fd <= q) and not re.fullmatch(r"-0(\.0*)?", c)
            assert bool(rx and re.fullmatch(rx, c)) == want, (lo, ls, hi, hs, q, c, rx)
            iwant = inr and "." not in c and c != "-0"
            assert bool(irx and re.fullmatch(irx, c)) == iwant, (ilo, ihi, c)


def test_multiple_of():
    check({"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 30}, good=[0, 5, 30], bad=[3, 35])
    check({"type": "integer", "multipleOf": 10}, good=[0, 10, -20, 1230], bad=[5, 11])
    check({"type": "integer", "multipleOf": 4, "minimum": 0}, good=[0, 4, 100, 1000], bad=[2, 102])
    check({"type": "number", "multipleOf": 0.01}, good=[0, 1.25, -3.5], bad=[0.125])
    check({"type": "number", "multipleOf": 1}, good=[0, 7], bad=[1.5])
    check({"type": "number", "multipleOf": 0.5, "minimum": 0, "maximum": 2}, good=[0, 0.5, 2], bad=[0.25, 2.5])
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex({"type": "number", "multipleOf": 0.3})
    assert ei.value.keyword == "multipleOf"


def test_arrays_items_prefix_min_max():
    check(
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
        good=[[1], [1, 2, 3]],
        bad=[[], [1, 2, 3, 4], ["a"]],
    )
    check(
        {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        good=[[], ["a"], ["a", 1]],
        bad=[[1], ["a", 1, 2]],
    )
    check(
        {"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "boolean"}, "minItems": 2},
        good=[["a", True], ["a", True, False]],
        bad=[["a"], ["a", 1]],
    )
    # draft-07 tuple form
    d7 = {"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "string"}], "additionalItems": False}
    check(d7, good=[[], ["a"]], bad=[["a", 1], [1]])


def test_contains_and_unique_items():
    check({"type": "array", "items": {"type": "integer"}, "contains": {"minimum": 5}}, good=[[5], [1, 2, 6], [9, 1]], bad=[[], [1, 2]])
    check(
        {"type": "array", "items": {"enum": ["a", "b", "c"]}, "uniqueItems": True},
        good=[[], ["a"], ["a", "c"], ["a", "b", "c"]],
        bad=[["a", "a"], ["d"]],
    )
    check({"type": "array", "uniqueItems": True, "maxItems": 1}, good=[[], [1]], bad=[[1, 2]])
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex({"type": "array", "items": {"type": "string"}, "uniqueItems": True})
    assert ei.value.keyword == "uniqueItems"


def test_min_max_properties():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
        "maxProperties": 2,
        "minProperties": 1,
    }
    check(schema, good=[{"a": 1}, {"a": 1, "b": 2}])
    assert_sound(schema, ['{"a":1,"b":2,"c":3}', "{}", '{"c":1}', '{"b":1,"c":2}'])


def test_not_dependent_if_then_else():
    check({"not": {"type": "string"}, "type": ["string", "integer"]}, good=[1], bad=["a"])
    check({"type": "string", "not": {"enum": ["a", "b"]}}, good=["c", "", "ab"], bad=["a", "b"])
    check(
        {"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
        good=[{}, {"b": 1}, {"a": 1, "b": 2}],
        bad=[{"a": 1}],
    )
    check(
        {
            "type": "object",
            "properties": {"kind": {"enum": ["x", "y"]}, "n": {"type": "integer"}},
            "required": ["kind"],
            "if": {"properties": {"kind": {"const": "x"}}},
            "then": {"required": ["n"]},
        },
        good=[{"kind": "x", "n": 1}],
        bad=[{"kind": "x"}],
    )
    # not of a pattern: the strings it does not match (a DFA complement, issue 49)
    check({"type": "string", "not": {"pattern": "^a"}}, good=["", "ba", "b"], bad=["a", "ab"])
    # not of one count bound: the bound flipped (2026-12-05)
    check({"type": "array", "not": {"minItems": 2}}, good=[[], [1]], bad=[[1, 2], [1, 2, 3]])
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex({"type": "array", "not": {"uniqueItems": True}})
    assert ei.value.keyword == "not"


def test_unevaluated_properties_static_only():
    schema = {
        "type": "object",
        "allOf": [{"properties": {"a": {"type": "integer"}}}],
        "properties": {"b": {"type": "string"}},
        "unevaluatedProperties": False,
    }
    check(schema, good=[{"a": 1}, {"a": 1, "b": "x"}], bad=[{"c": 1}])
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex({"anyOf": [{"properties": {"a": {}}}], "unevaluatedProperties": False})
    assert ei.value.keyword == "unevaluatedProperties"


@pytest.mark.parametrize("decoy", [False, True])
def test_unevaluated_properties_resolves_refs_against_each_subschemas_own_id(decoy):
    """The static walk behind ``unevaluatedProperties`` resolves a relative ``$ref`` against the
    base URI that the ``$id`` of its own subschema sets, as the validator does.  It once used the
    root's base: ``y.json`` then meant ``http://example.com/y.json`` -- a refused retrieval, or,
    with a decoy there that has an ``anyOf``, a refusal as "dynamic"."""
    defs = {
        "x": {"$id": "http://example.com/a/x.json", "allOf": [{"$ref": "y.json"}]},
        "y": {"$id": "http://example.com/a/y.json", "properties": {"b": {"type": "integer"}}},
    }
    if decoy:
        defs["decoy"] = {"$id": "http://example.com/y.json", "anyOf": [{"properties": {"c": {}}}]}
    schema = {"$id": "http://example.com/root.json", "type": "object", "$ref": "#/$defs/x",
              "unevaluatedProperties": False, "$defs": defs}
    check(schema, good=[{}, {"b": 1}], bad=[{"c": 1}, {"b": "x"}])


@pytest.mark.parametrize("where", ["allOf", "properties"])
def test_an_unusable_nested_id_raises_naming_it(where):
    """A nested ``$id`` that is no URI reference is a schema error naming that ``$id``, as a root
    one is.  It once passed unnoticed (a relative ``$ref`` below it then failed with an error
    naming the ``$ref``)."""
    sub = {"$id": "http://[bad", "type": "object", "properties": {"a": {"$ref": "y.json"}}, "required": ["a"]}
    if where == "allOf":
        schema, pointer = {"allOf": [sub]}, "/allOf/0/$id"
    else:
        schema, pointer = {"type": "object", "properties": {"p": sub}, "required": ["p"]}, "/properties/p/$id"
    with pytest.raises(SchemaError, match=r"\$id 'http://\[bad' cannot be used as a base URI") as ei:
        schema_to_regex(schema)
    assert ei.value.pointer == pointer


def test_pattern_cache_is_bounded():
    """Schema patterns arrive with requests: the compiled-pattern cache must not grow without bound."""
    from constrained_spec.grammar.json_schema.py_regex import PY_RE_CACHE_SIZE
    from constrained_spec.grammar.linear_regex import compile_pattern

    for i in range(PY_RE_CACHE_SIZE + 50):
        compile_pattern(f"^x{i}$")
    info = compile_pattern.cache_info()
    assert info.maxsize == PY_RE_CACHE_SIZE and info.currsize <= PY_RE_CACHE_SIZE


def test_ignored_annotations_and_nullable_is_not_honoured():
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://example.com/s",
        "$comment": "c",
        "title": "t",
        "description": "d",
        "default": 1,
        "examples": [1],
        "type": "integer",
    }
    check(schema, good=[1], bad=["1"])
    # OpenAPI's `nullable` is not JSON Schema: jsonschema ignores it, so do we (sound)
    check({"type": "string", "nullable": True}, good=["a"], bad=[None])


def test_whitespace_modes():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}, "required": ["a"]}
    compact = schema_to_regex(schema)
    assert re.fullmatch(compact.regex, '{"a":[1,2]}')
    assert not re.fullmatch(compact.regex, '{"a": [1, 2]}')
    flex = schema_to_regex(schema, SchemaOptions(whitespace="flexible", max_whitespace=2))
    assert re.fullmatch(flex.regex, '{ "a" : [1, 2] }')
    assert re.fullmatch(flex.regex, '{\n "a": [\n 1,\n 2\n]\n}')
    assert not re.fullmatch(flex.regex, '{   "a":[1]}')


def test_property_order_any():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}
    res = schema_to_regex(schema)
    assert not re.fullmatch(res.regex, '{"b":1,"a":2}')
    res2 = schema_to_regex(schema, SchemaOptions(property_order="any"))
    assert re.fullmatch(res2.regex, '{"b":1,"a":2}')
    assert re.fullmatch(res2.regex, '{"a":1,"b":2}')
    assert not re.fullmatch(res2.regex, '{"a":1,"a":2}')


def test_limits():
    big = {"enum": [f"value-{i}" for i in range(5000)]}
    with pytest.raises(CompileLimitError):
        schema_to_regex(big, SchemaOptions(max_regex_chars=1000))
    many = {"type": "object", "anyOf": [{"required": [f"k{i}"]} for i in range(20)] * 1}
    many["allOf"] = [{"anyOf": [{"required": ["a"]}, {"required": ["b"]}]} for _ in range(12)]
    with pytest.raises(CompileLimitError):
        schema_to_regex(many)


def test_regexes_use_the_portable_dialect():
    schemas = [
        {"type": "string", "pattern": "^\\d+\\w*\\s?$"},
        {"type": "object", "additionalProperties": {"type": "integer"}},
        {"type": "string", "format": "date-time"},
        {"type": "number", "minimum": 0.5},
    ]
    for s in schemas:
        r = schema_to_regex(s).regex
        assert "(?=" not in r and "(?!" not in r and "(?<" not in r
        assert "\\d" not in r and "\\w" not in r and "\\s" not in r
        assert not re.search(r"(?<!\\)\.", r.replace("\\\\", "")), r  # no bare '.'


def test_random_instances_never_falsely_accepted():
    """Mutation-style fuzz: random values against a mixed schema; every match is valid."""
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 99},
            "name": {"type": "string", "maxLength": 3, "pattern": "^[a-c]+$"},
            "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "kind": {"oneOf": [{"const": "a"}, {"type": "null"}]},
        },
        "required": ["id"],
        "additionalProperties": False,
    }
    rx = re.compile(schema_to_regex(schema).regex)
    rng = random.Random(7)
    pools = {
        "id": [0, 1, 50, 99, 100, -1, 1.5, "1", None],
        "name": ["", "a", "abc", "abcd", "d", "ab\n", 1],
        "tags": [[], ["x"], ["x", "y"], ["x", "y", "x"], ["z"], "x"],
        "ratio": [0, 0.5, 1, 1.0001, -0.1, 0.0000001, 1e-7],
        "kind": ["a", None, "b", 1],
        "extra": [1],
    }
    accepted = 0
    for _ in range(3000):
        obj = {k: rng.choice(v) for k, v in pools.items() if rng.random() < 0.6}
        t = dumps(obj)
        if rx.fullmatch(t):
            accepted += 1
            assert is_valid(schema, obj), t
    assert accepted > 20


def test_pattern_intersections_with_prefixes_and_formats():
    check(
        {"type": "string", "format": "uri", "pattern": "^(https|file)://"},
        good=["https://example.com/a", "file://host/x"],
        bad=["http://example.com", "ftp://x.org", "https//x"],
    )
    check(
        {"type": "string", "allOf": [{"pattern": "^[a-z]+$"}, {"pattern": "^(ab|cd|e1)$"}]},
        good=["ab", "cd"],
        bad=["e1", "abc", ""],
    )
    # any two patterns: intersected by a DFA (issue 49)
    check({"type": "string", "allOf": [{"pattern": "^[a-z0-9]+$"}, {"pattern": "[0-9]"}]},
          good=["a1", "9", "ab7c"], bad=["ab", "", "a-1"])
    with pytest.raises(EmptyLanguageError):
        schema_to_regex({"type": "string", "allOf": [{"pattern": "^[a-z]+$"}, {"pattern": "[0-9]"}]})


def test_unanchored_nullable_pattern_matches_everything():
    res = check({"type": "string", "pattern": "[A-Za-z0-9_-]*"}, good=["", "!!", "abc"])
    assert len(res.regex) < 200


def test_min_properties_on_free_form_objects():
    check({"type": "object", "minProperties": 1}, good=[{"a": 1}, {"a": 1, "b": [2]}], bad=[{}])
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex({"type": "object", "minProperties": 2})
    assert ei.value.keyword == "minProperties"


def test_if_then_else_with_negated_discriminator():
    schema = {
        "type": "object",
        "properties": {"kind": {"enum": ["x", "y", "z"]}, "n": {"type": "integer"}, "s": {"type": "string"}},
        "required": ["kind"],
        "if": {"properties": {"kind": {"const": "x"}}},
        "then": {"required": ["n"]},
        "else": {"required": ["s"]},
    }
    check(schema, good=[{"kind": "x", "n": 1}, {"kind": "y", "s": "a"}, {"kind": "z", "n": 2, "s": "b"}],
          bad=[{"kind": "x", "s": "a"}, {"kind": "y", "n": 1}])


# -- format policy: spec-defined formats are enforced or refused, other names are annotations


def test_non_standard_format_is_an_ignored_annotation():
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "format": "int32"}, "c": {"type": "string", "format": "color"}},
        "required": ["n", "c"],
    }
    res = check(schema, good=[{"n": 5, "c": "not a colour at all"}], bad=[{"n": "5", "c": "x"}])
    # reported as ignored annotations, not as unenforced (unsound) keywords
    assert res.ignored_formats == (("/properties/c/format", "color"), ("/properties/n/format", "int32"))
    assert res.unenforced == ()
    from constrained_spec.grammar import output_spec

    assert output_spec(schema).ignored_formats == res.ignored_formats  # reaches the public spec


def test_spec_format_that_cannot_be_enforced_is_refused_with_its_pointer(monkeypatch):
    # every format JSON Schema defines has a (restricting) pattern today; take one away to
    # check that a defined format without a pattern is refused, never ignored
    from constrained_spec.grammar import formats

    assert SPEC_FORMATS <= set(FORMAT_PATTERNS)
    monkeypatch.delitem(formats.FORMAT_PATTERNS, "uri-template")
    schema = {"type": "object", "properties": {"link": {"type": "string", "format": "uri-template"}}}
    with pytest.raises(UnsupportedKeywordError) as ei:
        schema_to_regex(schema)
    assert ei.value.keyword == "format"
    assert ei.value.pointer == "/properties/link/format"
    assert "/properties/link/format" in str(ei.value) and "uri-template" in str(ei.value)
    # opt-in: recorded as unenforced (the caller validates the finished value)
    res = schema_to_regex(schema, SchemaOptions(allow_unenforced=True))
    assert res.unenforced == ("/properties/link/format",)
    assert res.ignored_formats == ()


def test_known_formats_are_enforced_not_ignored():
    for fmt, good, bad in [
        ("date", "2024-02-29", "2023-02-30"),
        ("uri-template", "http://example.com/{term:1}/{+path}", "{a,,b}"),
        ("regex", "^(a|b)*[0-9]{2,}$", "^(abc]"),
        ("ipv4", "10.0.0.1", "10.0.0.256"),
    ]:
        res = schema_to_regex({"type": "string", "format": fmt})
        assert res.ignored_formats == () and res.unenforced == ()
        rx = re.compile(res.regex)
        assert rx.fullmatch(dumps(good)), (fmt, good)
        assert not rx.fullmatch(dumps(bad)), (fmt, bad)


def test_uri_template_and_regex_formats_are_sound():
    fc = Draft202012Validator.FORMAT_CHECKER
    ut = re.compile(schema_to_regex({"type": "string", "format": "uri-template"}).regex)
    for t in ["", "a%41b", "{+var}", "{#var}", "{x,y}", "{a.b}", "{v:1000}", "{var*}", "a'b", "caf\u00e9/{x}"]:
        assert ut.fullmatch(dumps(t)), t
    for t in ["{}", "{a,,b}", "{v:0}", "{v:10000}", "foo}bar", "{a..b}", "{v:01}", "a b", "{a,}",
              "{var=def}", "{,+var}", "{!x}", "a\\b", "a\"b", "%4"]:
        assert not ut.fullmatch(dumps(t)), t
    rx = re.compile(schema_to_regex({"type": "string", "format": "regex"}).regex)
    for t in ["^[a-z]+$", "(a|b)*c{2,}?", "((x))", "(?:ab|)", "^abc$|x", "[0-9A-Z_]", ".*"]:
        assert rx.fullmatch(dumps(t)), t
        re.compile(t)  # valid for Python too
        if "regex" in fc.checkers:
            assert fc.conforms(t, "regex"), t
    for t in ["(((x)))", "a**", "[z-a]", "a{2,1}", ")", "(", "[abc", "\\d", "a{"]:
        assert not rx.fullmatch(dumps(t)), t


def test_unknown_formats_option_values():
    with pytest.raises(ValueError):
        SchemaOptions(unknown_formats="ignore")
    assert SchemaOptions().unknown_formats == "annotation"


def test_enum_and_const_values_must_match_an_enforced_format():
    # the jsonschema oracle ignores `format`; the compiler must not emit a listed value
    # that its own format pattern rejects
    res = schema_to_regex({"enum": ["abc", "2020-01-01", 5], "format": "date"})
    rx = re.compile(res.regex)
    assert rx.fullmatch('"2020-01-01"') and rx.fullmatch("5")
    assert not rx.fullmatch('"abc"')
    with pytest.raises(EmptyLanguageError):
        schema_to_regex({"const": "not an e-mail", "format": "email"})
    # a non-standard format stays an annotation for enums too
    assert re.fullmatch(schema_to_regex({"const": "abc", "format": "int32"}).regex, '"abc"')


def test_uri_format_accepts_rootless_and_empty_authority_forms():
    check(
        {"type": "string", "format": "uri"},
        good=["mailto:user@example.com", "urn:isbn:0451450523", "did:example:123", "file:///etc/hosts",
              "https://example.com/a?b=c#d"],
        bad=["example.com", "http://", "file://", "//host/x", "/abs", "a b:c", "x:", ":x", "1a:b"],
    )


def test_not_required_forbids_an_undeclared_name():
    # `not: {required: [a, b]}` holds when either is absent: forbid the one the object does
    # not declare, so that the declared one can still be generated
    schema = {
        "type": "object",
        "properties": {"body": {"type": "string"}},
        "not": {"required": ["body", "bodyValue"]},
    }
    check(schema, good=[{"body": "x"}, {}], bad=[{"body": "x", "bodyValue": "y"}])
    schema = {"type": "object", "properties": {"a": {}, "b": {}}, "required": ["b"], "not": {"required": ["a", "b"]}}
    check(schema, good=[{"b": 1}], bad=[{"a": 1, "b": 1}])


def test_excluding_integers_zero_and_one_keeps_booleans():
    """``1 == True`` in Python: excluding the numbers 0 and 1 must not exclude the booleans."""
    schema = {"type": ["boolean", "string"], "not": {"enum": [0, 1]}}
    check(schema, good=[True, False, "x"], bad=[0, 1, None])
