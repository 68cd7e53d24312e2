"""Complement and intersection of regular languages in the JSON Schema compiler (issue 49).

Oracles that cannot share the compiler's bugs:

* :mod:`.content_dfa` against Python ``re``: random small patterns, random strings, the DFA of an
  intersection / a difference spelled back as a regex must full-match exactly where ``re`` says
  both / the first but not the second match;
* schemas of the forms ``not``, ``oneOf`` (overlapping branches) and ``if``/``then``/``else``
  against ``jsonschema``: for random schemas and random JSON values, the compiled regex accepts the
  value's compact text exactly where the validator says it is valid (both directions), or the
  schema is refused by name (never a wider or silently narrower language);
* negative controls that the same checker rejects: a ``not`` compiled without its context (the
  sibling ``type``), a ``oneOf`` compiled as ``anyOf``, a complement over the texts that forgets the
  string's other spellings.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any, Optional

import jsonschema
import pytest
from grammar_oracles import rand_pattern

from constrained_spec.errors import EmptyLanguageError, UnsupportedKeywordError
from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex
from constrained_spec.grammar.json_schema.content_dfa import (
    DfaTooLarge,
    dfa_of_node,
    product,
    to_node,
)
from constrained_spec.grammar.json_schema.negation import search_node


def dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


# -- content DFAs against Python re -----------------------------------------------------------

ATOMS = ["a", "b", "c", "[ab]", "[^a]", "."]
REPS = ["*", "+", "?", "{1,2}"]


def _anchored(p: str) -> str:
    return "^(" + p + ")$" if p else "^$"


STRINGS = ["".join(t) for n in range(5) for t in itertools.product("abcx", repeat=n)]


def _content_rx(node: Optional[tuple]) -> Optional[re.Pattern]:
    """The node spelled as JSON string content (ASCII letters spell themselves)."""
    if node is None:
        return None
    body = ecma.emit(node)
    return None if body is None else re.compile(body)


@pytest.mark.parametrize("seed", range(6))
def test_dfa_intersection_and_difference_match_re(seed):
    rng = random.Random(seed)
    for _ in range(25):
        pa, pb = _anchored(rand_pattern(rng, ATOMS, REPS)), _anchored(rand_pattern(rng, ATOMS, REPS))
        ra, rb = re.compile(pa), re.compile(pb)
        da, db = dfa_of_node(search_node(pa)), dfa_of_node(search_node(pb))
        for op, truth in ((lambda x, y: x and y, lambda s: bool(ra.search(s)) and bool(rb.search(s))),
                          (lambda x, y: x and not y, lambda s: bool(ra.search(s)) and not rb.search(s))):
            rx = _content_rx(to_node(product(da, db, op)))
            for s in STRINGS:
                got = rx is not None and rx.fullmatch(s) is not None
                assert got == truth(s), (pa, pb, s)


def test_dfa_unanchored_search_semantics():
    d = dfa_of_node(search_node("ab"))
    rx = _content_rx(to_node(d))
    assert rx is not None
    for s in STRINGS:
        assert (rx.fullmatch(s) is not None) == ("ab" in s), s


def test_dfa_state_bound_is_refused():
    with pytest.raises(DfaTooLarge):
        dfa_of_node(search_node("^[ab]*a[ab]{12}$"), max_states=400)  # the 13th-from-last letter: 2^13 states


# -- schemas against jsonschema ------------------------------------------------------------------

VALUES: list[Any] = [
    None, True, False, 0, 1, 2, 3, 5, 6, -1, 2.5, 4.5, 7.25,
    "", "a", "ab", "abc", "b", "ba", "admin", "xadminx", "customer", "a:b:1", "a:b", "test", "dead", "DEAD",
    "zz9", "0f3a", "é", 'q"', "a\\b", [], [1], ["a"], {}, {"a": 1},
]

LEAVES: list[dict[str, Any]] = [
    {"type": "null"}, {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
    {"type": ["string", "null"]}, {"type": "array"}, {"type": "object"},
    {"enum": ["a", "ab", 1, None]}, {"const": "admin"}, {"enum": [True]}, {"enum": ["test", "source"]},
    {"pattern": "^a"}, {"pattern": "b$"}, {"pattern": "admin"}, {"pattern": "^[0-9a-f]{4}$"},
    {"pattern": "^[^:]+:[^:]+:[0-9]+$"}, {"minLength": 2}, {"maxLength": 2}, {"minLength": 1, "maxLength": 3},
    {"maximum": 2}, {"minimum": 3}, {"exclusiveMaximum": 5}, {"exclusiveMinimum": 0},
    {"type": "string", "pattern": "^a"}, {"type": "string", "maxLength": 1}, {"type": "integer", "maximum": 2},
    {"required": ["a"]}, {"type": "string", "format": "email"},
]


#: leaves and contexts where the constructions claim exactness: strings, null, booleans, integers
#: with one bound (no numeric constants, no non-integer complements, no object/array constraints)
EXACT_LEAVES = [x for x in LEAVES if not ({"required", "type"} & set(x)) or x.get("type") in ("null", "string", "boolean")]
EXACT_LEAVES = [x for x in EXACT_LEAVES if not any(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                   for v in x.get("enum", []))] + [{"type": "integer", "maximum": 2}]
CONTEXTS = [{}, {}, {"type": "string"}, {"type": "integer"}, {"type": ["string", "number"]},
            {"type": "string", "pattern": "^[a-z]+$"}, {"maxLength": 3}]
EXACT_CONTEXTS = [{"type": "string"}, {"type": ["string", "null"]}, {"type": ["string", "boolean", "null"]},
                  {"type": "string", "pattern": "^[a-z]+$"}, {"type": "integer"}, {"type": ["integer", "string"]}]


def _rand_schema(rng: random.Random, leaves: list[dict[str, Any]], contexts: list[dict[str, Any]]) -> dict[str, Any]:
    form = rng.choice(["not", "not", "oneOf", "oneOf", "if"])
    ctx = rng.choice(contexts)
    if form == "not":
        return {**ctx, "not": rng.choice(leaves)}
    if form == "oneOf":
        return {**ctx, "oneOf": [rng.choice(leaves) for _ in range(rng.choice([2, 2, 3]))]}
    s = {**ctx, "if": rng.choice(leaves), "then": rng.choice(leaves)}
    if rng.random() < 0.7:
        s["else"] = rng.choice(leaves)
    return s


def check_language(schema: dict[str, Any], regex: Optional[str]) -> list[str]:
    """The disagreements of a regex (None: no value) with jsonschema on VALUES."""
    validator = jsonschema.Draft202012Validator(schema)
    rx = None if regex is None else re.compile(regex)
    out = []
    for v in VALUES:
        acc = rx is not None and rx.fullmatch(dumps(v)) is not None
        ok = validator.is_valid(v)
        if acc != ok:
            out.append(f"{'accepted' if acc else 'rejected'} {dumps(v)} ({'valid' if ok else 'invalid'})")
    return out


def compiled(schema: dict[str, Any]) -> Optional[str]:
    """The schema's regex; None where it admits no value; UnsupportedKeywordError passes."""
    try:
        return schema_to_regex(schema).regex
    except EmptyLanguageError:
        return None


def sweep(seed: int, n: int, exact_world: bool) -> dict[str, int]:
    """Random schemas of the three forms, each checked on VALUES: never an invalid value accepted;
    in the exact world (``EXACT_LEAVES``/``EXACT_CONTEXTS``) never a valid one rejected either.
    Counts of exact / narrower / refused schemas."""
    rng = random.Random(seed)
    counts = {"exact": 0, "narrower": 0, "refused": 0}
    for _ in range(n):
        schema = _rand_schema(rng, EXACT_LEAVES if exact_world else LEAVES, EXACT_CONTEXTS if exact_world else CONTEXTS)
        try:
            regex = compiled(schema)
        except UnsupportedKeywordError as e:
            assert e.keyword in ("not", "oneOf", "if", "pattern", "format"), (schema, e)
            counts["refused"] += 1
            continue
        bad = check_language(schema, regex)
        if "format" in json.dumps(schema):  # the compiler asserts a format's pattern, the validator does not
            bad = [b for b in bad if b.startswith("accepted")]
        assert not [b for b in bad if b.startswith("accepted")], (schema, bad[:5], (regex or "")[:300])
        if exact_world:
            assert not bad, (schema, bad[:5], (regex or "")[:300])
        counts["narrower" if bad else "exact"] += 1
    return counts


@pytest.mark.parametrize("seed", range(3))
def test_random_schemas_exact_world(seed):
    counts = sweep(seed, 40, exact_world=True)
    assert counts["exact"] >= 30, counts  # the rest refused by name


@pytest.mark.parametrize("seed", range(2))
def test_random_schemas_never_wider(seed):
    """All leaves (object constraints, numeric constants, non-integers): never wider; narrower only
    where the compiler's older, documented restrictions apply (a oneOf type it cannot tell apart,
    an ``else`` whose ``if`` it cannot negate)."""
    counts = sweep(100 + seed, 40, exact_world=False)
    assert counts["exact"] >= 28, counts


@pytest.mark.slow  # ~3,000 random schemas: make test-slow
def test_random_schemas_long():
    counts = sweep(1000, 1500, exact_world=True)
    assert counts["exact"] >= 1200, counts
    counts = sweep(2000, 1500, exact_world=False)
    assert counts["exact"] >= 1200, counts


# -- examples from real schemas, and the negative controls --------------------------------------

EXAMPLES = [
    {"type": "string", "not": {"pattern": ".{14,}(?:ghlint|plugin)"}},
    {"type": "string", "pattern": "^[a-z]+$", "not": {"enum": ["test", "source", "include"]}},
    {"type": "string", "minLength": 1, "not": {"enum": ["upstart"]}},
    {"type": "string", "maxLength": 100, "not": {"enum": ["ab"]}},
    {"oneOf": [{"maximum": 2}, {"maximum": 5}]},
    {"items": {"oneOf": [{"pattern": "customer"}, {"pattern": "admin"}]}},
    {"oneOf": [{"type": "string", "pattern": "^[A-Fa-f\\d]{4}$"}, {"type": "string"}]},
    {"oneOf": [{"type": "string", "pattern": "^[0-9a-zA-Z_-]{1,8}$"},
               {"type": "string", "minLength": 4, "maxLength": 9, "pattern": ".*\\{\\{.+}}.*"}]},
    {"oneOf": [{"not": {"type": "string"}}, {"type": "string", "minLength": 2}]},
    {"type": "string", "if": {"pattern": "^a"}, "then": {"maxLength": 2}, "else": {"minLength": 3}},
    {"type": "string", "pattern": "a", "format": "uuid"},
    {"type": "string", "pattern": "^a", "allOf": [{"pattern": "b$"}, {"pattern": "c"}]},
]


@pytest.mark.parametrize("schema", EXAMPLES, ids=range(len(EXAMPLES)))
def test_examples_are_exact(schema):
    bad = check_language(schema, compiled(schema))
    if "format" in schema:
        bad = [b for b in bad if b.startswith("accepted")]
    assert not bad, bad


def test_control_not_without_its_context_is_caught():
    """``not`` compiled without its sibling ``type``: the checker finds the values of other types."""
    schema = {"type": "integer", "not": {"maximum": 2}}
    assert not check_language(schema, compiled(schema))
    assert check_language(schema, compiled({"not": {"maximum": 2}}))


def test_control_oneof_as_anyof_is_caught():
    schema = {"oneOf": [{"maximum": 2}, {"maximum": 5}]}
    assert not check_language(schema, compiled(schema))
    assert check_language(schema, compiled({"anyOf": schema["oneOf"]}))


def test_control_text_complement_forgets_other_spellings():
    """A complement of *texts* is not one of *values*: ``"\\u0061b"`` is the value ``"ab"``. The
    compiled regex spells the strings it keeps canonically, so no spelling of an excluded value
    gets through; the text-level complement (below) lets one through."""
    schema = {"type": "string", "not": {"enum": ["ab"]}}
    rx = re.compile(compiled(schema) or "")
    assert not rx.fullmatch('"\\u0061b"') and not rx.fullmatch('"ab"')
    text_complement = re.compile(r'"(?!ab")([^"\\]|\\.)*"')  # strings whose *text* is not "ab"
    assert text_complement.fullmatch('"\\u0061b"')
    assert json.loads('"\\u0061b"') == "ab"


def test_refusals_name_keyword_and_pointer():
    with pytest.raises(UnsupportedKeywordError) as e:
        schema_to_regex({"not": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}})
    assert e.value.keyword == "not"
    with pytest.raises(UnsupportedKeywordError) as e:
        schema_to_regex({"type": "string", "not": {"pattern": "^[ab]*a[ab]{12}$"}})
    assert e.value.keyword == "not" and "/not" in str(e.value)


# -- uniqueItems over finite item domains: arrays as sets, every order --------------------------

UNIQUE_SCHEMAS = [
    {"type": "array", "uniqueItems": True, "items": {"enum": ["a", "b", 1]}},
    {"type": "array", "uniqueItems": True, "items": {"enum": ["a", "b", 1]}, "minItems": 2},
    {"type": "array", "uniqueItems": True, "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2},
    {"type": "array", "uniqueItems": True, "items": {"enum": ["x", "y", "z", None]}, "maxItems": 3},
    {"type": "array", "uniqueItems": True, "items": {"enum": [1, 2, 3, 4, 5]}, "minItems": 4},
]


@pytest.mark.parametrize("schema", UNIQUE_SCHEMAS, ids=range(len(UNIQUE_SCHEMAS)))
def test_unique_items_over_finite_domains_is_exact(schema):
    regex = compiled(schema)
    assert regex is not None
    rx = re.compile(regex)
    validator = jsonschema.Draft202012Validator(schema)
    pool = ["a", "b", 1, 2, 3, 4, 5, True, False, None, "x", "y", "z"]
    seen_valid = 0
    for n in range(5):
        for t in itertools.product([1, 2, 3, 4, 5, "a"] if n > 3 else pool, repeat=n):
            v = list(t)
            ok = validator.is_valid(v)
            seen_valid += ok
            assert (rx.fullmatch(dumps(v)) is not None) == ok, v
    assert seen_valid > 0


def test_unique_items_control_one_order_is_caught():
    """The older construction (one order of the domain) misses the other orders."""
    schema = UNIQUE_SCHEMAS[1]
    validator = jsonschema.Draft202012Validator(schema)
    one_order = re.compile(r'\[("a"(,"b")?(,1)?|"b"(,1)?|1)\]')  # strictly ordered subsequences
    assert validator.is_valid([1, "a"]) and not one_order.fullmatch(dumps([1, "a"]))
    assert re.fullmatch(compiled(schema) or "", dumps([1, "a"]))


# -- not of a disjunction on objects, as a branch group ------------------------------------------

OBJECT_SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "not": {"required": ["a", "b"]}},
    {"properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "not": {"required": ["a", "b"]}},
    {"type": "object", "properties": {"kind": {"enum": ["x", "y"]}, "n": {"type": "integer"}},
     "if": {"properties": {"kind": {"const": "x"}}, "required": ["kind"]},
     "then": {"required": ["n"]}, "else": {"not": {"required": ["n"]}}},
]
OBJECT_VALUES: list[Any] = [
    {}, {"a": 1}, {"b": 2}, {"a": 1, "b": 2}, {"a": "s"}, {"kind": "x"}, {"kind": "y"}, {"kind": "x", "n": 1},
    {"kind": "y", "n": 1}, {"n": 1}, {"kind": "z"}, None, 1, "a", [],
]


@pytest.mark.parametrize("schema", OBJECT_SCHEMAS, ids=range(len(OBJECT_SCHEMAS)))
def test_not_of_object_disjunctions_is_exact(schema):
    regex = compiled(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rx = None if regex is None else re.compile(regex)
    for v in OBJECT_VALUES:
        if isinstance(v, dict) and set(v) - set(schema["properties"]):
            continue  # only declared properties are generated (a documented choice)
        assert (rx is not None and rx.fullmatch(dumps(v)) is not None) == validator.is_valid(v), (v, regex)


def test_oneof_past_the_dfa_bound_is_refused_as_oneof():
    schema = {"type": "string", "oneOf": [{"pattern": "^[ab]*a[ab]{12}$"}, {"pattern": "^a"}]}
    with pytest.raises(UnsupportedKeywordError) as e:
        schema_to_regex(schema)
    assert e.value.keyword == "oneOf" and "/oneOf" in str(e.value)


ONEOF_OBJECT_SCHEMAS = [
    {"oneOf": [{"properties": {"target": {"type": "string"}}}, {"properties": {"channel": {"type": "string"}}}]},
    {"oneOf": [{"type": "object", "properties": {"target": {"type": "string"}}},
               {"type": "object", "properties": {"channel": {"type": "string"}}}]},
    {"oneOf": [{"oneOf": [{"type": "array", "maxItems": 1}, {"type": "string", "pattern": "^#"}]},
               {"oneOf": [{"type": "object", "required": ["ref"], "properties": {"ref": {"type": "string"}}}]}]},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
     "not": {"type": "object", "properties": {"b": {"const": "s"}}, "required": ["b"]}},
    {"properties": {"a": {"type": "integer"}}, "oneOf": [{"required": ["a"]}, {"type": "object", "required": ["a"]}]},
]
ONEOF_OBJECT_VALUES: list[Any] = [
    {}, {"target": "x"}, {"channel": "x"}, {"target": 1}, {"channel": 2}, {"target": "x", "channel": 1},
    {"target": 1, "channel": "y"}, {"target": "x", "channel": "y"}, {"ref": "r"}, {"ref": 1}, [], [1], [1, 2],
    "#a", "a", None, 3, {"a": 1}, {"a": 2}, {"b": "s"}, {"a": 2, "b": "s"},
]


@pytest.mark.parametrize("schema", ONEOF_OBJECT_SCHEMAS, ids=range(len(ONEOF_OBJECT_SCHEMAS)))
def test_oneof_and_not_on_objects_exact_forms(schema):
    try:
        regex: Optional[str] = schema_to_regex(schema, SchemaOptions(property_order="any")).regex
    except EmptyLanguageError:
        regex = None
    validator = jsonschema.Draft202012Validator(schema)
    rx = None if regex is None else re.compile(regex)
    seen = 0
    for v in ONEOF_OBJECT_VALUES:
        ok = validator.is_valid(v)
        acc = rx is not None and rx.fullmatch(dumps(v)) is not None
        assert not acc or ok, (v, regex)  # never wider
        declared = json.dumps(schema)
        if isinstance(v, dict) and not all(f'"{k}"' in declared for k in v):
            continue  # only properties the schema names are generated (a documented choice)
        seen += 1
        assert acc == ok, (v, regex)
    assert seen > 5


@pytest.mark.parametrize("schema", [
    {"not": {"type": "integer"}}, {"not": {"type": ["integer", "boolean"]}}, {"not": {"not": {"type": "string"}}},
    {"type": "number", "multipleOf": 2, "not": {"type": "integer"}}, {"not": {"not": {}}},
], ids=range(5))
def test_double_negation_and_non_integers(schema):
    """``not: {not: X}`` is X; numbers that are not integers (spelled without an exponent)."""
    assert not check_language(schema, compiled(schema))


def test_old_false_accepts_are_gone():
    """Two false accepts of the older code, found while building this: ``maxLength`` >= 64 beside a
    ``not: {enum}`` was dropped (a 150-character string passed ``maxLength: 100``), and integer
    multiples passed ``not: {type: integer}``."""
    rx = re.compile(compiled({"type": "string", "maxLength": 100, "not": {"enum": ["ab"]}}) or "")
    assert not rx.fullmatch(dumps("x" * 150)) and rx.fullmatch(dumps("x" * 100)) and not rx.fullmatch(dumps("ab"))
    assert compiled({"type": "number", "multipleOf": 2, "not": {"type": "integer"}}) is None


def test_oneof_of_refs_to_objects_differing_on_one_property():
    """The shape of real schemas (JSONSchemaBench Github_medium o683): branches are bare $refs."""
    schema = {"definitions": {"P": {"properties": {"target": {"type": "string"}}},
                              "G": {"properties": {"channel": {"type": "string"}}}},
              "oneOf": [{"$ref": "#/definitions/P"}, {"$ref": "#/definitions/G"}]}
    regex = schema_to_regex(schema, SchemaOptions(property_order="any")).regex
    validator = jsonschema.Draft7Validator(schema)
    for v in ONEOF_OBJECT_VALUES:
        if isinstance(v, dict) and set(v) - {"target", "channel"}:
            continue
        assert (re.fullmatch(regex, dumps(v)) is not None) == validator.is_valid(v), v


# -- not of {properties: {...}, required: [...]} over several properties ---------------------------

PROP_LEAVES: list[dict[str, Any]] = [
    {"type": "string"}, {"type": "integer"}, {"minLength": 1}, {"enum": ["x", 1]}, {"type": "integer", "maximum": 2},
    {"type": ["string", "null"]}, {"const": "x"},
]
PROP_VALUES: list[Any] = [None, 0, 1, 3, "", "x", "yz"]


def _rand_not_object_schema(rng: random.Random) -> dict[str, Any]:
    names = ["a", "b", "c"]
    outer = {n: rng.choice([{}, rng.choice(PROP_LEAVES)]) for n in names}
    inner: dict[str, Any] = {}
    shown = rng.sample(names, rng.randint(0, 3))
    if shown:
        inner["properties"] = {n: rng.choice(PROP_LEAVES) for n in shown}
    req = rng.sample(names, rng.randint(0 if len(shown) > 1 else 1, 2))
    if req:
        inner["required"] = req
    if rng.random() < 0.3:
        inner["type"] = "object"
    schema: dict[str, Any] = {"properties": outer, "not": inner}
    if rng.random() < 0.5:
        schema["type"] = "object"
    return schema


def _object_values() -> list[Any]:
    out: list[Any] = [None, 1, "x", [], True]
    for k in range(4):
        for names in itertools.combinations("abc", k):
            for vals in itertools.product(PROP_VALUES[:4] if k > 1 else PROP_VALUES, repeat=k):
                out.append(dict(zip(names, vals)))
    return out


OBJ_VALUES = _object_values()


def object_disagreements(schema: dict[str, Any], regex: Optional[str]) -> list[str]:
    """Disagreements with jsonschema on objects of the declared properties (in declared order, the
    compiler's documented choice) and on other types."""
    validator = jsonschema.Draft202012Validator(schema)
    rx = None if regex is None else re.compile(regex)
    out = []
    for v in OBJ_VALUES:
        acc = rx is not None and rx.fullmatch(dumps(v)) is not None
        if acc != validator.is_valid(v):
            out.append(f"{'accepted' if acc else 'rejected'} {dumps(v)}")
    return out


def not_object_sweep(seed: int, n: int) -> dict[str, int]:
    rng = random.Random(seed)
    counts = {"exact": 0, "refused": 0, "wrong": 0}
    for _ in range(n):
        schema = _rand_not_object_schema(rng)
        try:
            regex = compiled(schema)
        except UnsupportedKeywordError as e:
            assert e.keyword == "not" and "/not" in str(e), (schema, e)
            counts["refused"] += 1
            continue
        counts["wrong" if object_disagreements(schema, regex) else "exact"] += 1
    return counts


@pytest.mark.parametrize("seed", range(2))
def test_not_of_several_properties_is_exact(seed):
    """``not: {properties: {...}, required: [...]}`` over several properties: exact (both directions) or
    refused by name. Old code refused every one of these with more than one property."""
    counts = not_object_sweep(seed, 30)
    assert counts["wrong"] == 0 and counts["exact"] >= 20, counts


def test_control_not_of_several_properties_forgetting_failing_values_is_caught(monkeypatch):
    """A negation that forgets "present with a failing value" (only the missing-name branches) is
    caught by the same check."""
    from constrained_spec.grammar.json_schema.combinators import Combinators
    from constrained_spec.grammar.json_schema.ir import Forbid

    real = Combinators.negation_group

    def forgetful(self, ctx):
        group = real(self, ctx)
        if group is None:
            return None
        kind, branches, ptr = group
        kept = [b for b in branches if any(isinstance(a, Forbid) for a in b)]
        return (kind, kept or branches[:1], ptr)

    monkeypatch.setattr(Combinators, "negation_group", forgetful)
    counts = not_object_sweep(0, 30)
    assert counts["wrong"] > 0, counts


# -- oneOf over branches told apart by their patterns' automata or their arrays' first items -------

ITEM_TYPES = [{"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": ["string", "null"]},
              {"enum": ["a", 1]}, {"type": "boolean"}]
ARRAY_VALUES: list[Any] = [[], ["a"], [1], [1.5], [None], [True], ["a", 1], [1, "a"], [1, 2], ["a", "b"], [None, "a"],
                           [True, 1], "a", 1, None]
PATTERN_ONEOFS = [
    # the DFA of either branch's negation passes its bounds (a count to 255): told apart by the patterns
    {"oneOf": [{"type": "string", "pattern": "^[0-9a-zA-Z_-]{1,255}$"},
               {"type": "string", "minLength": 4, "maxLength": 255, "pattern": ".*\\{\\{.+}}.*"}]},
    {"type": "string", "oneOf": [{"pattern": "^[a-z]{1,5}$"}, {"pattern": "\\{\\{.+}}"}]},
    {"type": "string", "oneOf": [{"pattern": "^[0-9a-f]{4}$"}, {"pattern": "^a"}, {"pattern": "x$"}]},
    {"oneOf": [{"type": "string", "pattern": "^[^:]+:[^:]+:[0-9]+$"}, {"type": "string", "pattern": "^[a-z]+$"}]},
]
PATTERN_VALUES: list[Any] = ["", "a", "ab", "abcdef", "a_b-9", "{{a}", "x" * 256, "{{a}}" + "x" * 251, "a b", "{{x}}", "a{{x}}", "{{}}", "0f3a", "dead", "ax", "x", "a:b:1",
                             "zz", "a:b", 1, None]


def _rand_array_oneof(rng: random.Random) -> dict[str, Any]:
    return {"oneOf": [{"type": "array", "minItems": rng.choice([0, 1, 1, 1, 1]), "items": rng.choice(ITEM_TYPES)}
                      for _ in range(2)]}


def array_oneof_sweep(seed: int, n: int) -> dict[str, int]:
    rng = random.Random(seed)
    counts = {"exact": 0, "refused": 0, "wrong": 0}
    for _ in range(n):
        schema = _rand_array_oneof(rng)
        validator = jsonschema.Draft202012Validator(schema)
        try:
            regex = compiled(schema)
        except UnsupportedKeywordError as e:
            assert e.keyword == "oneOf" and "/oneOf" in str(e), (schema, e)
            counts["refused"] += 1
            continue
        rx = None if regex is None else re.compile(regex)
        bad = [v for v in ARRAY_VALUES if (rx is not None and rx.fullmatch(dumps(v)) is not None) != validator.is_valid(v)]
        counts["wrong" if bad else "exact"] += 1
    return counts


def test_oneof_of_arrays_with_disjoint_first_items_is_exact():
    """Arrays of at least one item whose first items cannot be the same are disjoint: exact, or
    refused by name where the branches overlap."""
    counts = array_oneof_sweep(0, 40)
    assert counts["wrong"] == 0 and counts["exact"] >= 8, counts


def test_control_oneof_of_arrays_claimed_disjoint_is_caught(monkeypatch):
    """A disjointness test that claims any two non-empty array branches disjoint is caught."""
    from constrained_spec.grammar.json_schema.combinators import Combinators

    real = Combinators._disjoint_type

    def careless(self, t, fa, fb, depth):
        if t == "array" and fa.min_items >= 1 and fb.min_items >= 1:
            return True
        return real(self, t, fa, fb, depth)

    monkeypatch.setattr(Combinators, "_disjoint_type", careless)
    assert array_oneof_sweep(0, 40)["wrong"] > 0


@pytest.mark.parametrize("schema", PATTERN_ONEOFS, ids=range(len(PATTERN_ONEOFS)))
def test_oneof_of_disjoint_patterns_is_exact(schema):
    regex = compiled(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rx = None if regex is None else re.compile(regex)
    for v in PATTERN_VALUES:
        assert (rx is not None and rx.fullmatch(dumps(v)) is not None) == validator.is_valid(v), (v, regex)


# -- oneOf with twin branches, and with a discriminator spread over allOf --------------------------

BASE = {"type": "object", "properties": {"k": {"type": "string"}, "n": {"type": "integer"}}, "required": ["k"]}
TWIN_ONEOFS = [
    {"$defs": {"A": {"type": "integer"}, "B": {"type": "integer", "title": "B"}},
     "oneOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}, {"type": "string"}]},
    {"$defs": {"base": BASE},
     "oneOf": [{"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"k": {"const": c}}}]} for c in ("a", "b", "c")]},
    {"$defs": {"base": BASE, "A": {"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"k": {"const": "a"}}}]},
               "A2": {"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"k": {"const": "a"}}}]},
               "B": {"allOf": [{"$ref": "#/$defs/base"}, {"properties": {"k": {"enum": ["b", "d"]}}}]}},
     "oneOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/A2"}, {"$ref": "#/$defs/B"}]},
]
TWIN_VALUES: list[Any] = [None, 0, 1, "x", [], {}, {"n": 1}] + [
    {"k": k, **extra} for k in ("a", "b", "c", "d", 1) for extra in ({}, {"n": 2}, {"n": "s"})]


def _twin_disagreements(schema: dict[str, Any]) -> list[str]:
    regex = compiled(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rx = None if regex is None else re.compile(regex)
    return [dumps(v) for v in TWIN_VALUES
            if (rx is not None and rx.fullmatch(dumps(v)) is not None) != validator.is_valid(v)]


@pytest.mark.parametrize("schema", TWIN_ONEOFS, ids=range(len(TWIN_ONEOFS)))
def test_oneof_twins_and_spread_discriminators_are_exact(schema):
    """Twin branches (the same schema through different $refs) admit no value of theirs; a
    discriminator whose const sits in an allOf beside a shared base still tells branches apart."""
    assert _twin_disagreements(schema) == []


def test_control_oneof_twins_as_anyof_is_caught(monkeypatch):
    from constrained_spec.grammar.json_schema.combinators import Combinators

    monkeypatch.setattr(Combinators, "one_of_branches", lambda self, branches, ptr, outer=None, given=frozenset(), context=None: branches)
    assert _twin_disagreements(TWIN_ONEOFS[0]) and _twin_disagreements(TWIN_ONEOFS[2])


# -- minProperties 1 met by one of several kinds of extra property ---------------------------------

MIN_PROPS_SCHEMAS = [
    {"type": "object", "minProperties": 1, "additionalProperties": False,
     "patternProperties": {"^a[0-9]$": {"type": "integer"}, "^b[0-9]$": {"type": "integer"}}},
    {"type": "object", "minProperties": 1, "patternProperties": {"^a[0-9]$": {"type": "integer"}, "^b[0-9]$": {"type": "integer"}}},
]
MIN_PROPS_VALUES: list[Any] = [{}, {"a1": 1}, {"b1": 2}, {"a1": 1, "b2": 3}, {"a1": 1, "a2": 2}, {"b1": 2, "b2": 3},
                               {"a1": "s"}, {"b1": -1}, {"a1": -1, "b1": 1}, {"a1": 1, "a2": 2, "b1": 0}, None, "a1"]


@pytest.mark.parametrize("schema", MIN_PROPS_SCHEMAS, ids=range(len(MIN_PROPS_SCHEMAS)))
def test_min_properties_one_over_several_extra_kinds_is_exact(schema):
    """``minProperties: 1`` where the extra properties come from several patterns: exact on objects
    whose keys come in the patterns' order (the compiler's documented key order); old code refused
    it ('minProperties' larger than the declared properties)."""
    regex = compiled(schema)
    validator = jsonschema.Draft202012Validator(schema)
    rx = None if regex is None else re.compile(regex)
    for v in MIN_PROPS_VALUES:
        assert (rx is not None and rx.fullmatch(dumps(v)) is not None) == validator.is_valid(v), (v, regex)


def test_control_min_properties_as_zero_is_caught():
    """A compile that forgets minProperties accepts ``{}``, which the same check rejects."""
    schema = dict(MIN_PROPS_SCHEMAS[0])
    del schema["minProperties"]
    rx = re.compile(compiled(schema) or "")
    assert rx.fullmatch("{}") and not jsonschema.Draft202012Validator(MIN_PROPS_SCHEMAS[0]).is_valid({})


# -- not of an anyOf: the conjunction of the negations --------------------------------------------


def _rand_not_any_of(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """(schema, the same with its not reading only the anyOf's first branch: a control)."""
    branches = [rng.choice(EXACT_LEAVES) for _ in range(rng.choice([2, 2, 3]))]
    ctx = rng.choice(EXACT_CONTEXTS)
    if rng.random() < 0.5:
        schema = {**ctx, "$defs": {"E": {"anyOf": branches}}, "not": {"$ref": "#/$defs/E"}}
    else:
        schema = {**ctx, "not": {"anyOf": branches}}
    return schema, {**ctx, "not": branches[0]}


def test_not_of_any_of_is_exact():
    """``not: {anyOf: [A, B]}`` (directly or through a $ref) as ``not A`` and ``not B``: exact on
    VALUES or refused by name; old code refused every one ('not' that nests combinators)."""
    rng = random.Random(5)
    counts = {"exact": 0, "refused": 0}
    for _ in range(40):
        schema, _control = _rand_not_any_of(rng)
        try:
            regex = compiled(schema)
        except UnsupportedKeywordError as e:
            assert e.keyword == "not", (schema, e)
            counts["refused"] += 1
            continue
        assert check_language(schema, regex) == [], schema
        counts["exact"] += 1
    assert counts["exact"] >= 25, counts


def test_control_not_of_any_of_reading_one_branch_is_caught():
    """The negation of the first branch only (forgetting the others) is caught by the same check."""
    rng = random.Random(5)
    caught = 0
    for _ in range(40):
        schema, control = _rand_not_any_of(rng)
        try:
            regex = compiled(control)
        except UnsupportedKeywordError:
            continue
        caught += bool(check_language(schema, regex))
    assert caught > 5, caught
