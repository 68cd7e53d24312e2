"""The regexes of content DFAs stay small enough for the dev splits' negations (issue 49, brief 50d).

:func:`~constrained_spec.grammar.json_schema.content_dfa.to_node` writes a DFA back as a regex by
state elimination. Three rewrites keep that regex small without changing its language: unions
factor their common first and last items (``aX|aY`` is ``a(X|Y)``), counted repetitions of one
base merge (``X{a,b}X{c,d}`` is ``X{a+c,b+d}``; touching counts in a union are one), and costly
character classes (the escaped controls, "everything but these letters") are read through a hub
shared by the edges into one state. Oracles that cannot share the compiler's bugs:

* Python ``re`` over the JSON spelling of random strings (``json.dumps``), for random patterns
  over an alphabet whose characters need escapes (so the hubs are exercised), and ``re`` on the
  decoded strings for the truth;
* ``jsonschema`` for the dev split's schema that needed the complement of 32 state names
  (Github_easy---o35866) on generated objects;
* negative controls: each rewrite broken on purpose (a hub reading the wrong class, a factored
  union losing its other members, touching counts merged where they do not touch) is caught by
  the same checker.

The bound stays: a language whose regex is past ``MAX_NODE_SIZE`` (exactly one of five words
contained, Github_easy---o65510) is refused quickly with a named error.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import time
from typing import Any, Callable, Optional

import jsonschema
import pytest
from grammar_oracles import rand_pattern

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex
from constrained_spec.grammar.json_schema import content_dfa as cd
from constrained_spec.grammar.json_schema.content_dfa import MAX_NODE_SIZE, DfaTooLarge, dfa_of_node, product, to_node
from constrained_spec.grammar.json_schema.negation import length_node, own_strings_dfa, recipe_dfa, search_node

#: characters of the random strings: letters, and ones JSON spells with escapes (no line terminator
#: but ``\n``, where ECMA's ``.`` and Python's agree)
ALPHABET = 'ab"\\\n\x01é'
ATOMS = ["a", "b", "[ab]", "[^a]", ".", '"', "\\\\", "\\n", "[^ab]"]
REPS = ["*", "+", "?", "{1,3}", "{2}"]


def spell(s: str) -> str:
    """The canonical JSON spelling of the content of the string s (quotes left out)."""
    return json.dumps(s, ensure_ascii=False)[1:-1]


STRINGS = ["".join(t) for n in range(4) for t in itertools.product('ab"\n\x01', repeat=n)]


def _strings(rng: random.Random) -> list[str]:
    return STRINGS + ["".join(rng.choice(ALPHABET) for _ in range(rng.randrange(4, 9))) for _ in range(300)]


def _rx(node: Optional[tuple]) -> Optional[re.Pattern]:
    body = None if node is None else ecma.emit(node)
    return None if body is None else re.compile(body)


def _mismatches(seed: int, rounds: int = 20) -> list[tuple[str, str, str]]:
    """(pattern a, pattern b, string) where the regex of ``a and b`` / ``a and not b`` (search
    semantics, by DFA) disagrees with ``re`` on the string's JSON spelling."""
    rng = random.Random(seed)
    bad: list[tuple[str, str, str]] = []
    for _ in range(rounds):
        pa, pb = rand_pattern(rng, ATOMS, REPS), rand_pattern(rng, ATOMS, REPS)
        ra, rb = re.compile(pa), re.compile(pb)
        da, db = dfa_of_node(search_node(pa)), dfa_of_node(search_node(pb))
        ops: list[tuple[Callable[[bool, bool], bool], Callable[[str], bool]]] = [
            (lambda x, y: x and y, lambda s: bool(ra.search(s)) and bool(rb.search(s))),
            (lambda x, y: x and not y, lambda s: bool(ra.search(s)) and not rb.search(s)),
        ]
        for op, truth in ops:
            rx = _rx(to_node(product(da, db, op)))
            for s in _strings(rng):
                if (rx is not None and rx.fullmatch(spell(s)) is not None) != truth(s):
                    bad.append((pa, pb, s))
                    break
    return bad


@pytest.mark.parametrize("seed", range(4))
def test_regex_of_products_matches_re_over_json_spellings(seed):
    assert _mismatches(seed) == []


def test_control_hub_reading_every_costly_character_is_caught(monkeypatch):
    """A hub that reads every costly character (not the edge's own) makes the regex wider."""
    real = cd._generalised

    def wide(d: cd.Dfa) -> dict[int, dict[int, Any]]:
        r = real(d)
        n = len(d.edges)
        for h in range(n + 2, len(r)):
            for t in r[h]:
                r[h][t] = ("set", ecma.union(r[h][t][1], ecma.norm([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])))
        return r

    monkeypatch.setattr(cd, "_generalised", wide)
    assert any(_mismatches(seed) for seed in range(4))


def test_control_factoring_that_keeps_one_member_is_caught(monkeypatch):
    """A factored union that keeps only its first member's rest makes the regex narrower."""

    def lossy(flat: list, front: bool, depth: int) -> list:
        groups: dict[object, list] = {}
        for y in flat:
            its = cd._items(y)
            groups.setdefault(cd._key(its[0] if front else its[-1]), []).append(y)
        return [g[0] for g in groups.values()]

    monkeypatch.setattr(cd, "_factor", lossy)
    assert any(_mismatches(seed) for seed in range(4))


LENGTH_UNIONS = [((0, 1), (3, 4)), ((0, 2), (3, 4)), ((1, 1), (0, 0)), ((2, 2), (5, None)), ((0, 0), (2, 3))]


def _length_mismatches() -> list[tuple]:
    """(lengths, lengths, string) where the regex of the strings of either length range (a union
    of counted repetitions) disagrees with the string's length."""
    bad = []
    for (a, b), (c, e) in LENGTH_UNIONS:
        d = product(dfa_of_node(length_node(a, b)), dfa_of_node(length_node(c, e)), lambda x, y: x or y)
        rx = _rx(to_node(d))
        for s in ["a" * k for k in range(8)] + ['"' * k for k in range(8)]:
            want = a <= len(s) <= b or (c <= len(s) and (e is None or len(s) <= e))
            if (rx is not None and rx.fullmatch(spell(s)) is not None) != want:
                bad.append(((a, b), (c, e), s))
    return bad


def test_touching_counts_merge_and_apart_ones_do_not():
    assert _length_mismatches() == []


def test_control_counts_merged_across_a_gap_are_caught(monkeypatch):
    """Counts merged although apart (``X{0,1}|X{3,4}`` as ``X{0,4}``) accept length 2."""

    def careless(flat: list, eps: bool) -> tuple[list, bool]:
        reps = [cd._rep_parts(y) for y in flat] + ([(cd._rep_parts(flat[0])[0], 0, 0)] if eps and flat else [])
        if len(reps) >= 2 and all(cd._same(reps[0][0], r[0]) for r in reps):
            his = [h for _, _, h in reps]
            hi = None if None in his else max(h for h in his if h is not None)
            return [cd._counted(reps[0][0], min(lo for _, lo, _ in reps), hi)], False
        return flat, eps

    monkeypatch.setattr(cd, "_merge_counts", careless)
    assert _length_mismatches()


# -- the dev splits' languages ------------------------------------------------------------------

MEXICAN_STATES = [
    "aguascalientes", "baja-california-norte", "baja-california-sur", "campeche", "chiapas", "chihuahua",
    "coahuila", "colima", "distrito-federal", "durango", "guanajuato", "guerrero", "hidalgo", "jalisco",
    "mexico", "michoacan", "morelos", "nayarit", "nuevo-leon", "oaxaca", "puebla", "queretaro",
    "quintana-roo", "san-luis-potosi", "sinaloa", "sonora", "tabasco", "tamaulipas", "tlaxcala", "veracruz",
    "yucatan", "zacatecas",
]
CANADIAN = ["AB", "BC", "MB", "NB", "NF", "NT", "NV", "NU", "ON", "PE", "QC", "SK", "YT"]
US = ["AL", "AK", "AS", "AZ", "AR", "AA", "AE", "AP", "CA", "CO", "CT", "DE", "DC", "FM", "FL", "GA", "GU",
      "HI", "ID", "IL", "IN", "IA", "KS", "KY", "LA", "ME", "MH", "MD", "MA", "MI", "MN", "MS", "MO", "MT",
      "NE", "NV", "NH", "NJ", "NM", "NY", "NC", "ND", "MP", "OH", "OK", "OR", "PW", "PA", "PR", "RI", "SC",
      "SD", "TN", "TX", "UT", "VT", "VI", "VA", "WA", "WV", "WI", "WY"]


def test_strings_up_to_51_but_32_words_fit_the_bound():
    """The complement of the 32 Mexican state names among strings 0..51 long (279 DFA states: its
    regex passed MAX_NODE_SIZE before) is written within the bound, and exactly."""
    node = to_node(own_strings_dfa(0, 51, [], MEXICAN_STATES, []))
    assert node is not None and cd._size(node) <= MAX_NODE_SIZE
    rx = _rx(node)
    assert rx is not None
    rng = random.Random(3)
    probes = MEXICAN_STATES + [w[:k] for w in MEXICAN_STATES for k in (1, len(w) - 1)]
    probes += [w + c for w in MEXICAN_STATES[:8] for c in 'a"\n'] + ["", "x" * 51, "x" * 52, '"' * 51, "é" * 52]
    probes += ["".join(rng.choice('aeiou-"é\n') for _ in range(rng.randrange(60))) for _ in range(300)]
    for s in probes:
        assert (rx.fullmatch(spell(s)) is not None) == (len(s) <= 51 and s not in MEXICAN_STATES), s


def _address_schema() -> dict:
    """Github_easy---o35866 (the VA 10-10CG address): three countries, each its own states."""
    def branch(country: str, states: list[str], **extra: Any) -> dict:
        return {"properties": {"country": {"type": "string", "enum": [country]},
                               "state": {"type": "string", "enum": states},
                               "postalCode": {"type": "string", "maxLength": 10, **extra}}}

    return {
        "type": "object", "additionalProperties": False, "required": ["address"],
        "properties": {"address": {"$ref": "#/definitions/address"}},
        "definitions": {"address": {"type": "object", "oneOf": [
            branch("CAN", CANADIAN), branch("MEX", MEXICAN_STATES), branch("USA", US)]}},
    }


def test_address_one_of_with_32_state_names_is_exact():
    """The dev split's schema is compiled (refused before: 'not' past the DFA's bounds) and its
    regex accepts a generated object's compact text exactly where jsonschema says it is valid."""
    schema = _address_schema()
    rx = re.compile(schema_to_regex(schema, SchemaOptions()).regex)
    validator = jsonschema.Draft4Validator(schema)
    rng = random.Random(11)
    pool: list[Any] = ["CAN", "MEX", "USA", "XX", "", "mexico", 3, None]
    states = MEXICAN_STATES + CANADIAN + US + ["", "ZZ", "mexic", "mexicoo", "a" * 11]
    judged = {True: 0, False: 0}
    for _ in range(1500):
        addr: dict[str, Any] = {}
        for key, choices in (("country", pool), ("state", states + [1]), ("postalCode", ["", "12345", "x" * 11, 5])):
            if rng.random() < 0.8:
                addr[key] = rng.choice(choices)
        value = {"address": addr}
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        want = validator.is_valid(value)
        assert (rx.fullmatch(text) is not None) == want, text
        judged[want] += 1
    assert judged[True] > 100 and judged[False] > 100, judged


# -- the bound stays --------------------------------------------------------------------------------

SCOPES = ["customer", "maker", "operator", "admin", "designer"]


def test_exactly_one_of_five_words_is_past_the_bound_and_refused_quickly():
    """Contains 'customer' and none of four other words: about 80,000 characters of regex (a
    product of five word automata), past MAX_NODE_SIZE: DfaTooLarge, in well under a second."""
    d = own_strings_dfa(0, None, ["customer"], [], [recipe_dfa((0, None, (w,), None)) for w in SCOPES[1:]])
    t0 = time.monotonic()
    with pytest.raises(DfaTooLarge):
        to_node(d)
    assert time.monotonic() - t0 < 5


def test_hostile_automaton_is_refused_by_its_step_bound_quickly():
    """The 9th letter from the end (512 states, each elimination joining hundreds of paths) passes
    MAX_ELIMINATION_STEPS before its regex passes MAX_NODE_SIZE: refused in about a second."""
    d = dfa_of_node(search_node("^[ab]*a[ab]{8}$"))
    assert len(d.edges) == 512
    t0 = time.monotonic()
    with pytest.raises(DfaTooLarge, match="steps"):
        to_node(d)
    assert time.monotonic() - t0 < 10


def test_one_of_five_contained_words_is_refused_by_name():
    schema = {"type": "array", "items": {"type": "string", "oneOf": [{"pattern": w} for w in SCOPES]}}
    with pytest.raises(UnsupportedKeywordError) as e:
        schema_to_regex(schema)
    assert e.value.keyword == "oneOf" and e.value.pointer == "/items/oneOf"
