"""The lazy engine reads our JSON Schema compiler's regexes as Python's ``re`` does.

The compiler writes Python ``re`` syntax; the lazy engine hands the same text to llguidance, whose
Rust ``regex-syntax`` reads escapes (``\\uXXXX``, ``\\U0001F600``, ``\\x00``), classes and
negations in its own way. For ~20 regexes the compiler emits for small varied schemas, every
sample string (valid instances, their mutations, and random walks of the lazy matcher itself) must
be accepted by the lazy matcher over a byte vocabulary (one token per byte + EOS), mask by mask,
exactly when ``re.fullmatch`` accepts it. The reference is Python's regex engine, not llguidance.
A negative control checks that the comparison catches a regex that differs by one class.
"""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

pytest.importorskip("llguidance")

from constrained_spec.grammar.backends.llguidance import compile_grammar  # noqa: E402
from constrained_spec.grammar.json_schema import schema_to_regex  # noqa: E402
from constrained_spec.grammar.vocab import TokenVocabulary  # noqa: E402

EOS = 256
VOCAB = TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(EOS,), size=257)

#: (name, schema, valid instances): each schema's regex is checked on these and on their mutations
CASES = [
    ("pattern-digits", {"type": "string", "pattern": "^[a-z]+\\d{2}$"}, ["ab12", "z00"]),
    ("pattern-word-space", {"type": "string", "pattern": "^\\w+\\s\\d$"}, ["ab_9 1", "X\t0"]),
    ("pattern-negated-class", {"type": "string", "pattern": "^[^a-c]{2}$"}, ["zz", "é日", "\\\""]),
    ("pattern-unanchored", {"type": "string", "pattern": "ab"}, ["xaby", "ab", "日ab😀"]),
    ("pattern-dot", {"type": "string", "pattern": "^.{2}$"}, ["ab", "é😀", "\tx"]),
    ("pattern-escapes", {"type": "string", "pattern": "^\\$\\d+(\\.\\d\\d)?[\\-\\/]\\x41\\u00e9$"}, ["$12.50-Aé", "$0/Aé"]),
    ("pattern-unicode-range", {"type": "string", "pattern": "^[\\u00e0-\\u00ff\\u4e00-\\u9fff]+$"}, ["éü", "日本語"]),
    ("pattern-alternation", {"type": "string", "pattern": "^(foo|ba[rz])+(-[A-F0-9]{2,3})?$"}, ["foobar", "baz-0AF", "foo-12"]),
    ("pattern-class-set-ops", {"type": "string", "pattern": "^[&&a~~[]+$"}, ["&", "a~[", "~~&&"]),  # Rust reads &&, ~~, [ in a class as set syntax
    ("pattern-space-classes", {"type": "string", "pattern": "^[\\s\\S]{1,3}\\s?$"}, ["a", " \t", "é日 "]),
    ("format-date-time", {"type": "string", "format": "date-time"}, ["2024-02-29T12:30:00Z", "1999-12-31T23:59:59.123+05:30"]),
    ("format-email", {"type": "string", "format": "email"}, ["a.b+c@example.com", "x_y@sub.domain.org"]),
    ("format-uuid", {"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"]),
    ("format-date-ipv4", {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "ipv4"}]},
     ["2023-01-31", "192.168.0.255"]),
    ("integer-range", {"type": "integer", "minimum": -50, "maximum": 1234}, [-50, 0, 7, 999, 1234]),
    ("number-range", {"type": "number", "exclusiveMinimum": -2.5, "maximum": 10}, [-2.25, 0, 3.5, 10, 9.999]),
    ("enum-unicode-escapes", {"enum": ["héllo", 'a"b', "back\\slash", "tab\t", "日本", "\u2028", "😀", None, 3]},
     ["héllo", 'a"b', "back\\slash", "tab\t", "日本", "\u2028", "😀", None, 3]),
    ("const-control", {"const": "line\nbreak\u0001end"}, ["line\nbreak\u0001end"]),
    ("string-length", {"type": "string", "minLength": 2, "maxLength": 4}, ["ab", "日本語!", "\\\"é", "😀😀"]),
    ("nested-object", {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        "owner": {"type": "object", "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"}}, "required": ["name"]},
    }, "required": ["id", "owner"]}, [{"id": 1, "owner": {"name": "Zoë"}}, {"id": 42, "tags": ["a", "日本"], "owner": {"name": "", "ok": False}}]),
    ("array-mixed", {"type": "array", "items": {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"type": "number", "minimum": 0}]},
                     "minItems": 1, "maxItems": 4}, [[None], [True, 1.5e3, 0], [0.001, False, None, 7]]),
    ("object-pattern-properties", {"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "integer"}},
                                   "additionalProperties": False}, [{}, {"x-ab": 1, "x-c": -3}]),
]

#: characters mutations insert or substitute: classes and escapes the dialects may read differently
ALPHABET = ['a', 'Z', '0', '9', '_', '-', '.', ':', '@', '+', 'e', 'E', ' ', '"', '\\', '/', '{', '}', '[', ']', ',',
            '\t', '\n', '\u0001', '\u007f', 'é', 'ü', '日', '😀', '١', '\u2028', '\u00a0', 'u', 'A', 'F', '$']


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def lazy_accepts(grammar, text: str) -> bool:
    """The lazy matcher over one token per byte: each byte in the mask, then EOS in the last mask.
    Cross-checked against count_allowed (the verifier's path)."""
    ids = list(text.encode("utf-8"))
    walker = grammar.matcher()
    verdict = True
    for tid in ids + [EOS]:
        allowed = tid in set(walker.allowed_ids().tolist())
        if not allowed:
            verdict = False
            break
        if tid != EOS:
            walker.advance(tid)
    counted = grammar.matcher().count_allowed(ids + [EOS]) == len(ids) + 1
    assert counted == verdict, f"mask walk and count_allowed disagree on {text!r}"
    return verdict


def mutations(text: str, rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        chars = list(text)
        op = rng.randrange(5)
        i = rng.randrange(len(chars) + 1)
        if op == 0 and chars:  # delete
            del chars[min(i, len(chars) - 1)]
        elif op == 1:  # insert
            chars.insert(i, rng.choice(ALPHABET))
        elif op == 2 and chars:  # substitute
            chars[min(i, len(chars) - 1)] = rng.choice(ALPHABET)
        elif op == 3:  # truncate
            chars = chars[:i]
        else:  # duplicate a slice
            j = rng.randrange(len(chars) + 1)
            a, b = sorted((i, j))
            chars[a:a] = chars[a:b]
        out.append("".join(chars))
    return out


def random_walks(grammar, rng: random.Random, n: int, seeds: list[str], max_bytes: int = 300) -> list[str]:
    """Texts the lazy matcher itself produces: a random prefix of a valid text, then random allowed
    bytes (ASCII four times in five, where allowed) until EOS is drawn; re must accept each."""
    texts = []
    for _ in range(n):
        m = grammar.matcher()
        seed = rng.choice(seeds).encode("utf-8")
        data = bytearray(seed[: rng.randrange(len(seed) + 1)])
        for b in data:
            m.advance(b)
        for _ in range(max_bytes):
            allowed = m.allowed_ids()
            if EOS in allowed and (rng.random() < 0.25 or len(allowed) == 1):
                texts.append(bytes(data).decode("utf-8"))  # a masked walk must be valid UTF-8
                break
            choices = allowed[allowed != EOS]
            assert choices.size, f"dead end after {bytes(data)!r}"
            ascii_ = choices[choices < 0x80]
            if ascii_.size and rng.random() < 0.8:
                choices = ascii_
            tid = int(choices[rng.randrange(choices.size)])
            m.advance(tid)
            data.append(tid)
    return texts


def disagreements(regex_for_lazy: str, reference_regex: str, texts: list[str]) -> list[tuple[str, bool, bool]]:
    grammar = compile_grammar("regex", regex_for_lazy, VOCAB)
    ref = re.compile(reference_regex)
    out = []
    for text in texts:
        want = ref.fullmatch(text) is not None
        got = lazy_accepts(grammar, text)
        if got != want:
            out.append((text, want, got))
    return out


@pytest.mark.filterwarnings("ignore:Possible set:FutureWarning")  # jsonschema checks the ECMA pattern with Python re
@pytest.mark.parametrize("name,schema,instances", CASES, ids=[c[0] for c in CASES])
def test_lazy_matches_python_re(name: str, schema: dict, instances: list) -> None:
    regex = schema_to_regex(schema).regex
    ref = re.compile(regex)
    rng = random.Random(name)
    valid = [_dumps(v) for v in instances]
    for text in valid:  # the instances are valid: the oracle must agree, or the case itself is wrong
        assert ref.fullmatch(text), f"{name}: re rejects the valid instance {text!r}"
    texts = list(valid)
    for text in valid:
        texts += mutations(text, rng, 40)
    grammar = compile_grammar("regex", regex, VOCAB)
    walks = random_walks(grammar, rng, 15, valid)
    assert walks, f"{name}: no random walk reached EOS"
    texts += walks
    texts = list(dict.fromkeys(texts))
    rejected = sum(ref.fullmatch(t) is None for t in texts)
    assert rejected >= 10, f"{name}: the samples hardly test rejection ({rejected} rejected)"
    bad = [(t, want, got) for t in texts if (got := lazy_accepts(grammar, t)) != (want := ref.fullmatch(t) is not None)]
    assert not bad, f"{name}: lazy vs re.fullmatch differ on {len(bad)} texts, e.g. {bad[:5]!r} (regex {regex[:300]!r})"


def test_negative_control_catches_a_changed_class() -> None:
    """A lazy grammar from a regex that differs by one class ([0-9] -> [0-8]) must be caught."""
    regex = schema_to_regex({"type": "integer", "minimum": 0, "maximum": 99}).regex
    changed = regex.replace("[0-9]", "[0-8]")
    assert changed != regex
    texts = [str(i) for i in range(100)] + ["-1", "100", "09", ""]
    bad = disagreements(changed, regex, texts)
    assert bad and all(want and not got for _, want, got in bad)
    assert "9" in {t for t, _, _ in bad}
    assert not disagreements(regex, regex, texts)


def test_byte_vocabulary_shape() -> None:
    assert VOCAB.size == 257 and len(VOCAB.tokens) == 256
    assert np.array_equal(np.arange(256), np.array(sorted(VOCAB.tokens)))
