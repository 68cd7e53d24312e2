"""Grammars that cost without bound, or fail mid-decode, are bounded or refused up front (issue 32).

lark is the oracle of a grammar's language here too: a bounded parse either gives lark's own tree or
gives up (None), never a different verdict; empty languages and llguidance's limits are met when
compiling, with the documented errors, not as "token N is not allowed" in the middle of a decode.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from lark import Lark

from constrained_spec.errors import CompileLimitError, EmptyLanguageError, GrammarError, OutputValidationError
from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.lark_check import check_lark_grammar, parse_with_lark
from constrained_spec.grammar.vocab import TokenVocabulary

ROOT = Path(__file__).resolve().parents[2]
AMBIGUOUS = 'start: x\nx: x x | "a"\n'


def byte_vocab() -> TokenVocabulary:
    return TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)


def test_the_post_parse_of_an_ambiguous_grammar_is_bounded():
    """Item 3: Earley is cubic on ``x: x x | "a"`` (about 6 s on 93 characters unbounded)."""
    start = time.perf_counter()
    tree = parse_with_lark(AMBIGUOUS, "a" * 93)
    assert time.perf_counter() - start < 2.0
    assert tree is None  # past the budget: the engine's acceptance stands
    # short outputs of the same grammar are still judged by lark, and a wrong one still fails
    assert parse_with_lark(AMBIGUOUS, "a" * 8) == Lark(AMBIGUOUS, parser="earley").parse("a" * 8)
    with pytest.raises(OutputValidationError):
        parse_with_lark(AMBIGUOUS, "aab")


def test_long_outputs_of_unambiguous_grammars_are_still_judged():
    grammar = 'start: "[" item ("," item)* "]"\nitem: /[0-9]+/\n'
    text = "[" + ",".join(["123"] * 300) + "]"
    tree = parse_with_lark(grammar, text)
    assert tree is not None and tree == Lark(grammar, parser="earley").parse(text)
    with pytest.raises(OutputValidationError):
        parse_with_lark(grammar, text[:-1] + ",]")


_TERMINAL_REPRO = """
import json, time
from constrained_spec.grammar.lark_check import parse_with_lark
grammar = 'start: A | C\\nA: /(a|a)+b/\\nC: /a+c/\\n'
t = time.perf_counter()
tree = parse_with_lark(grammar, "a" * 40 + "c")
print(json.dumps({"seconds": time.perf_counter() - t, "tree": tree is not None}))
"""


def test_a_backtracking_terminal_cannot_stall_the_post_parse():
    """A terminal is a request's regex: ``/(a|a)+b/`` tried at 40 a's backtracks 2^40 steps."""
    import json

    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_TERMINAL_REPRO)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["seconds"] < 5.0


def test_an_empty_lark_language_is_refused_when_loading():
    """Item 4: ``x: "a" x`` never ends; it used to fail mid-decode with 'token N is not allowed'."""
    for grammar in ('start: x\nx: "a" x\n', 'start: x y\nx: "a"\ny: "b" y | y "c"\n'):
        with pytest.raises(EmptyLanguageError, match="derives no finite text"):
            check_lark_grammar(grammar)
    for grammar in ('start: x\nx: "a" x | "a"\n', 'start: x\nx: "(" x ")" | "b"\n', AMBIGUOUS):
        check_lark_grammar(grammar)  # recursive, with a way out: loads


def test_a_regex_past_the_lexer_limits_is_refused_when_compiling():
    """Item 4: ``a{1000000}`` used to fail mid-decode ('cannot roll back to length 1 from 0')."""
    with pytest.raises(CompileLimitError, match="limits"):
        compile_grammar("regex", "a{1000000}", byte_vocab())
    compile_grammar("regex", "a{1000}", byte_vocab())  # negative control


def test_a_limit_met_mid_decode_is_a_compile_limit_error_and_stays():
    """Past the probe, ``a{1000000}`` still builds too many lexer states once the forced a's are
    read: CompileLimitError (a 400 naming the limit, not 'token N is not allowed'), raised again on
    every later move (llguidance's error state is permanent)."""
    matcher = compile_grammar("regex", "(a|b)(c|d)a{1000000}", byte_vocab()).matcher()
    for byte in b"bd":
        matcher.advance(byte)
    matcher.forced_bytes()
    with pytest.raises(CompileLimitError, match="limits after 2 tokens") as info:
        matcher.advance(ord("a"))
        matcher.allowed_ids()
    for move in (lambda: matcher.advance(ord("a")), lambda: matcher.rollback(0), matcher.allowed_ids, matcher.forced_bytes):
        with pytest.raises(CompileLimitError) as again:
            move()
        assert again.value is info.value


@pytest.mark.slow
def test_a_right_recursion_past_the_parser_limit_is_a_compile_limit_error():
    """llguidance caps an Earley row at 2000 items: ``x: "a" x | "a"`` fails near 2000 levels deep
    (about 10-30 s of llguidance's work on this host), with the reason named."""
    matcher = compile_grammar("lark", 'start: x\nx: "a" x | "a"\n', byte_vocab()).matcher()
    with pytest.raises(CompileLimitError, match="left-recursive"):
        for _ in range(5000):
            matcher.advance(ord("a"))
    assert 1000 < matcher.length < 5000


def test_the_import_scan_is_linear_and_still_refuses_imports():
    """The ``%import`` scan read ``^\\s*`` over request text: quadratic on blank lines (11 s on 20,000)."""
    from constrained_spec.grammar.lark_check import check_imports

    start = time.perf_counter()
    check_imports('start: "a"\n' + " \n" * 20_000)
    assert time.perf_counter() - start < 1.0
    for grammar in ("start: X\n  %import grammars.json.value\n", "start: X\n\f%import foo.X\n", "start: X\n\t%import\tfoo.X\n"):
        with pytest.raises(GrammarError, match="not allowed"):
            check_imports(grammar)
