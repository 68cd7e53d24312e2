"""Large all-optional objects as grammar rules: every subset of the declared properties, in order.

The regex of an all-optional object grows as n log n copies of its properties; past
``LOCAL_OBJECT_CAP`` the regex requires the first property (a sound narrowing, named in
``SchemaRegex.narrowed``), and the Lark grammar the lazy engine enforces holds the whole language
with one rule per property and per tail, so its size grows with the schema. Oracle: ``jsonschema``
on random subsets (with and without the first property) and on malformed texts.
"""

from __future__ import annotations

import json
import random
import re

from jsonschema import Draft202012Validator

from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.json_schema import schema_to_regex
from constrained_spec.grammar.vocab import TokenVocabulary

_BYTES = TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)
_WORDS = [f"w{k:02d}word" for k in range(30)]


def _schema(n: int) -> dict:
    props = {f"p{i}": {"type": "string", "enum": [f"{w}{i}" for w in _WORDS]} for i in range(n)}
    return {"type": "object", "properties": props, "additionalProperties": False}


def _in_grammar(grammar, text: str) -> bool:
    m = grammar.matcher()
    if not m.accepts_prefix_bytes(text.encode()):
        return False
    for b in text.encode():
        m.advance(b)
    return m.is_accepting()


def test_large_all_optional_object_is_whole_in_the_grammar():
    n = 40
    schema = _schema(n)
    res = schema_to_regex(schema)
    assert any("first property required" in x for x in res.narrowed) and res.lark
    grammar = compile_grammar("lark", res.lark, _BYTES)
    rx = re.compile(res.regex)
    valid = Draft202012Validator(schema).is_valid
    rnd = random.Random(7)
    without_first = 0
    for _ in range(40):
        keys = sorted(rnd.sample(range(n), rnd.randint(0, 5)))
        v = {f"p{i}": f"{rnd.choice(_WORDS)}{i}" for i in keys}
        text = json.dumps(v, separators=(",", ":"))
        assert _in_grammar(grammar, text), text
        assert not rx.fullmatch(text) or valid(v)
        without_first += bool(keys) and keys[0] != 0
    assert without_first and not rx.fullmatch('{"p3":"w00word3"}')  # the regex's narrowing (control)
    for bad in ('{"p3":"w00word3","p1":"w00word1"}', '{"p1":"w00word1","p1":"w00word1"}', '{,"p1":"w00word1"}',
                '{"p1":"w00word1",}', '{"p1":"w00word2"}', '{"zz":"w00word1"}', '{"p1":"w00word1""p2":"w00word2"}'):
        assert not _in_grammar(grammar, bad), bad
    assert _in_grammar(grammar, "{}")


def test_small_all_optional_object_keeps_its_exact_regex():
    res = schema_to_regex(_schema(4))
    assert not res.narrowed and res.lark is None
    assert re.fullmatch(res.regex, '{"p3":"w00word3"}')
