"""The lazy engine (llguidance behind GrammarMatcher) against the eager automaton engine and lark.

The automaton engine (outlines-core's byte DFA of the same regex, our own token walk) is an
independent implementation of the same language: along random walks the two must allow exactly
the same tokens. Regressions of the two llguidance behaviours lazy.py works around are pinned here.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from constrained_spec.errors import CompileLimitError, ConfigError, EmptyLanguageError, GrammarError, OutputValidationError
from constrained_spec.grammar import CFG, Regex, output_spec
from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler, AutomatonMatcher
from constrained_spec.grammar.matcher import GrammarMatcher
from constrained_spec.grammar.vocab import TokenVocabulary, build_vocabulary

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


@pytest.fixture(scope="module")
def gpt2_vocab(gpt2_tokenizer):
    return build_vocabulary(gpt2_tokenizer), (lambda s: gpt2_tokenizer.encode(s))


def byte_vocab() -> TokenVocabulary:
    tokens = {i: bytes([i]) for i in range(256)}
    tokens[256] = b"ab"
    tokens[257] = b"()"
    return TokenVocabulary(tokens=tokens, eos_token_ids=(258,), size=259)


def token_of(vocab: TokenVocabulary, raw: bytes) -> int:
    return next(t for t, b in vocab.tokens.items() if b == raw)


@pytest.mark.parametrize("name", ["person", "order", "inventory", "tool_call", "event"])
def test_masks_equal_the_automaton_engine_along_random_walks(gpt2_vocab, name):
    vocab, encode = gpt2_vocab
    regex = output_spec(json.loads((SCHEMAS / f"{name}.json").read_text())).regex
    lazy = compile_grammar("regex", regex, vocab, encode)
    eager = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(regex)
    rng = random.Random(name)
    positions = 0
    for _ in range(6):
        a, b = AutomatonMatcher(eager), lazy.matcher()
        for _ in range(60):
            allowed = a.allowed_ids()
            assert np.array_equal(allowed, b.allowed_ids()), f"masks differ after {vocab.decode(a.tokens)!r}"
            assert a.is_accepting() == b.is_accepting() and a.forced_token() == b.forced_token()
            assert np.array_equal(a.bitmask().numpy(), b.bitmask().numpy())
            positions += 1
            if not allowed.size:
                break
            token = int(rng.choice(list(allowed)))
            a.advance(token)
            b.advance(token)
            if a.is_terminated():
                break
            if rng.random() < 0.15:  # a rejected draft: roll both back a few tokens
                keep = rng.randint(0, a.length)
                a.rollback(keep)
                b.rollback(keep)
    assert positions > 100


def test_forced_text_keeps_every_tokenisation_the_grammar_allows(gpt2_vocab):
    """llguidance by default allows only the canonical tokens of forced text; lazy.py turns that off:
    '{' alone is a valid first token where '{"name":"' is forced, as the automaton says."""
    vocab, encode = gpt2_vocab
    regex = output_spec(json.loads((SCHEMAS / "person.json").read_text())).regex
    m = compile_grammar("regex", regex, vocab, encode).matcher()
    brace = token_of(vocab, b"{")
    assert m.forced_bytes().startswith(b'{"')
    assert brace in set(m.allowed_ids().tolist()) and m.forced_token() is None
    m.advance(brace)  # the non-canonical split is followed through
    assert m.accepts_prefix_bytes(b'"name":"')


def test_rollback_over_eos_matches_a_fresh_replay():
    vocab = byte_vocab()
    g = compile_grammar("regex", r"a+(b|c)?", vocab)
    m = g.matcher()
    for t in (97, 97):
        m.advance(t)
    eos = vocab.eos_token_id
    assert m.count_allowed([98, eos]) == 2 and m.count_allowed([eos, 97]) == 1
    m.advance(98)
    m.advance(eos)
    assert m.is_terminated() and m.count_allowed([97]) == 0
    m.rollback(2)  # over EOS and 'b'
    fresh = g.matcher()
    fresh.advance(97)
    fresh.advance(97)
    assert not m.is_terminated()
    assert np.array_equal(m.bitmask().numpy(), fresh.bitmask().numpy())
    assert {97, 98, 99, 256, eos} == set(m.allowed_ids().tolist())  # 256 is "ab"


def test_cfg_masks_follow_the_stack():
    vocab = byte_vocab()
    m = compile_grammar("lark", 'start: "(" start ")" | "[" start "]" | ""', vocab).matcher()
    for c in b"([(":
        m.advance(c)
    allowed = set(m.allowed_ids().tolist())
    assert allowed == {ord("("), ord(")"), ord("["), 257}  # '()' as one token too; ']' would close the wrong bracket
    assert m.accepts_prefix_bytes(b")])") and not m.accepts_prefix_bytes(b"))")
    assert not m.is_accepting()
    for c in b")])":
        m.advance(c)
    assert m.is_accepting() and vocab.eos_token_id in set(m.allowed_ids().tolist())
    with pytest.raises(GrammarError):
        m.advance(ord("]"))


def test_compile_errors_name_the_problem():
    vocab = byte_vocab()
    with pytest.raises(GrammarError, match="unknown name|foo"):
        compile_grammar("lark", "start: foo", vocab)
    with pytest.raises(GrammarError):
        compile_grammar("regex", "a(", vocab)
    with pytest.raises(CompileLimitError, match="cap of 10"):
        compile_grammar("regex", "a" * 11, vocab, max_source_chars=10)
    small = TokenVocabulary(tokens={0: b"a"}, eos_token_ids=(1,), size=2)
    with pytest.raises(EmptyLanguageError):
        compile_grammar("regex", "x", small)


def test_matcher_protocol():
    assert isinstance(compile_grammar("regex", "ab", byte_vocab()).matcher(), GrammarMatcher)


# -- through the Generator on tiny models ----------------------------------------------------------

FINITE = 'start: answer\nanswer: "yes" | "no" | "(" answer ")"\n'


@pytest.fixture(scope="module")
def generators(tiny_generator):
    return tiny_generator(draft=True, max_new_tokens=40), tiny_generator(draft=False, max_new_tokens=40)


def test_cfg_output_is_parsed_by_lark_and_greedy_speculative_equals_target_only(generators):
    spec, plain = generators
    results = [g.run("Answer:", CFG(FINITE), max_new_tokens=40) for g in (spec, plain)]
    for r in results:
        assert r.tree is not None and r.tree.data == "start" and r.value == r.text
    assert results[0].token_ids == results[1].token_ids


def test_cfg_start_rule_and_file(generators, tmp_path):
    spec, _ = generators
    path = tmp_path / "g.lark"
    path.write_text('top: "ok" | "no"\n')
    r = spec.run("x", CFG.from_file(path, start="top"))
    assert r.text in ("ok", "no")
    with pytest.raises(GrammarError, match="cannot read"):
        CFG.from_file(tmp_path / "missing.lark")


def test_cfg_lark_must_load_it(generators):
    spec, _ = generators
    with pytest.raises(GrammarError, match="lark cannot load"):
        spec.compile(CFG('start: "a" |\n  | ) (\n'))  # not Lark at all


def test_lark_judges_the_output(generators):
    spec, _ = generators
    compiled = spec.compile(CFG(FINITE))
    assert compiled.parse_tree("(yes)").data == "start"
    with pytest.raises(OutputValidationError):
        compiled.parse("(maybe)")


def test_engines_agree_on_regex_outputs(tiny_generator):
    lazy = tiny_generator(draft=False, max_new_tokens=30)
    eager = tiny_generator(draft=False, max_new_tokens=30, grammar_engine="automaton")
    for pattern in (r"[a-c]{2,6}", r"(yes|no|maybe)( indeed)?"):
        assert lazy.run("x", Regex(pattern)).token_ids == eager.run("x", Regex(pattern)).token_ids


def test_unknown_engine_is_a_config_error(tiny_generator):
    with pytest.raises(ConfigError, match="grammar engine"):
        tiny_generator(draft=False, grammar_engine="fast")


def test_a_grammar_cannot_make_lark_read_files(generators, tmp_path, monkeypatch):
    """Only lark's built-in ``common`` may be imported: lark would otherwise look for (and, on its
    import paths, read) ``.lark`` files named by the request."""
    spec, _ = generators
    (tmp_path / "sneaky.lark").write_text('X: "secret"\n')
    monkeypatch.chdir(tmp_path)
    opened: list[str] = []
    real_open = open

    def watching_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", watching_open)
    for grammar in ('start: X\n%import sneaky.X\n', 'start: X\n%import .sneaky.X\n'):
        with pytest.raises(GrammarError, match="not allowed"):
            spec.compile(CFG(grammar))
    assert not [f for f in opened if "sneaky" in f]
    assert spec.compile(CFG('start: WORD\n%import common.WORD\n')).spec.kind == "lark"
