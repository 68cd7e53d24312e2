"""The text scanners keep their answers for long texts within one compile only: the answers are
the plain scans' (with and without the memo), the memo stays within its bounds, and nothing is kept
once the compile ends."""

from __future__ import annotations

import random

from constrained_spec.grammar import ecma_regex
from constrained_spec.grammar.json_schema import schema_to_regex

_SCANNERS = (ecma_regex.top_level_bar, ecma_regex.is_atom, ecma_regex.is_closed)


def _long_text(rng: random.Random) -> str:
    """A random regex-like text over the scanners' tokens, longer than MEMO_TEXT_CHARS."""
    pieces = ["(", ")", "|", "[", "]", "\\", "a", "b", "\\(", "[)]"]
    return "(" + "".join(rng.choice(pieces) for _ in range(ecma_regex.MEMO_TEXT_CHARS + 50)) + ")"


def test_answers_equal_with_and_without_the_memo():
    rng = random.Random(49)
    texts = [_long_text(rng) for _ in range(40)] + ["(" + "a" * 2000 + ")", "a|" + "b" * 2000]
    plain = [[scan(t) for scan in _SCANNERS] for t in texts]
    with ecma_regex.long_text_memo() as kept:
        for _ in range(2):  # the second round is answered from the memo
            assert [[scan(t) for scan in _SCANNERS] for t in texts] == plain
        assert kept.kept  # the memo was used
    assert ecma_regex._LONG_ANSWERS.get() is None  # and dropped at the end


def test_the_memo_is_bounded():
    with ecma_regex.long_text_memo() as kept:
        for i in range(ecma_regex.LONG_MEMO_TEXTS + 100):
            ecma_regex.top_level_bar(f"(a{i}|b)" + "c" * 20_000)
            assert len(kept.kept) <= ecma_regex.LONG_MEMO_TEXTS
            assert kept.chars <= ecma_regex.LONG_MEMO_CHARS


def test_a_compile_keeps_nothing_after_it():
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "pattern": "^(a|b)+$"} for i in range(60)}}
    r = schema_to_regex(schema)
    assert r.regex
    assert ecma_regex._LONG_ANSWERS.get() is None


def test_negative_control_a_memo_keyed_by_length_is_caught():
    # a wrong memo (answers kept by the text's length) gives another answer than the plain scan
    wrong: dict[int, bool] = {}
    a, b = "a|" + "b" * 2000, "(a" + "b" * 2000
    assert wrong.setdefault(len(a), ecma_regex.top_level_bar(a)) is True
    assert wrong.setdefault(len(b), ecma_regex.top_level_bar(b)) != ecma_regex.top_level_bar(b)
