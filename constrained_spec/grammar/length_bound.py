"""The most bytes any string of a regex can take, where that is finite: how long an output can be.

The decode loop reads it to decide whether the draft model is worth its prefill for a request
(``engine.draft_plan``): an answer bounded at 16 bytes (``{"answer":"yes"}``) is over before a draft
pays for reading a long prompt. The bound is an upper bound in UTF-8 bytes, hence in tokens (every
token is at least one byte). Only speed depends on it, never which strings are allowed.

It walks the parse tree of Python's own regex parser (``re._parser``, ``sre_parse`` before 3.11):
the JSON Schema compiler's regexes are in the common subset that Python, outlines-core and
llguidance read alike. Anything the walk does not know (an unparseable pattern, a back reference,
a parser that changed shape) answers None, "unknown", which the caller treats as unbounded.
"""

from __future__ import annotations

import sys
from typing import Any

if sys.version_info >= (3, 11):
    import re._constants as _c
    import re._parser as _parser
else:  # pragma: no cover - Python 3.10
    import sre_constants as _c
    import sre_parse as _parser

#: a bound above this is reported as None: no output budget is that long, and the walk stays cheap
BOUND_CAP = 1 << 20


#: longer regexes are not parsed (None): Python's parser would spend tens of milliseconds on them,
#: and a schema that large is rarely answered in few tokens
MAX_REGEX_CHARS = 20_000


class _Unbounded(Exception):
    pass


def _utf8_len(code: int) -> int:
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def _class_bytes(items: list[tuple[Any, Any]]) -> int:
    """The longest UTF-8 encoding of one character of a character class."""
    if any(op is _c.NEGATE for op, _ in items):
        return 4  # a negated class admits non-ASCII characters
    longest = 0
    for op, arg in items:
        if op is _c.LITERAL:
            longest = max(longest, _utf8_len(arg))
        elif op is _c.RANGE:
            longest = max(longest, _utf8_len(arg[1]))
        else:  # CATEGORY (\d, \w, \s: Unicode in str patterns) or anything new
            longest = 4
    return longest


def _seq_bytes(pattern: Any) -> int:
    total = 0
    for op, arg in pattern:
        total += _item_bytes(op, arg)
        if total > BOUND_CAP:
            raise _Unbounded
    return total


def _item_bytes(op: Any, arg: Any) -> int:
    if op is _c.LITERAL:
        return _utf8_len(arg)
    if op is _c.NOT_LITERAL or op is _c.ANY:
        return 4
    if op is _c.IN:
        return _class_bytes(arg)
    if op is _c.AT:
        return 0
    if op is _c.SUBPATTERN:
        return _seq_bytes(arg[-1])
    if op is _c.BRANCH:
        return max(_seq_bytes(branch) for branch in arg[1])
    if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
        _, hi, body = arg
        if hi == _c.MAXREPEAT:
            raise _Unbounded
        return hi * _seq_bytes(body) if hi else 0
    if op is getattr(_c, "ATOMIC_GROUP", None):
        return _seq_bytes(arg)
    if op in (_c.ASSERT, _c.ASSERT_NOT):
        return 0
    raise _Unbounded  # back references, conditionals, or an opcode this walk does not know


def max_output_bytes(regex: str) -> int | None:
    """The most UTF-8 bytes a full match of ``regex`` can take; None where unbounded or unknown."""
    if len(regex) > MAX_REGEX_CHARS:
        return None
    try:
        bound = _seq_bytes(_parser.parse(regex))
    except (_Unbounded, RecursionError):
        return None
    except Exception:  # a pattern Python's parser reads differently or not at all: unknown
        return None
    return bound if bound <= BOUND_CAP else None
