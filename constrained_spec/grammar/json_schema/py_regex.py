"""Schema patterns read by Python ``re``: where the compiler must decide, at compile time,
whether a pattern matches a given string (a property name, an enum value).

Compiled patterns are cached; the cache is bounded because schemas arrive with requests in a
long-running server.
"""

from __future__ import annotations

import re

__all__ = ["compile_py", "py_pattern_ok", "py_fullmatch", "py_search", "universal_pattern", "line_pattern"]

_PY_RE_CACHE: dict = {}


def py_pattern_ok(p: str) -> bool:
    """Whether Python ``re`` compiles p."""
    try:
        compile_py(p)
        return True
    except re.error:
        return False


def compile_py(p: str) -> re.Pattern:
    """p compiled by Python ``re`` (cached); raises ``re.error``."""
    r = _PY_RE_CACHE.get(p)
    if r is None:
        r = re.compile(p)
        _PY_RE_CACHE[p] = r
    return r


def py_fullmatch(p: str, s: str) -> bool:
    """Whether the anchored pattern p matches s; False when Python cannot compile it."""
    try:
        return compile_py(p).fullmatch(s) is not None
    except re.error:
        return False


def py_search(p: str, s: str) -> bool:
    """Whether pattern p matches somewhere in s (the jsonschema semantics)."""
    try:
        return compile_py(p).search(s) is not None
    except re.error:
        return True  # conservative: assume it matches


def universal_pattern(p: str) -> bool:
    """Patterns that every string matches (search semantics)."""
    return p in ("", ".*", "^.*", ".*$", "(.*)", "[\\s\\S]*", "^[\\s\\S]*$") or (
        not p.startswith("^") and p.endswith("*") and p[:-1] in (".", "\\S", "\\w", "[a-z]", "[A-Za-z]", "\\d")
    )


def line_pattern(p: str) -> bool:
    """Patterns matching exactly the strings without line terminators."""
    return p in ("^.*$", "^(.*)$", "^.*?$")
