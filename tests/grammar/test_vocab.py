"""The vocabulary on real tokenizers: each id spells the exact bytes the tokenizer means.

For random JSON texts, the tokenizer's own encoding must be accepted by an automaton built over our
vocabulary: once for the literal text, once for a general JSON-string regex (GPT-2 family).
"""

from __future__ import annotations

import json
import random

import pytest
from conftest import real_tokenizer

from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.grammar.vocab import build_vocabulary

TOKENIZERS = ["gpt-2", "llama-bpe", "llama-spm", "qwen2"]
ALPHABET = list("abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789_-.,:;!?/\\\"'\n\t{}[]") + list("éüßñçøåæ中文字日本語한국어Ωπ€£→✓") + ["🙂", "🚀"]


def random_value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["str", "int", "float", "bool", "null"] + (["list", "dict"] if depth < 2 else []))
    if kind == "str":
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))
    if kind == "int":
        return rng.randint(-10**6, 10**6)
    if kind == "float":
        return round(rng.uniform(-1000, 1000), rng.randint(0, 4))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {"".join(rng.choice(ALPHABET[:30]) for _ in range(rng.randint(1, 6))): random_value(rng, depth + 1) for _ in range(rng.randint(1, 3))}


def literal_regex(text: str) -> str:
    return "".join(f"\\x{{{ord(c):X}}}" for c in text)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_tokenizer_encoding_is_accepted_by_the_automaton(name):
    tok = real_tokenizer(name)
    vocab = build_vocabulary(tok)
    compiler = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None)
    rng = random.Random(7)
    for i in range(6):
        text = json.dumps(random_value(rng), ensure_ascii=False)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        spelled = b"".join(vocab.tokens[t] for t in ids).decode("utf-8")
        # SentencePiece adds a dummy prefix space at the start of a text; the bytes must match otherwise
        assert spelled in (text, " " + text), (name, text, spelled)
        automaton = compiler.compile(literal_regex(spelled))
        assert automaton.accepts(ids), (name, text, ids)
        assert not automaton.accepts(ids[:-1]) or len(ids) == 0


@pytest.mark.parametrize("name", ["gpt-2", "llama-bpe"])
def test_json_string_regex_accepts_encodings(name):
    tok = real_tokenizer(name)
    vocab = build_vocabulary(tok)
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(
        r'\{"v":"([^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"\}'
    )
    rng = random.Random(3)
    for _ in range(20):
        s = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 30)))
        ids = tok(json.dumps({"v": s}, ensure_ascii=False, separators=(",", ":")), add_special_tokens=False)["input_ids"]
        assert automaton.accepts(ids), s
    bad = tok('{"v":"a"b"}', add_special_tokens=False)["input_ids"]
    assert not automaton.accepts(bad)


def test_qwen_placeholders_and_specials_are_excluded_eos_kept():
    tok = real_tokenizer("qwen2")
    vocab = build_vocabulary(tok, eos_token_ids=[151645, 151643])
    assert all(i < 151643 for i in vocab.tokens)  # every real BPE token sits below the specials
    assert 151700 in vocab.excluded  # '[PAD151700]' decodes as plain text: must never be allowed
    assert vocab.eos_token_ids == (151645, 151643)
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile("ab")
    final = automaton.next_state(automaton.next_state(automaton.initial_state, tok.convert_tokens_to_ids("a")), tok.convert_tokens_to_ids("b"))
    assert automaton.is_final(final)
    assert set(automaton.allowed_ids(final).tolist()) == {151643, 151645}
    assert automaton.next_state(automaton.initial_state, 151645) is None  # EOS only in final states


def test_vocabulary_fingerprint_detects_mismatch():
    from constrained_spec.errors import VocabularyMismatchError

    a = build_vocabulary(real_tokenizer("gpt-2"))
    b = build_vocabulary(real_tokenizer("llama-spm"))
    a.check_same(a)
    with pytest.raises(VocabularyMismatchError, match="differs"):
        a.check_same(b)
