"""The Lark grammars in ``grammars/*.lark``: each loads in lark and in llguidance, and the two agree.

lark (Earley, default lexer) is the judge of each grammar's language, as it is for every output
generated under a ``CFG``: every valid sample in ``grammars/samples/<name>/valid/`` must parse and
every invalid sample in ``.../invalid/`` must fail. llguidance is checked against lark, not
against itself: a matcher over a byte-level vocabulary (one token per byte, plus EOS) is fed each
sample byte by byte and must accept exactly the samples lark accepts, for the samples of every
grammar (a JSON sample fed to the SQL grammar is a negative for both) and for seeded random
mutations of them.

Independent oracles for the valid samples where one exists: ``json.loads`` (JSON), Python's own
parser and evaluator (arithmetic: same value as evaluating lark's tree, so the grammar's precedence
is the usual one), sqlite3 running the query on a small schema (SQL), and Python's ``ast`` (the
function-call language is a subset of Python call expressions).

Sample files hold the exact text, byte for byte: no trailing newline unless the sample is about one.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import random
import sqlite3
from pathlib import Path

import lark
import pytest
from llguidance import LLMatcher, LLTokenizer, TokenizerWrapper

GRAMMARS = Path(__file__).resolve().parents[2] / "grammars"
SAMPLES = GRAMMARS / "samples"
NAMES = sorted(p.stem for p in GRAMMARS.glob("*.lark"))
EXPECTED = {"json", "arithmetic", "sql_select", "function_call"}
EOS = 256


def samples(name: str, kind: str) -> list[tuple[str, str]]:
    """(file name, text) of every sample of grammar ``name`` that is ``kind`` ("valid" or "invalid")."""
    return [(p.name, p.read_bytes().decode("utf-8")) for p in sorted((SAMPLES / name / kind).glob("*.txt"))]


def all_samples() -> list[tuple[str, str]]:
    return [(f"{name}/{kind}/{file}", text) for name in NAMES for kind in ("valid", "invalid") for file, text in samples(name, kind)]


@functools.cache
def grammar_text(name: str) -> str:
    return (GRAMMARS / f"{name}.lark").read_text(encoding="utf-8")


@functools.cache
def lark_parser(name: str) -> lark.Lark:
    return lark.Lark(grammar_text(name))  # Earley, default (dynamic) lexer, start rule "start"


def lark_accepts(name: str, text: str) -> bool:
    try:
        lark_parser(name).parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


class _ByteVocabulary:
    """What ``llguidance.TokenizerWrapper`` reads: token i is the byte i, token 256 is EOS."""

    eos_token_id = EOS
    bos_token_id = None
    special_token_ids = [EOS]
    tokens = [bytes([i]) for i in range(256)] + [b"\xff<eos>"]  # llguidance: a leading 0xff marks a special token

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text.encode("utf-8") if isinstance(text, str) else text)


@functools.cache
def byte_tokenizer() -> LLTokenizer:
    return LLTokenizer(TokenizerWrapper(_ByteVocabulary()))


@functools.cache
def llg_grammar(name: str) -> str:
    return LLMatcher.grammar_from_lark(grammar_text(name))


def llguidance_accepts(grammar: str, text: str) -> bool:
    """Feed ``text`` one byte token at a time; True iff every byte is consumed and the end accepts."""
    matcher = LLMatcher(byte_tokenizer(), grammar, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    for byte in text.encode("utf-8"):
        if not matcher.consume_token(byte):
            return False
    return matcher.is_accepting()


def test_the_expected_grammars_are_there() -> None:
    assert EXPECTED <= set(NAMES), NAMES


def test_the_byte_vocabulary_is_one_token_per_byte() -> None:
    tok = byte_tokenizer()
    assert tok.vocab_size == 257 and tok.eos_token == EOS
    assert tok.tokenize_str("a\u00e9(") == [0x61, 0xC3, 0xA9, 0x28]


@pytest.mark.parametrize("name", NAMES)
def test_grammar_loads_in_lark_and_validates_in_llguidance(name: str) -> None:
    lark_parser(name)
    message = LLMatcher.validate_grammar(llg_grammar(name))
    assert message == "" or message.startswith("WARNING"), message
    is_error, messages = LLMatcher.validate_grammar_with_warnings(llg_grammar(name), byte_tokenizer())
    assert not is_error, messages
    assert LLMatcher(byte_tokenizer(), llg_grammar(name), log_level=0).get_error() == ""


def test_llguidance_validation_can_fail() -> None:
    """Negative control for the check above: an undefined rule is an error, not a warning."""
    is_error, messages = LLMatcher.validate_grammar_with_warnings(LLMatcher.grammar_from_lark("start: missing_rule"))
    assert is_error and "missing_rule" in messages[0]
    assert LLMatcher.validate_grammar(LLMatcher.grammar_from_lark("start: missing_rule")) != ""


@pytest.mark.parametrize("name", NAMES)
def test_each_grammar_has_enough_samples(name: str) -> None:
    assert len(samples(name, "valid")) >= 5 and len(samples(name, "invalid")) >= 3


@pytest.mark.parametrize("name", NAMES)
def test_lark_accepts_the_valid_samples(name: str) -> None:
    rejected = [file for file, text in samples(name, "valid") if not lark_accepts(name, text)]
    assert not rejected


@pytest.mark.parametrize("name", NAMES)
def test_lark_rejects_the_invalid_samples(name: str) -> None:
    accepted = [file for file, text in samples(name, "invalid") if lark_accepts(name, text)]
    assert not accepted


@pytest.mark.parametrize("name", NAMES)
def test_llguidance_accepts_the_valid_and_rejects_the_invalid_samples(name: str) -> None:
    grammar = llg_grammar(name)
    assert [file for file, text in samples(name, "valid") if not llguidance_accepts(grammar, text)] == []
    assert [file for file, text in samples(name, "invalid") if llguidance_accepts(grammar, text)] == []


@pytest.mark.parametrize("name", NAMES)
def test_llguidance_agrees_with_lark_on_every_grammars_samples(name: str) -> None:
    """All samples of all grammars against this grammar: most are negatives from another language."""
    grammar = llg_grammar(name)
    verdicts = [(label, lark_accepts(name, text), llguidance_accepts(grammar, text)) for label, text in all_samples()]
    assert [v for v in verdicts if v[1] != v[2]] == []
    assert any(v[1] for v in verdicts) and not all(v[1] for v in verdicts)


def _mutants(texts: list[str], rng: random.Random, count: int) -> list[str]:
    """``count`` strings made from ``texts`` by 1-3 random insertions, deletions, replacements or splices."""
    alphabet = sorted(set("".join(texts)) | set(" \n\r\t.,;:()[]{}\"'\\-+*/=<>!0123456789aeE_%"))
    out = []
    for _ in range(count):
        s = rng.choice(texts)
        for _ in range(rng.randint(1, 3)):
            op, p = rng.random(), rng.randint(0, len(s))
            if op < 0.33:
                s = s[:p] + rng.choice(alphabet) + s[p:]
            elif op < 0.66:
                s = s[:p] + s[p + 1:]
            elif op < 0.85:
                s = s[:p] + rng.choice(alphabet) + s[p + 1:]
            else:
                other = rng.choice(texts)
                q = rng.randint(0, len(other))
                s = s[:p] + other[q:q + rng.randint(1, 12)] + s[p:]
        out.append(s)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_llguidance_agrees_with_lark_on_mutated_samples(name: str) -> None:
    texts = [text for kind in ("valid", "invalid") for _, text in samples(name, kind)]
    mutants = _mutants(texts, random.Random(f"mutants-{name}"), 300)
    verdicts = [(m, lark_accepts(name, m), llguidance_accepts(llg_grammar(name), m)) for m in mutants]
    assert [v for v in verdicts if v[1] != v[2]] == []
    accepted = sum(v[1] for v in verdicts)
    assert 10 <= accepted <= 290, accepted  # both verdicts occur: the comparison is not vacuous


# Independent oracles for the valid samples.

def test_valid_json_samples_are_json() -> None:
    for file, text in samples("json", "valid"):
        json.loads(text)  # raises on anything that is not JSON


def _evaluate(tree: lark.Tree | lark.Token) -> float:
    """The value of an arithmetic.lark parse tree (the grammar inlines ?expr/?term/?factor/?atom)."""
    if isinstance(tree, lark.Token):
        return float(tree)
    if tree.data == "neg":
        return -_evaluate(tree.children[-1])
    if tree.data == "start":
        return _evaluate(tree.children[0])
    left, op, right = tree.children
    a, b = _evaluate(left), _evaluate(right)
    return {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[str(op)]


def test_arithmetic_samples_have_pythons_value() -> None:
    """Python parses every valid sample and evaluates it to the value of lark's tree: the grammar
    groups operators the usual way (a grammar with + binding tighter than * fails here)."""
    for file, text in samples("arithmetic", "valid"):
        expected = eval(compile(ast.parse(text, mode="eval"), file, "eval"), {"__builtins__": {}})
        assert math.isclose(_evaluate(lark_parser("arithmetic").parse(text)), expected), file


def test_arithmetic_evaluation_control() -> None:
    """Negative control for the precedence check: a grammar where + binds tighter gives 2 + 3 * 4 = 20."""
    flipped = grammar_text("arithmetic").replace("ADD_OP: \"+\" | \"-\"", "ADD_OP: \"*\" | \"/\"", 1)
    flipped = flipped.replace("MUL_OP: \"*\" | \"/\"", "MUL_OP: \"+\" | \"-\"", 1)
    assert flipped != grammar_text("arithmetic")
    assert _evaluate(lark.Lark(flipped).parse("2 + 3 * 4")) == 20 != eval("2 + 3 * 4")


SQL_SCHEMA = """
CREATE TABLE users (id INTEGER, name TEXT, email TEXT, age INTEGER, city TEXT);
CREATE TABLE orders (id INTEGER, user_id INTEGER, product_id INTEGER, total REAL, status TEXT, created_at TEXT);
CREATE TABLE customers (id INTEGER, name TEXT, city TEXT, country TEXT, phone TEXT);
CREATE TABLE products (id INTEGER, name TEXT, price REAL, stock INTEGER, category TEXT);
CREATE TABLE events (user_id INTEGER, kind TEXT, score REAL);
CREATE TABLE hr.employees ("first name" TEXT, salary REAL, dept_id INTEGER);
"""


def test_valid_sql_samples_run_in_sqlite() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("ATTACH DATABASE ':memory:' AS hr")
    db.executescript(SQL_SCHEMA)
    for file, text in samples("sql_select", "valid"):
        db.execute(text).fetchall()  # raises sqlite3.Error on a syntax error or an unknown name
    with pytest.raises(sqlite3.OperationalError, match="syntax error"):  # the oracle can fail
        db.execute(dict(samples("sql_select", "invalid"))["06_order_without_by.txt"])


def _python_value_ok(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, int, float, bool))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant) and isinstance(node.operand.value, (int, float))
    if isinstance(node, ast.Name):
        return node.id in ("true", "false")
    if isinstance(node, ast.List):
        return all(_python_value_ok(e) for e in node.elts)
    return False


def test_valid_function_call_samples_are_python_keyword_calls() -> None:
    for file, text in samples("function_call", "valid"):
        module = ast.parse(text)
        assert module.body, file
        for statement in module.body:
            assert isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call), file
            call = statement.value
            assert not call.args and all(k.arg and _python_value_ok(k.value) for k in call.keywords), file
