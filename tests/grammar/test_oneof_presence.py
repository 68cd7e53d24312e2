"""``oneOf`` object branches told apart by which names are present, exactly (issue 49).

The older round restricted branch i where branch j requires a name i does not (``Forbid``: i's
objects with that name dropped), where both declare a property with disjoint values, or where j
forbids one of i's properties (``Require``: i's objects without it dropped). Each kept one half of
branch i on its face: silently narrower than the schema (``{"b": 1}`` below is valid and was
rejected). Now branch i is split on the presence of the names that decide
(:meth:`Combinators._presence_halves`): a half apart from j is kept, a half inside j (every object of
it satisfies j) is dropped, and where a half is neither the exact constructions (negations, the
strict round) answer, or the ``oneOf`` is refused by name.

The oracle is ``jsonschema`` on objects built from the branches' names and a few constants, both
ways (accepted iff valid). Controls: the older restriction put back, and a containment test that
forgets branch j's required names, each caught by the same sweep.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from grammar_oracles import exact_or_refused_tally
from test_oneof_apart import SCALARS, disagreements, objects, regex_of

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar.json_schema.combinators import Combinators
from constrained_spec.grammar.json_schema.ir import Forbid, Require

NAMES = ["a", "b", "c", "d"]
ATOMS: list[Any] = ["x", 1]
LEAVES: list[Any] = [{"type": "string"}, {"type": "integer"}, {"const": "x"}, {"const": 1}, {}]

#: shapes the older round narrowed: (name, schema, a valid object it rejected)
NARROWED: list[tuple[str, dict[str, Any], Any]] = [
    ("j requires a name i holds to other values",
     {"oneOf": [{"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}},
                {"type": "object", "required": ["b"], "properties": {"b": {"type": "string"}}}]},
     {"b": 1}),
    ("a discriminator i does not require",
     {"oneOf": [{"type": "object", "properties": {"kind": {"const": "x"}, "a": {}}},
                {"type": "object", "properties": {"kind": {"const": 1}, "b": {}}, "required": ["kind"]}]},
     {"a": "x"}),
]

#: the older restriction was right here by luck (i without ``key`` is ``{}``, inside j): now proven
CLOSED = {"oneOf": [{"type": "object", "properties": {"key": {"type": "string"}}, "additionalProperties": False},
                    {"type": "object", "properties": {"keys": {"type": "array"}}, "additionalProperties": False}]}

#: i minus j needs "a name outside j's" (a count, not a presence): refused by name, not narrowed
REFUSED = {"oneOf": [{"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"]},
                     {"type": "object", "properties": {"a": {}}, "additionalProperties": False}]}


def shape_values() -> list[Any]:
    return SCALARS + objects(NAMES + ["kind", "key", "keys"], ATOMS + [[]], most=2)


@pytest.mark.parametrize("name,schema,lost", NARROWED, ids=[c[0] for c in NARROWED])
def test_narrowed_shapes_now_exact(name, schema, lost):
    """Each shape compiles, and exactly: the object the older round lost included."""
    assert lost in shape_values()
    assert not disagreements(schema, shape_values()), name


@pytest.mark.parametrize("name,schema,lost", NARROWED, ids=[c[0] for c in NARROWED])
def test_control_older_restriction_loses_the_object(monkeypatch, name, schema, lost):
    """The older restriction put back: the same check names the object it drops."""
    monkeypatch.setattr(Combinators, "_presence_halves", _older_restriction)
    found = disagreements(schema, shape_values())
    assert any(line.startswith("rejected") and line.endswith("(valid)") for line in found), (name, found)


def test_closed_branches_exact_the_empty_object_dropped():
    """``{}`` satisfies both closed branches (never exactly one); ``{"key": "x"}`` only the first."""
    values = shape_values()
    assert {} in values and {"key": "x"} in values and {"keys": []} in values
    assert not disagreements(CLOSED, values)


def test_count_shape_refused_by_name():
    with pytest.raises(UnsupportedKeywordError) as e:
        regex_of(REFUSED)
    assert e.value.keyword == "oneOf" and e.value.pointer == "/oneOf"


def rand_schema(rng: random.Random) -> dict[str, Any]:
    """A oneOf of two or three object branches: random properties, required names, closed or not."""
    branches = []
    for _ in range(rng.randint(2, 3)):
        props = {n: rng.choice(LEAVES) for n in NAMES if rng.random() < 0.5}
        br: dict[str, Any] = {"type": "object", "properties": props}
        pool = sorted(props) if rng.random() < 0.8 else NAMES
        br["required"] = rng.sample(pool, rng.randint(0, min(2, len(pool))))
        if rng.random() < 0.3:
            br["additionalProperties"] = False
        branches.append(br)
    return {"oneOf": branches}


def sweep(seed: int, n: int) -> dict[str, int]:
    """Random cases: exact, refused by name, or wrong (any disagreement with ``jsonschema``)."""
    rng = random.Random(seed)
    values = SCALARS + objects(NAMES, ATOMS)
    return exact_or_refused_tally((rand_schema(rng) for _ in range(n)), regex_of,
                                  lambda schema, regex: bool(disagreements(schema, values, regex)), ("oneOf", "not"))


def test_random_presence_cases_exact():
    counts = sweep(0, 60)
    assert counts["wrong"] == 0 and counts["exact"] >= 20, counts


@pytest.mark.slow  # ~600 random cases: make test-slow
def test_random_presence_cases_long():
    counts = sweep(1000, 600)
    assert counts["wrong"] == 0 and counts["exact"] >= 250, counts


def _older_restriction(self: Any, fi: Any, fj: Any, cj: Any) -> Any:
    """The older round's Forbid/Require choice (the control puts it back)."""
    for p in fj.required:
        if p not in fi.required:
            return [Forbid(p)]
    for p in fi.props:
        if p in fj.props and self._props_disjoint(fi, fj, p):
            return [Require((p,))]
    for p in fi.props:
        if self.forbids(fj, p) and not self.forbids(fi, p):
            return [Require((p,))]
    return None


def test_control_older_restriction_is_caught(monkeypatch):
    """The older round's restriction put back: the sweep finds the valid objects it drops."""
    monkeypatch.setattr(Combinators, "_presence_halves", _older_restriction)
    assert sweep(0, 60)["wrong"] >= 5


def test_control_containment_forgetting_required_is_caught(monkeypatch):
    """A containment test that forgets branch j's required names drops halves that are not inside
    j: the sweep finds the valid objects lost."""
    plain = Combinators._half_inside

    def forgetful(self, fi, cj, present, absent):
        req = self.bare_ref_target(cj).schema.get("required", [])
        return plain(self, fi, cj, present | frozenset(req), absent)

    monkeypatch.setattr(Combinators, "_half_inside", forgetful)
    assert sweep(0, 60)["wrong"] >= 3


#: a oneOf met where its context requires a name (``dependencies``, or ``required`` beside it): only
#: objects with that name meet it, so the half without it (inside every branch here) needs no answer
GIVEN_SHAPES: list[dict[str, Any]] = [
    {"type": "object", "properties": {"kind": {}, "a": {}},
     "dependentSchemas": {"kind": {"oneOf": [{"properties": {"kind": {"const": "x"}, "a": {"const": 1}}},
                                             {"properties": {"kind": {"const": 1}}}]}}},
    {"type": "object", "required": ["kind"],
     "oneOf": [{"properties": {"kind": {"const": "x"}, "a": {"const": 1}}}, {"properties": {"kind": {"const": 1}}}]},
]


@pytest.mark.parametrize("schema", GIVEN_SHAPES, ids=["dependentSchemas", "required beside"])
def test_context_required_names_start_the_split(schema):
    values = SCALARS + objects(["kind", "a", "b"], ATOMS, most=3)
    assert not disagreements(schema, values)


@pytest.mark.parametrize("schema", GIVEN_SHAPES, ids=["dependentSchemas", "required beside"])
def test_control_without_the_context_names_refused(monkeypatch, schema):
    """Without the context's names the half without ``kind`` is neither apart from the first branch nor
    inside it, and the first branch's negation needs a numeric constant's: refused."""
    plain = Combinators.one_of_branches
    monkeypatch.setattr(Combinators, "one_of_branches",
                        lambda self, branches, ptr, outer=None, given=frozenset(), context=None:
                        plain(self, branches, ptr, outer, frozenset(), context))
    with pytest.raises(UnsupportedKeywordError):
        regex_of(schema)


#: two closed objects sharing no name (Github_medium---o53524's ``options``: seven optional names
#: against two): only ``{}`` satisfies both; the split runs one name deeper per name (a chain of 8)
CLOSED_CHAIN = {"oneOf": [
    {"type": "object", "additionalProperties": False, "properties": {f"n{i}": {"type": "integer"} for i in range(8)}},
    {"type": "object", "additionalProperties": False, "properties": {"x": {}, "y": {}}}]}
CHAIN_VALUES: list[Any] = SCALARS + [{"n0": 1}, {"n7": 1}, {"x": 1}, {"x": 1, "n0": 1}, {"n3": 1, "n5": 2},
                                     {"y": None}, {"n0": "s"}, {"q": 1}]


def test_a_chain_of_names_longer_than_the_table_is_split_exactly():
    assert not disagreements(CLOSED_CHAIN, CHAIN_VALUES)
    assert {} in CHAIN_VALUES


def test_control_the_half_inside_kept_is_caught(monkeypatch):
    """The half of both (no name present) kept instead of dropped: ``{}`` accepted, which the check sees."""
    monkeypatch.setattr(Combinators, "_dropping", lambda self, present, absent, near: Forbid("zz"))
    assert disagreements(CLOSED_CHAIN, CHAIN_VALUES, regex_of(CLOSED_CHAIN))


#: Github_trivial---o88605's shape: each branch requires its own name and lets the others' names be
#: present only as null (``patternProperties``): a name's values under a pattern count when telling
#: branches apart
PATTERN_NULLS = {"oneOf": [
    {"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {"^(b|c)$": {"type": "null"}},
     "required": ["a"]},
    {"type": "object", "properties": {"b": {"type": "string"}}, "patternProperties": {"^(a|c)$": {"type": "null"}},
     "required": ["b"]},
    {"type": "object", "properties": {"c": {"type": "integer"}}, "patternProperties": {"^(a|b)$": {"type": "null"}},
     "required": ["c"]}]}
PATTERN_VALUES: list[Any] = SCALARS + objects(["a", "b", "c"], ["s", None, 1], most=3)


@pytest.mark.parametrize("schema", [PATTERN_NULLS], ids=["nulls"])
def test_pattern_property_values_tell_branches_apart(schema, monkeypatch):
    """Exact against jsonschema; with the declared properties alone (the code before 2026-12-05,
    late) the same ``oneOf`` is refused by name, so the pattern's values are what tell them apart."""
    assert not disagreements(schema, PATTERN_VALUES)
    monkeypatch.setattr(Combinators, "_name_ctxs", staticmethod(lambda f, name: list(f.props.get(name, []))))
    with pytest.raises(UnsupportedKeywordError):
        regex_of(schema)


def test_a_half_inside_a_pattern_branch_is_still_refused():
    """Not done: whether a half of branch i lies inside a branch j with ``patternProperties``
    (``_half_inside`` reads j's ``properties`` form only): refused by name, not guessed."""
    schema = {"type": "object", "oneOf": [{"properties": {"x": {"type": "string"}}},
                                          {"patternProperties": {"^x$": {"type": "integer"}}}]}
    with pytest.raises(UnsupportedKeywordError) as e:
        regex_of(schema)
    assert e.value.keyword == "oneOf"
