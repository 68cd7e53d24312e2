"""The most bytes any string of a regex can take, where that is finite: how long an output can be.

The decode loop reads it to decide whether the draft model is worth its prefill for a request
(``engine.draft_plan``): an answer bounded at 16 bytes (``{"answer":"yes"}``) is over before a draft
pays for reading a long prompt. The bound is an upper bound in UTF-8 bytes, hence in tokens (every
token is at least one byte). Only speed depends on it, never which strings are allowed.

It walks the project's own regex parse (:func:`~constrained_spec.grammar.ecma_regex.parse_superset`:
the node tuples of ``ecma_regex``, read so that where the dialects differ the wider reading wins:
``.``, ``\\d``, ``\\w``, ``\\s`` count as any character, up to 4 bytes). Anything that parse does
not read (an unparseable pattern, a back reference, lookaround, inline flags such as ``(?i)``,
``\\p{..}``) answers None, "unknown", which the caller treats as unbounded. The walk is iterative
and stops as soon as the bound passes :data:`BOUND_CAP`: a counted repeat such as ``a{1000000}``
costs what its text costs, and deep nesting answers None rather than overflowing the stack.
"""

from __future__ import annotations

from typing import Any

from constrained_spec.grammar.ecma_regex import PatternError, parse_superset

#: a bound above this is reported as None: no output budget is that long, and the walk stays cheap
BOUND_CAP = 1 << 20

#: longer regexes are not parsed (None): the parse would spend tens of milliseconds on them, and a
#: schema that large is rarely answered in few tokens
MAX_REGEX_CHARS = 20_000


class _Unbounded(Exception):
    pass


def _utf8_len(code: int) -> int:
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def _capped(total: int) -> int:
    if total > BOUND_CAP:
        raise _Unbounded
    return total


def _max_bytes(root: Any) -> int:
    """The most UTF-8 bytes of a string of ``root`` (ecma_regex nodes), by an explicit post-order
    walk (no recursion): raises _Unbounded for an unbounded repeat or a bound past BOUND_CAP."""
    done: dict[int, int] = {}  # id(node) -> its bound (the tree holds every node while we walk)
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        kind = node[0]
        if kind == "set":  # one character: its longest encoding (an empty class matches nothing: 0)
            done[id(node)] = _utf8_len(node[1][-1][1]) if node[1] else 0
        elif kind in ("bol", "eol"):
            done[id(node)] = 0
        elif not expanded:
            stack.append((node, True))
            children = node[1] if kind in ("seq", "alt") else [node[1]]
            stack.extend((child, False) for child in children)
        elif kind == "seq":
            done[id(node)] = _capped(sum(done[id(child)] for child in node[1]))
        elif kind == "alt":
            done[id(node)] = max(done[id(child)] for child in node[1])
        elif kind == "rep":
            body, hi = done[id(node[1])], node[3]
            if hi is None and body > 0:
                raise _Unbounded
            done[id(node)] = _capped(body * (hi or 0))
        else:  # a node kind this walk does not know
            raise _Unbounded
    return done[id(root)]


def max_output_bytes(regex: str) -> int | None:
    """The most UTF-8 bytes a full match of ``regex`` can take; None where unbounded or unknown."""
    if len(regex) > MAX_REGEX_CHARS:
        return None
    try:
        return _max_bytes(parse_superset(regex))
    except (_Unbounded, PatternError):
        return None
    except (ValueError, RecursionError):  # e.g. a repeat count past int()'s digit limit
        return None
