"""``not`` of a conjunction by De Morgan (issue 49): ``not (A and B)`` is ``not A or not B``.

Where the leaf cannot negate a schema whole (``not: {type: integer, minimum: 900}``, ``not: {allOf:
[...]}``), :meth:`Combinators.conjunction_parts` splits it into independent parts (each keyword
alone, the keywords that read one another together, each ``allOf`` member apart) and the compiler
writes an ``anyOf`` of their negations. The oracle is ``jsonschema`` on random conjunctions of
single keywords and a pool of values of every type, both ways (accepted iff valid). The control,
a split that leaves out its last part, is caught by the same sweep.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from grammar_oracles import exact_or_refused_tally
from test_oneof_apart import disagreements, objects, regex_of

from constrained_spec.grammar.json_schema.combinators import Combinators

#: single-keyword schemas, each negatable alone at the leaf
KEYWORDS: list[dict[str, Any]] = [
    {"type": "integer"}, {"type": "string"}, {"type": ["string", "null"]}, {"type": "object"},
    {"minimum": 3}, {"maximum": 10}, {"exclusiveMaximum": 0}, {"minLength": 2}, {"maxLength": 1},
    {"pattern": "^a"}, {"required": ["a"]}, {"properties": {"a": {"type": "string"}}},
    {"maxItems": 1}, {"items": {"type": "integer"}}, {"enum": ["a", "bb", None]},
    {"minItems": 2}, {"minProperties": 2}, {"maxProperties": 1},  # one count bound flipped (2026-12-05, late)
]

VALUES: list[Any] = [None, True, False, 0, 2, 3, 7, 10, 11, -1, 1.5, 3.5, 12.5, "", "a", "ab", "b", "bb", "abc",
                     [], [1], [1, 2], ["a"]] + objects(["a", "b"], ["x", 1], most=2)


def rand_conjunction(rng: random.Random) -> dict[str, Any]:
    """Two or three keywords of the pool (distinct), as one schema or as ``allOf`` members."""
    picks = rng.sample(KEYWORDS, rng.randint(2, 3))
    merged: dict[str, Any] = {}
    for p in picks:
        if any(k in merged for k in p):
            continue
        merged.update(p)
    if rng.random() < 0.3:
        return {"allOf": picks}
    return merged


def sweep(seed: int, n: int) -> dict[str, int]:
    """``not`` of random conjunctions: exact, refused by name, or wrong (disagrees with jsonschema)."""
    rng = random.Random(seed)
    return exact_or_refused_tally(({"not": rand_conjunction(rng)} for _ in range(n)), regex_of,
                                  lambda schema, regex: bool(disagreements(schema, VALUES, regex)), ("not",))


def test_named_shapes_compile_exactly():
    """The shapes the leaf refused whole: a bounded integer, an ``allOf`` of object forms."""
    for schema in [{"not": {"type": "integer", "minimum": 3}},
                   {"not": {"allOf": [{"type": "object", "required": ["a"]},
                                      {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}},
                   {"not": {"type": "array", "items": {"type": "integer", "maximum": 10}}}]:
        assert not disagreements(schema, VALUES), schema


def test_leaf_forms_the_sweep_found_narrowed():
    """Three leaf negations dropped valid values before 2026-12-05 (found by this sweep): an
    unsatisfiable length range (``minLength`` 2, ``maxLength`` 1: every string is valid under its
    ``not``), an ``enum`` with none of its values of the ``type`` beside it, and ``type: object``
    beside one property (every non-object is valid under its ``not``)."""
    for schema, valid in [({"not": {"type": "string", "minLength": 2, "maxLength": 1}}, "a"),
                          ({"not": {"type": "integer", "enum": ["a", None]}}, "a"),
                          ({"not": {"type": "object", "properties": {"a": {"type": "string"}}}}, 2)]:
        assert valid in VALUES
        assert not disagreements(schema, VALUES), schema


def test_random_conjunctions_exact():
    counts = sweep(0, 50)
    assert counts["wrong"] == 0 and counts["exact"] >= 35, counts


@pytest.mark.slow  # ~500 random cases: make test-slow
def test_random_conjunctions_long():
    counts = sweep(99, 500)
    assert counts["wrong"] == 0 and counts["exact"] >= 400, counts


def test_control_a_part_left_out_is_caught(monkeypatch):
    """A split that forgets its last part negates a larger schema's complement: values that fail
    only the forgotten part are rejected though valid."""
    plain = Combinators.conjunction_parts

    def forgetful(self, ctx):
        parts = plain(self, ctx)
        return parts[:-1] if parts is not None and len(parts) > 2 else parts

    monkeypatch.setattr(Combinators, "conjunction_parts", forgetful)
    assert sweep(0, 50)["wrong"] >= 3
