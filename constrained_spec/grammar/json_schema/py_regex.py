"""Schema patterns read by Python ``re``: where the compiler must decide, at compile time,
whether a pattern matches a given string (a property name, an enum value).

Compiled patterns are cached; the cache is bounded because schemas arrive with requests in a
long-running server.
"""

from __future__ import annotations

import functools
import re

__all__ = ["compile_py", "py_pattern_ok", "py_fullmatch", "py_search", "universal_pattern", "line_pattern", "PY_RE_CACHE_SIZE"]

#: most compiled patterns kept (least recently used dropped first)
PY_RE_CACHE_SIZE = 512


def py_pattern_ok(p: str) -> bool:
    """Whether Python ``re`` compiles p."""
    try:
        compile_py(p)
        return True
    except re.error:
        return False


@functools.lru_cache(maxsize=PY_RE_CACHE_SIZE)
def compile_py(p: str) -> re.Pattern:
    """p compiled by Python ``re`` (cached, at most :data:`PY_RE_CACHE_SIZE` patterns; errors
    are not cached); raises ``re.error``."""
    return re.compile(p)


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
