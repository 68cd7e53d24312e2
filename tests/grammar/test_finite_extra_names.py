"""``minProperties`` two or more above the declared properties where the extra properties have
finitely many names (``finite_names``): random schemas of the form against ``jsonschema``.

Two oracles, neither reading the compiler: (1) every valid object (a dict) has some key order the
regex accepts, every invalid one none (value level, any order: the compiler's order is its own
choice); (2) every *text* the regex accepts, duplicate keys included, parses to a valid object
(text level: a repeated name counts once, which a member count could miss). Old code refused every
schema here with lo >= 2 ('minProperties two or more above the required properties ...').
Controls: a finite rule cut to two names (narrower: (1) fails) and each name written
twice (wider: (2) fails).
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any, Optional

import jsonschema
import pytest

from constrained_spec.errors import EmptyLanguageError, UnsupportedKeywordError
from constrained_spec.grammar.json_schema import SchemaOptions, emit_object, schema_to_regex

PATTERNS = ["^a[0-2]$", "^(b|c)$", "^d$", "^(a1|b)$", "^e[0-9]$"]
DECLARED = {"p": {"type": "integer"}, "q": {"type": "string"}, "a1": {"type": "integer"}}
KEYS = ["p", "q", "a0", "a1", "a2", "b", "c", "d", "e3", "zz"]
VALUES: list[Any] = [1, "s", True]
OPTIONS = SchemaOptions(additional_properties="spec")


def dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"))


def rand_schema(rng: random.Random) -> dict[str, Any]:
    """An object with 0-2 declared properties, 1-2 finite patterns and counts that need two or more
    counted members beyond the required ones."""
    pats = rng.sample(PATTERNS, rng.choice([1, 1, 2]))
    schema: dict[str, Any] = {"type": "object",
                              "patternProperties": {p: rng.choice([{"type": "integer"}, {}]) for p in pats},
                              "additionalProperties": rng.choice([False, False, {"type": "integer"}])}
    names = rng.sample(sorted(DECLARED), rng.choice([0, 1, 2]))
    if names:
        schema["properties"] = {n: DECLARED[n] for n in names}
        if rng.random() < 0.4:
            schema["required"] = names[:1]
    lo = rng.choice([2, 2, 3])
    schema["minProperties"] = lo
    if rng.random() < 0.5:
        schema["maxProperties"] = lo + rng.choice([0, 1, 2])
    return schema


def rand_object(rng: random.Random) -> dict[str, Any]:
    return {k: rng.choice(VALUES) for k in rng.sample(KEYS, rng.choice([0, 1, 2, 2, 3, 3, 4]))}


def rand_text(rng: random.Random) -> str:
    """An object text whose members may repeat a name."""
    keys = [rng.choice(KEYS[:9]) for _ in range(rng.choice([1, 2, 2, 3, 3, 4]))]
    return "{" + ",".join(f'"{k}":{dumps(rng.choice(VALUES[:1] * 3 + VALUES))}' for k in keys) + "}"


def compiled(schema: dict[str, Any]) -> Optional[str]:
    try:
        return schema_to_regex(schema, OPTIONS).regex
    except EmptyLanguageError:
        return None


def disagreements(schema: dict[str, Any], regex: Optional[str], rng: random.Random, n: int) -> list[str]:
    """Both oracles on n random objects and n random texts."""
    validator = jsonschema.Draft202012Validator(schema)
    rx = None if regex is None else re.compile(regex)
    out = []
    for _ in range(n):
        v = rand_object(rng)
        acc = rx is not None and any(rx.fullmatch(dumps(dict(perm))) for perm in itertools.permutations(v.items()))
        if acc != validator.is_valid(v):
            out.append(f"{'accepted' if acc else 'rejected'} {dumps(v)}")
        t = rand_text(rng)
        if rx is not None and rx.fullmatch(t) and not validator.is_valid(json.loads(t)):
            out.append(f"accepted text {t} (invalid)")
    return out


def sweep(seed: int, schemas: int, values: int) -> tuple[list[str], int, int]:
    """(disagreements, schemas compiled, schemas refused by minProperties/maxProperties)."""
    rng = random.Random(seed)
    bad: list[str] = []
    ok = refused = 0
    for _ in range(schemas):
        schema = rand_schema(rng)
        try:
            regex = compiled(schema)
        except UnsupportedKeywordError as e:
            assert e.keyword in ("minProperties", "maxProperties"), e
            refused += 1
            continue
        ok += 1
        bad += [f"{dumps(schema)}: {d}" for d in disagreements(schema, regex, rng, values)]
    return bad, ok, refused


@pytest.mark.parametrize("seed", range(3))
def test_min_properties_over_finite_extra_names_is_exact(seed):
    bad, ok, _refused = sweep(seed, 12, 40)
    assert bad == []
    assert ok >= 6  # most of these compile (old code refused them all)


@pytest.mark.slow
def test_min_properties_over_finite_extra_names_sweep():
    bad, ok, refused = sweep(1000, 300, 150)
    assert bad == []
    assert ok > refused


def test_refused_where_names_are_infinite():
    """Two extra names from an infinite set would have to differ: refused by name, with the pointer."""
    schema = {"type": "object", "patternProperties": {"^[a-z]+$": {}}, "additionalProperties": False,
              "properties": {"m": {"const": True}}, "minProperties": 2}
    with pytest.raises(UnsupportedKeywordError) as e:
        schema_to_regex(schema)
    assert e.value.keyword == "minProperties" and "/minProperties" in str(e.value)


FIXED = {"type": "object", "patternProperties": {"^a[0-2]$": {"type": "integer"}}, "additionalProperties": False,
         "minProperties": 2}


def test_control_names_cut_short_is_caught(monkeypatch):
    """Narrower: a finite rule cut to its first two names rejects ``{"a0": 1, "a2": 1}``, which the
    value oracle catches (and the real construction accepts)."""
    real = emit_object.named_extras
    v = {"a0": 1, "a2": 1}
    assert jsonschema.Draft202012Validator(FIXED).is_valid(v)
    assert disagreements(FIXED, compiled(FIXED), random.Random(0), 200) == []
    monkeypatch.setattr(emit_object, "named_extras", lambda extras: real(extras)[:2])
    rx = re.compile(compiled(FIXED) or "")
    assert not any(rx.fullmatch(dumps(dict(p))) for p in itertools.permutations(v.items()))
    assert any(d.startswith("rejected") for d in disagreements(FIXED, compiled(FIXED), random.Random(0), 200))


def test_control_names_counted_twice_is_caught(monkeypatch):
    """Wider: each name written twice counts a repeated name twice and accepts ``{"a0":1,"a0":1}``
    (one property), which the text oracle catches."""
    real = emit_object.named_extras
    monkeypatch.setattr(emit_object, "named_extras", lambda extras: real(extras) * 2)
    regex = compiled(FIXED)
    assert regex is not None
    disagree = disagreements(FIXED, regex, random.Random(0), 200)
    assert any("accepted text" in d for d in disagree)
    monkeypatch.undo()
    assert disagreements(FIXED, compiled(FIXED), random.Random(0), 200) == []
