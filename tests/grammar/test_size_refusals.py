"""The shapes behind the size refusals of issue 49 (item 3): each now compiles exactly.

1. A key language with a long length bound (``patternProperties: {"^[a-z]{1,255}$": ...}`` beside
   declared names): state elimination wrote the run of optional characters as a nesting 255 deep,
   which Python's recursion (the grammar builder's walks) and llguidance's regex parser (Rust
   ``regex-syntax``, nesting limit 250) refuse; now it is one bounded repetition.
2. A large all-optional object (its regex narrowed: first property required) with a large enum: the
   greedy-lexing check of its grammar ran out of steps walking the enum; its budget now grows with
   the terminals' size.
3. ``not: {type: array, contains: S}`` (met as the ``else`` of an ``if``): now ``items: {not: S}``.
4. A recursive schema whose dependencies and conditionals write the whole object once per branch
   combination: in grammar mode each large alternative becomes a rule of its own.

Oracles: ``jsonschema`` and ``re.fullmatch`` (and the compiler's documented restrictions: compact
text, declared properties only, declared order); grammars are walked byte by byte through llguidance.
Each construction has a negative control: a deliberately wrong variant that the same check rejects.
"""

from __future__ import annotations

import json
import math
import random
import re
import string

import jsonschema
import pytest
from grammar_oracles import byte_walk as _walk

from constrained_spec.errors import CompileLimitError, UnsupportedKeywordError
from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.json_schema import SchemaOptions, canonical_key_orders, content_dfa, emit_lark, schema_to_regex
from constrained_spec.grammar.json_schema import compiler as compiler_mod
from constrained_spec.grammar.vocab import TokenVocabulary

_BYTES = TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)


def _dumps(v: object) -> str:
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def _ordered(v: object, order: dict[str, int]) -> object:
    """v with its objects' keys in the compiler's order (``canonical_key_orders``; the other keys
    last, as they were: ``benchmarks/coverage.py``'s ``reorder_keys``)."""
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: (order.get(k, math.inf), list(v).index(k)))
        return {k: _ordered(v[k], order) for k in keys}
    if isinstance(v, list):
        return [_ordered(x, order) for x in v]
    return v


def _nesting(text: str) -> int:
    """The deepest group nesting of a regex text (escapes and classes skipped)."""
    depth = best = 0
    i = 0
    in_class = False
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
            best = max(best, depth)
        elif c == ")":
            depth -= 1
        i += 1
    return best


def _mutations(rng: random.Random, text: str, n: int) -> list[str]:
    """Texts near ``text``: a character dropped, doubled or replaced by JSON punctuation or a letter."""
    out = []
    for _ in range(n):
        i = rng.randrange(len(text))
        op = rng.randrange(3)
        if op == 0:
            out.append(text[:i] + text[i + 1:])
        elif op == 1:
            out.append(text[:i] + text[i] + text[i:])
        else:
            out.append(text[:i] + rng.choice('{}[],:"0ax') + text[i + 1:])
    return out


def _oracle(schema: dict, text: str, order: dict[str, int]) -> bool:
    """jsonschema's verdict on the value of ``text``, where ``text`` is its compact canonical text."""
    try:
        v = json.loads(text)
    except ValueError:
        return False
    return _dumps(_ordered(v, order)) == text and jsonschema.validators.validator_for(schema)(schema).is_valid(v)


# -- 1. long key languages: one bounded repetition, not a deep nesting -----------------------------


def test_state_elimination_writes_a_run_of_optional_copies_as_one_repetition() -> None:
    d = content_dfa.dfa_of_node(ecma.parse("[a-z]{1,300}"))
    node = content_dfa.to_node(d)
    assert node is not None
    text = ecma.emit(node)
    assert text is not None
    assert _nesting(text) <= 3, text[:200]
    rng = random.Random(1)
    for n in (0, 1, 2, 150, 299, 300, 301, 400):
        s = "".join(rng.choice("abz") for _ in range(n))
        assert bool(re.fullmatch(text, s)) == (1 <= n <= 300), n
    assert not re.fullmatch(text, "a" * 10 + "A")


def test_joined_repetitions_keep_the_language() -> None:
    """``B{a,b} B{c,d}`` is ``B{a+c,b+d}`` for any B (here a two-letter B, and unbounded sides)."""
    b = ("seq", (("set", ((97, 97),)), ("set", ((98, 98),))))
    rng = random.Random(2)
    for _ in range(40):
        lo1, lo2 = rng.randint(0, 3), rng.randint(0, 3)
        hi1 = rng.choice([None, lo1 + rng.randint(0, 3)])
        hi2 = rng.choice([None, lo2 + rng.randint(0, 3)])
        joined = content_dfa._seq(("rep", b, lo1, hi1), ("rep", b, lo2, hi2))
        text = ecma.emit(joined)
        assert text is not None
        two = "(ab)" + ("{%d,}" % lo1 if hi1 is None else "{%d,%d}" % (lo1, hi1)) + "(ab)" + (
            "{%d,}" % lo2 if hi2 is None else "{%d,%d}" % (lo2, hi2))
        for k in range(0, 14):
            assert bool(re.fullmatch(text, "ab" * k)) == bool(re.fullmatch(two, "ab" * k)), (text, two, k)
    # the empty string or B{1,h}: B{0,h}
    assert content_dfa._alt([content_dfa.EPS, ("rep", b, 1, 4)]) == ("rep", b, 0, 4)
    assert content_dfa._alt([content_dfa.EPS, ("rep", b, 2, 4)]) == ("rep", ("rep", b, 2, 4), 0, 1)


def _key_schema(hi: int) -> dict:
    return {
        "type": "object",
        "properties": {"id": {"type": "string"}, "Kids": {"type": "array", "items": {"$ref": "#"}}},
        "patternProperties": {"^[a-z]{1,%d}$" % hi: {"type": ["string", "integer"]}},
        "additionalProperties": False,
    }


def _key_samples(rng: random.Random) -> list[object]:
    out: list[object] = []
    for n in (1, 2, 7, 254, 255, 256):
        key = "".join(rng.choice(string.ascii_lowercase) for _ in range(n))
        out.append({"id": "x", key: 3})
        out.append({"Kids": [{key: "s"}, {"id": "y", "Kids": []}]})
        out.append({key: None})
    out += [{"id": 3}, {"Kids": [{"id": "a", "B": 1}]}, {"a": 1, "id": "x"}, {"i": 1, "ida": 2, "idb": "x"}, {}]
    return out


def test_long_key_language_in_a_grammar_is_exact() -> None:
    """A recursive schema (so a grammar) whose objects' other keys are ``[a-z]{1,255}`` less ``id``
    (a DFA difference, written back by state elimination): llguidance compiles the grammar (it
    refused the old nesting) and it holds exactly the schema's language."""
    schema = _key_schema(255)
    res = schema_to_regex(schema)
    assert res.lark is not None
    assert _nesting(res.regex) < 100
    grammar = compile_grammar("lark", res.lark, _BYTES)
    order = canonical_key_orders(schema)
    rng = random.Random(3)
    texts = [_dumps(_ordered(v, order)) for v in _key_samples(rng)]
    texts += [m for t in texts[:12] for m in _mutations(rng, t, 4)]
    verdicts = {True: 0, False: 0}
    for text in dict.fromkeys(texts):
        want = _oracle(schema, text, order)
        assert _walk(grammar, text) == want, (text[:120], want)
        verdicts[want] += 1
    assert verdicts[True] >= 8 and verdicts[False] >= 20, verdicts
    # negative control: a variant one character shorter in its key bound is told apart
    wrong_lark = schema_to_regex(_key_schema(254)).lark
    assert wrong_lark is not None
    wrong = compile_grammar("lark", wrong_lark, _BYTES)
    text = _dumps({"id": "x", "a" * 255: 3})
    assert _oracle(schema, text, order) and _walk(grammar, text) and not _walk(wrong, text)


# -- 2. the greedy-lexing check's budget grows with the terminals' size ----------------------------


_WORDS = ["GMT+%02d:%02d-%s-Region/City_%03d" % (i % 13, (i * 7) % 60, "ABCDEFGH"[i % 8] * 3, i) for i in range(400)]


def _enum_schema() -> dict:
    props: dict = {f"p{i}": {"type": "string", "enum": [f"v{i}a", f"v{i}b"]} for i in range(40)}
    props["zone"] = {"type": "string", "enum": _WORDS}
    return {"type": "object", "properties": props, "additionalProperties": False}


def test_large_enum_in_a_narrowed_object_gets_its_grammar(monkeypatch) -> None:
    schema = _enum_schema()
    res = schema_to_regex(schema)
    assert any("first property required" in n for n in res.narrowed) and res.lark is not None
    grammar = compile_grammar("lark", res.lark, _BYTES)
    rx = re.compile(res.regex)
    order = canonical_key_orders(schema)
    rng = random.Random(4)
    values = []
    for _ in range(20):
        keys = sorted(rng.sample(range(40), rng.randint(0, 4)))
        v = {f"p{i}": f"v{i}" + rng.choice("ab") for i in keys}
        if rng.random() < 0.7:
            v["zone"] = rng.choice(_WORDS)
        values.append(v)
    texts = [_dumps(_ordered(v, order)) for v in values]
    texts += [m for t in texts for m in _mutations(rng, t, 3)]
    texts += ['{"zone":"GMT+00:00-AAA-Region/City_000x"}', '{"p1":"v1a","p0":"v0a"}', '{"zone":"%s"}' % _WORDS[399]]
    without_first = 0
    for text in dict.fromkeys(texts):
        want = _oracle(schema, text, order)
        assert _walk(grammar, text) == want, (text[:120], want)
        assert not rx.fullmatch(text) or want  # the narrowed regex: a sound part
        without_first += want and not text.startswith('{"p0"') and text != "{}"
    assert without_first >= 5
    # negative control: without the size-scaled steps the check runs out and the schema is refused
    monkeypatch.setattr(emit_lark, "SIZE_STEPS", 0)
    with pytest.raises(CompileLimitError):
        schema_to_regex(schema)


# -- 3. not {contains: S} --------------------------------------------------------------------------


_CONTAINS_SAMPLES: list[object] = [
    [], ["a"], ["x"], ["x", "y"], ["x", "b"], [1, 2], [1, "a"], [[], {}], [["a"]], "a", 1, None, True, {},
    {"k": ["a"]}, [None, False, 1.5],
]


@pytest.mark.parametrize("negated", [
    {"type": "array", "contains": {"enum": ["a", "b"]}},
    {"contains": {"enum": ["a", "b"]}},
    {"contains": {"type": "string"}},
    {"contains": {"not": {"type": "string"}}},
    {"type": "array", "contains": {"type": "integer"}},
])
def test_not_contains_is_exact(negated: dict) -> None:
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "not": negated}
    rx = re.compile(schema_to_regex(schema).regex)
    valid = jsonschema.Draft7Validator(schema).is_valid
    for v in _CONTAINS_SAMPLES:
        assert bool(rx.fullmatch(_dumps(v))) == valid(v), (negated, v)
    # negative control: every item *in* S (the negation read wrongly) is told apart by the same samples
    wrong = dict(negated)
    wrong["items"] = wrong.pop("contains")
    wrong_rx = re.compile(schema_to_regex({"$schema": schema["$schema"], **wrong}).regex)
    assert any(bool(wrong_rx.fullmatch(_dumps(v))) != valid(v) for v in _CONTAINS_SAMPLES)


def test_not_contains_with_min_contains_is_still_refused() -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "not": {"contains": {"type": "string"}, "minContains": 2}}
    with pytest.raises(UnsupportedKeywordError):
        schema_to_regex(schema)


def test_else_of_an_if_on_contains_compiles() -> None:
    """The form the Github_medium---o39217 meta-schema has: ``if`` whose negation needs
    ``not: {type: array, contains: ...}`` (it was refused by name, behind its size refusal)."""
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "properties": {"t": {}},
        "if": {"properties": {"t": {"anyOf": [{"enum": ["object", "array"]},
                                              {"type": "array", "contains": {"enum": ["object", "array"]}}]}},
               "required": ["t"]},
        "then": {"required": ["n"]},
        "else": {"required": ["u"]},
    }
    rx = re.compile(schema_to_regex(schema, SchemaOptions(additional_properties="spec")).regex)
    valid = jsonschema.Draft7Validator(schema).is_valid
    order = canonical_key_orders(schema)
    for v in [{"t": ["object"], "n": 1}, {"t": ["object"]}, {"t": "array", "n": 1}, {"t": "array", "u": 1},
              {"t": ["x", "array"], "n": 0}, {"t": ["x"], "n": 0}, {"t": ["x"], "u": 0}, {"t": [], "u": 0},
              {"t": "x", "u": 1}, {"t": 3, "n": 1}, {"u": 1}, {"n": 1}, {}]:
        assert bool(rx.fullmatch(_dumps(_ordered(v, order)))) == valid(v), v


# -- 4. branch combinations as rules of their own ---------------------------------------------------


def _branchy_schema() -> dict:
    """A reduced Github_medium---o39217 (its values objects: no free-form arrays, whose nesting the
    compiler bounds): a recursive object whose ``dependencies`` hold an ``if``/``then``, so each
    branch combination writes the object again."""
    return {
        "type": "object",
        "definitions": {"schemaArray": {"type": "array", "minItems": 1, "items": {"$ref": "#"}}},
        "dependencies": {"_uniqueItems": {
            "if": {"properties": {"_uniqueItems": {"const": True}, "items": {"properties": {"type": {"anyOf": [
                {"enum": ["object", "array"]}, {"type": "array", "contains": {"enum": ["object", "array"]}}]}}}}},
            "then": {"required": ["maxItems"]}}},
        "properties": {"items": {"anyOf": [{"$ref": "#"}, {"$ref": "#/definitions/schemaArray"}]},
                       "not": {"$ref": "#"}},
    }


_OPTS = SchemaOptions(max_regex_chars=10_000, additional_properties="spec")


#: the keys of the values below, in the order the compiler writes them (declared, the dependency's
#: name, the name its ``then`` requires, the others)
_BRANCHY_KEYS = ["items", "not", "_uniqueItems", "maxItems", "type", "q"]


def _branchy_value(rng: random.Random, depth: int = 0) -> object:
    """A random value near the schema's language: objects over its keys and a few others (the
    others' values free-form, shallow)."""
    if depth > 2 or rng.random() < 0.2:
        return rng.choice([{}, {"q": 1}, True, 1, "array", ["object"], None, []])
    v: dict = {}
    keys = rng.sample(_BRANCHY_KEYS, rng.randint(0, 4))
    for k in sorted(keys, key=_BRANCHY_KEYS.index):
        if k == "items":
            v[k] = rng.choice([_branchy_value(rng, depth + 1), [_branchy_value(rng, depth + 1)], []])
        elif k == "_uniqueItems":
            v[k] = rng.choice([True, False])
        elif k == "type":
            v[k] = rng.choice(["object", "array", "string", ["array"], ["string"], 3])
        elif k == "not":
            v[k] = _branchy_value(rng, depth + 1)
        else:  # a free-form value: nested at most SchemaOptions.any_value_depth deep (a documented bound)
            v[k] = rng.choice([1, None, "s", [], ["a", 2], {"k": 1}, {"k": [1]}])
    return v


def test_branch_combinations_as_rules_hold_the_language(monkeypatch) -> None:
    schema = _branchy_schema()
    res = schema_to_regex(schema, _OPTS)
    assert res.regex == "" and res.lark is not None
    grammar = compile_grammar("lark", res.lark, _BYTES)
    order = canonical_key_orders(schema)
    valid = jsonschema.Draft7Validator(schema).is_valid
    rng = random.Random(5)
    values = [_branchy_value(rng) for _ in range(150)]
    values += [{"items": {"type": ["array"]}, "_uniqueItems": True, "maxItems": 1},
               {"items": {"type": ["array"]}, "_uniqueItems": True},
               {"items": {"type": ["x", "object"]}, "_uniqueItems": True},
               {"items": {"type": ["x"]}, "_uniqueItems": True},
               {"items": {"type": "object"}, "_uniqueItems": True, "maxItems": 2},
               {"items": {"type": "object"}, "_uniqueItems": True}, {"items": []}]
    # a valid value is accepted in the compiler's key order (the values' own); an invalid one, and
    # any text that is no value, in no order
    verdicts = {True: 0, False: 0}
    texts = []
    for v in values:
        if valid(v):
            assert _walk(grammar, _dumps(v)), _dumps(v)[:150]
            texts += _mutations(rng, _dumps(v), 3)
        else:
            texts += [_dumps(v), _dumps(_ordered(v, order))]
        verdicts[valid(v)] += 1
    for text in dict.fromkeys(texts):
        try:
            v = json.loads(text)
        except ValueError:
            assert not _walk(grammar, text), text[:150]
            continue
        if not valid(v) or _dumps(v) != text:  # an invalid value, or a text that is not compact
            assert not _walk(grammar, text), text[:150]
            verdicts[False] += 1
    assert verdicts[True] >= 30 and verdicts[False] >= 100, verdicts
    # negative control: without the branch alternatives as rules the schema is refused
    fresh_rule = compiler_mod.Compiler.fresh_rule
    monkeypatch.setattr(compiler_mod.Compiler, "fresh_rule",
                        lambda self, text, kind: text if kind == "group-part" else fresh_rule(self, text, kind))
    with pytest.raises(CompileLimitError):
        schema_to_regex(schema, _OPTS)
