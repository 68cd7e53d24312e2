"""``oneOf`` branches told apart exactly where the older tests could not (issue 49, fourth round).

The constructions (``grammar/json_schema/combinators.py``), each tried only where the earlier tests
and negations fail, so schemas that compiled keep their output:

a. arrays whose first items are disjoint: the empty array is the only shared value (``minItems: 1``
   on a branch where the other holds ``[]``);
b. objects that need, in each of the other branch's sets of required names (through nested
   ``oneOf``/``anyOf``), a name the branch forbids;
c. objects of a closed branch apart from another branch's object constants;
d. ``not`` branch j relative to branch i (names both require and same-JSON properties dropped);
e. a type every value of which satisfies branch j (its keywords constrain other types only) is
   dropped from branch i exactly;
f. ``not: {items: S}`` as an array with an item failing S (``contains``), also as a oneOf negation;
g. branches about which names are present only: the truth table over those names.

The oracle is ``jsonschema`` on sets of values built from the branches' own names and constants
(accepted iff valid, both ways; a value accepted where some order of its keys, at every level, is); the compiled schemas
use ``additional_properties="spec"`` so that valid objects with undeclared keys are in the language.
Every schema here was refused by name before (``UnsupportedKeywordError``: the tests fail on the
older code). The negative control compiles each ``oneOf`` as ``anyOf`` and must be caught.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any, Optional

import jsonschema
import pytest
from grammar_oracles import schema_disagreements

from constrained_spec.errors import EmptyLanguageError, UnsupportedKeywordError
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex


def dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def texts(v: Any) -> list[str]:
    """Every compact text of v: each object's keys in every order, at every level (the compiler's
    key order is its own choice: a value counts as accepted where one of its texts is)."""
    if isinstance(v, dict):
        out: list[str] = []
        for order in itertools.permutations(v):
            for parts in itertools.product(*(texts(v[k]) for k in order)):
                out.append("{" + ",".join(dumps(k) + ":" + t for k, t in zip(order, parts)) + "}")
        return out
    if isinstance(v, list):
        return ["[" + ",".join(parts) + "]" for parts in itertools.product(*(texts(x) for x in v))]
    return [dumps(v)]


def accepts(rx: Optional[re.Pattern], v: Any) -> bool:
    """Whether some text of v (:func:`texts`) full-matches."""
    return rx is not None and any(rx.fullmatch(t) is not None for t in texts(v))


def regex_of(schema: dict[str, Any]) -> Optional[str]:
    """The schema's regex (the spec's additional properties); None: the empty language."""
    try:
        return schema_to_regex(schema, SchemaOptions(additional_properties="spec")).regex
    except EmptyLanguageError:
        return None


def disagreements(schema: dict[str, Any], values: list[Any], regex: Optional[str] = None) -> list[str]:
    """The values the compiled schema judges otherwise than ``jsonschema``."""
    if regex is None:
        regex = regex_of(schema)
    return schema_disagreements(schema, regex, values, accepts)


def as_any_of(schema: Any) -> Any:
    """The schema with every ``oneOf`` written ``anyOf`` (the negative control)."""
    if isinstance(schema, dict):
        return {("anyOf" if k == "oneOf" else k): as_any_of(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [as_any_of(v) for v in schema]
    return schema


def objects(names: list[str], atoms: list[Any], most: int = 3) -> list[Any]:
    """Objects of at most ``most`` of the names, each value one of the atoms."""
    out: list[Any] = []
    for k in range(most + 1):
        for ns in itertools.combinations(names, k):
            for vals in itertools.product(atoms, repeat=k):
                out.append(dict(zip(ns, vals)))
    return out


def arrays(atoms: list[Any], most: int = 3) -> list[Any]:
    return [list(t) for k in range(most + 1) for t in itertools.product(atoms, repeat=k)]


SCALARS: list[Any] = [None, True, 0, 1.5, "s", "", [], {}]

# -- the shapes of the JSONSchemaBench schemas these constructions answer (each refused before) ----

CASES: list[tuple[str, dict[str, Any], list[Any]]] = [
    # a. o62056: arrays of items from disjoint enums, [] in every branch
    ("arrays apart beyond []",
     {"oneOf": [{"type": "array", "maxItems": 3, "items": {"enum": ["a", "b"]}},
                {"type": "array", "maxItems": 3, "items": {"enum": ["c"]}},
                {"type": "array", "items": {"enum": ["d", 1]}}]},
     SCALARS + arrays(["a", "c", "d", 1, "x"])),
    # b. o65012: each branch requires (in a nested oneOf) a name the others forbid
    ("required names forbidden",
     {"oneOf": [{"type": "object", "properties": {"t": {}, "f": {}, "v": {}, "r": {}}, "additionalProperties": False,
                 "oneOf": [{"required": ["f", "v"]}, {"required": ["f", "r"]}]},
                {"type": "object", "properties": {"t": {}, "f": {}}, "required": ["f", "t"],
                 "additionalProperties": False},
                {"type": "object", "properties": {"t": {}, "g": {}}, "additionalProperties": False}]},
     SCALARS + objects(["t", "f", "v", "r", "g"], [1])),
    # c. o11666: a closed object branch and a branch whose enum holds an object
    ("object constants",
     {"oneOf": [{"type": "object", "properties": {"type": {"type": "string"}}, "required": ["type"],
                 "additionalProperties": False},
                {"enum": [{"type": "void"}, {"type": "null", "x": 1}, "void"]},
                {"type": "string"}]},
     SCALARS + ["void"] + objects(["type", "x"], ["void", "null", 1, "v"])),
    # d. o74598: one branch a subset of the other (the same properties, one more required)
    ("relative negation",
     {"oneOf": [{"type": "object", "properties": {"f": {"type": "object"}, "g": {"type": "integer"},
                                                  "s": {"type": "string"}, "c": {"type": "string"}},
                 "required": ["f", "s"]},
                {"type": "object", "properties": {"f": {"type": "object"}, "g": {"type": "integer"}},
                 "required": ["f"]}]},
     SCALARS + objects(["f", "g", "s", "c"], [{}, "x", 2])),
    # e. o11666's itemsObject: no "type", so every non-object satisfies both branches
    ("types every value of which holds",
     {"definitions": {"prim": {"required": ["t"], "properties": {"t": {"enum": ["a", "b"]}, "x": {}, "y": {}},
                               "additionalProperties": False,
                               "dependencies": {"x": {"oneOf": [{"properties": {"t": {"enum": ["a"]}}},
                                                                {"properties": {"t": {"enum": ["b"]}}}]}}}},
      "oneOf": [{"required": ["r"], "properties": {"r": {"type": "string"}}, "additionalProperties": False},
                {"allOf": [{"$ref": "#/definitions/prim"}, {"properties": {"t": {}, "x": {}},
                                                               "additionalProperties": False}]}]},
     SCALARS + objects(["r", "t", "x", "y"], ["a", 1])),
    # f. o80161: arrays of strings and arrays of a few strings; o91584: not {items: {not: X}}
    ("arrays of strings minus arrays of an enum",
     {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}},
                {"type": "string", "enum": ["a", "b"]}, {"type": "array", "items": {"enum": ["a", "c"]}}]},
     SCALARS + ["a", "c"] + arrays(["a", "c", "x", 1])),
    ("not items not",
     {"oneOf": [{"enum": ["u"]}, {"not": {"items": {"not": {"enum": ["u"]}}}}]},
     SCALARS + ["u"] + arrays(["u", "v", 1])),
    ("not items, type array",
     {"type": "object", "properties": {"a": {"not": {"type": "array", "items": {"type": "integer"}}}}},
     [{"a": v} for v in SCALARS + arrays([1, "x", 2.5])]),
    # d'. o85194: the relative negation with a nested object group (content failing the other's content)
    ("relative negation, nested group",
     {"oneOf": [{"type": "object", "required": ["c"], "properties": {"c": {
         "type": "object", "required": ["bg"], "properties": {"bg": {
             "type": "object", "required": ["alt", "vp"], "properties": {"alt": {"type": "string"},
                                                                        "vp": {"type": "string"}}}}}}},
                {"type": "object", "required": ["c"], "properties": {"c": {
                    "type": "object", "required": ["src", "alt"], "properties": {"alt": {"type": "string"},
                                                                                "src": {"type": "string"}}}}}]},
     SCALARS + [{"c": c} for c in [{}, {"alt": "a", "src": "s"}, {"alt": 1, "src": "s"}, {"bg": {"alt": "a", "vp": "v"}},
                                   {"bg": {"alt": "a"}}, {"bg": 1}, {"alt": "a", "src": "s", "bg": {"alt": "a"}},
                                   {"alt": "a", "src": "s", "bg": {"alt": "a", "vp": "v"}},
                                   {"alt": "a", "src": 2, "bg": {"alt": "a", "vp": "v"}}, "x"]]),
    # g. o68294: nested oneOfs of required names
    ("names present",
     {"oneOf": [{"oneOf": [{"required": ["p"]}, {"required": ["q"]}]},
                {"oneOf": [{"required": ["i", "m"]}, {"required": ["j", "m"]}]}]},
     SCALARS + objects(["p", "q", "i", "j", "m"], [1], most=5)),
]


@pytest.mark.parametrize("name,schema,values", CASES, ids=[c[0] for c in CASES])
def test_exact_where_refused_before(name, schema, values):
    regex = regex_of(schema)  # UnsupportedKeywordError on the older code
    assert not disagreements(schema, values, regex), name
    assert any(jsonschema.Draft202012Validator(schema).is_valid(v) for v in values)  # not vacuous


#: the cases whose oneOf branches overlap (a oneOf taken as anyOf admits more)
OVERLAPPING = [c for c in CASES if c[0] not in ("not items not", "not items, type array")]


@pytest.mark.parametrize("name,schema,values", OVERLAPPING, ids=[c[0] for c in OVERLAPPING])
def test_control_one_of_as_any_of_is_caught(name, schema, values):
    """The same values catch a oneOf compiled as anyOf (the check can fail)."""
    assert disagreements(schema, values, regex_of(as_any_of(schema))), name


def test_not_items_beside_max_items_is_refused_by_name():
    """``contains`` beside maxItems puts the item first (not exact): refused with the pointer."""
    schema = {"type": "array", "maxItems": 3, "not": {"items": {"type": "integer"}}}
    with pytest.raises(UnsupportedKeywordError) as e:
        regex_of(schema)
    assert e.value.keyword == "not" and "/not" in str(e.value)


# -- random schemas of the forms ---------------------------------------------------------------------

NAMES = ["a", "b", "c", "d"]
LEAVES: list[Any] = [{"type": "string"}, {"type": "integer"}, {}, {"enum": ["x", 1]}, {"type": "object"}]


def _presence(rng: random.Random, depth: int) -> dict[str, Any]:
    if depth >= 2 or rng.random() < 0.4:
        return {"required": rng.sample(NAMES, rng.randint(1, 2))}
    kw = rng.choice(["oneOf", "anyOf", "allOf", "not"])
    if kw == "not":
        return {"not": _presence(rng, depth + 1)}
    return {kw: [_presence(rng, depth + 1) for _ in range(rng.randint(2, 3))]}


def rand_case(rng: random.Random) -> tuple[dict[str, Any], list[Any]]:
    """A oneOf of one of the forms a-g with values from its names and constants."""
    form = rng.choice("abdfg")
    if form == "a":
        pool = ["a", "b", "c", "d", 1]
        rng.shuffle(pool)
        cut = rng.randint(1, 4)
        branches: list[dict[str, Any]] = [{"type": "array", "items": {"enum": pool[:cut]}},
                                          {"type": "array", "items": {"enum": pool[cut:]}}]
        for br in branches:
            if rng.random() < 0.3:
                br["maxItems"] = rng.randint(1, 3)
            if rng.random() < 0.2:
                br["minItems"] = 1
        return {"oneOf": branches}, SCALARS + arrays(["a", "b", "c", "d", 1, "z"])
    if form == "b":
        left: dict[str, Any] = {"type": "object", "properties": {n: {} for n in ["a", "b"]}, "additionalProperties": False}
        if rng.random() < 0.5:
            left["required"] = ["a"]
        right: dict[str, Any] = {"type": "object", "properties": {n: {} for n in ["a", "c", "d"]},
                 "oneOf": [{"required": ["c"]}, {"required": rng.sample(["c", "d"], rng.randint(1, 2))}]}
        if rng.random() < 0.5:
            right["additionalProperties"] = False
        return {"oneOf": [left, right]}, SCALARS + objects(NAMES, [1])
    if form == "d":
        shared = {n: rng.choice(LEAVES) for n in rng.sample(NAMES, 2)}
        extra = {n: rng.choice(LEAVES[:2]) for n in NAMES if n not in shared and rng.random() < 0.6}
        small = {"type": "object", "properties": dict(shared), "required": rng.sample(sorted(shared), rng.randint(0, 2))}
        big = {"type": "object", "properties": {**shared, **extra},
               "required": sorted(set(small["required"]) | set(rng.sample(sorted(extra), min(1, len(extra)))))}
        return {"oneOf": rng.sample([small, big], 2)}, SCALARS + objects(NAMES, ["x", 1, {}])
    if form == "f":
        enum = rng.sample(["a", "b", 1, None], rng.randint(1, 3))
        wide = {"type": "array", "items": rng.choice([{"type": "string"}, {}, {"type": ["string", "integer"]}])}
        return ({"oneOf": rng.sample([wide, {"type": "array", "items": {"enum": enum}}], 2)},
                SCALARS + arrays(["a", "b", 1, None, "z"]))
    branches = [_presence(rng, 0) for _ in range(rng.randint(2, 3))]
    return {"oneOf": branches}, SCALARS + objects(NAMES, [1], most=4)


def sweep(seed: int, n: int, any_of: bool = False) -> dict[str, int]:
    """Random cases, each: answered by the strict round (must be exact), by the older round (which
    may keep a sound part: no false accept), refused by name, or wrong (a strict answer that
    disagrees with ``jsonschema``, or any false accept)."""
    from constrained_spec.grammar.json_schema.combinators import Combinators

    rounds: list[bool] = []
    plain = Combinators._one_of_round

    def recording(self: Any, *args: Any) -> Any:
        rounds.append(self.strict_oneof)
        return plain(self, *args)

    rng = random.Random(seed)
    counts = {"strict": 0, "older": 0, "refused": 0, "wrong": 0}
    setattr(Combinators, "_one_of_round", recording)
    try:
        for _ in range(n):
            schema, values = rand_case(rng)
            rounds.clear()
            try:
                regex = regex_of(as_any_of(schema) if any_of else schema)
            except UnsupportedKeywordError as e:
                assert e.keyword in ("oneOf", "not") and e.pointer, (schema, e)
                counts["refused"] += 1
                continue
            bad = disagreements(schema, values, regex)
            false_accepts = [b for b in bad if b.startswith("accepted")]
            assert any_of or not false_accepts, (schema, false_accepts[:3], regex)
            strict = any(rounds) or any_of
            counts["wrong" if (bad and strict) or false_accepts else "strict" if strict else "older"] += 1
    finally:
        setattr(Combinators, "_one_of_round", plain)
    return counts


def test_random_one_of_cases_exact():
    counts = sweep(0, 40)
    assert counts["wrong"] == 0 and counts["strict"] >= 15, counts


def test_random_control_any_of_is_caught():
    assert sweep(0, 40, any_of=True)["wrong"] >= 20


@pytest.mark.slow  # ~500 random cases: make test-slow
def test_random_one_of_cases_long():
    counts = sweep(100, 500)
    assert counts["wrong"] == 0 and counts["strict"] >= 200, counts



def test_allow_unenforced_takes_the_exact_answer_and_records_only_what_is_not():
    """With ``allow_unenforced`` the strict round's exact answer is used (nothing recorded); where it is
    not exact either, the older sound part stays and the oneOf is recorded."""
    name, schema, values = CASES[3]  # relative negation: the older round records it
    r = schema_to_regex(schema, SchemaOptions(allow_unenforced=True, additional_properties="spec"))
    assert r.unenforced == () and not disagreements(schema, values, r.regex), name
    open_objects = {"oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}},
                              {"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"x": {}}}]}
    assert schema_to_regex(open_objects, SchemaOptions(allow_unenforced=True)).unenforced == ("/oneOf",)
