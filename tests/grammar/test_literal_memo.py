"""``ecma_regex.literal`` remembered (short strings, the most recent 8,192): the same regex as the
plain spelling, which full-matches exactly the JSON text of the string.

Oracle: ``json.dumps(s, ensure_ascii=False)`` (the compact canonical spelling) and ``re.fullmatch``.
Negative control: a spelling that leaves regex metacharacters unescaped matches other texts too.
"""

from __future__ import annotations

import json
import random
import re

from constrained_spec.grammar import ecma_regex as ecma

_ALPHABET = 'ab.*+?()[]{}|^$\\"/\n\t\x00\x1f é€😀-'


def _strings(rnd: random.Random, n: int) -> list[str]:
    out = [rnd.choice(["", "a", "a.b"]) for _ in range(3)]
    out += ["".join(rnd.choice(_ALPHABET) for _ in range(rnd.randint(1, 12))) for _ in range(n)]
    out.append("x." * (ecma.MEMO_TEXT_CHARS // 2 + 5))  # past the memo's length: spelled each time
    return out


def test_remembered_literal_is_the_plain_one_and_exact() -> None:
    for s in _strings(random.Random(3), 300):
        got = ecma.literal(s)
        assert got == ecma.literal(s) == ecma._literal(s)
        text = json.dumps(s, ensure_ascii=False)[1:-1]
        assert re.fullmatch(got, text)
        assert not re.fullmatch(got, text + "x")
        if "." in s:  # a metacharacter stays literal: another character in its place is refused
            assert not re.fullmatch(got, text.replace(".", "q", 1))


def test_the_memo_is_bounded_and_skips_long_strings() -> None:
    ecma._literal_memo.cache_clear()
    for i in range(9_000):
        ecma.literal("k%d" % i)
    ecma.literal("y" * (ecma.MEMO_TEXT_CHARS + 1))
    info = ecma._literal_memo.cache_info()
    assert info.maxsize == 8192 and info.currsize == 8192


def test_an_unescaped_spelling_is_seen() -> None:
    """Negative control: metacharacters left as they are match another text."""
    wrong = "".join(ecma.json_escape_char(ord(c)) for c in "a.b")
    assert re.fullmatch(wrong, "aqb") and not re.fullmatch(ecma.literal("a.b"), "aqb")
