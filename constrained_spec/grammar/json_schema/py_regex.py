"""Schema patterns matched at compile time: where the compiler must decide whether a pattern
matches a given string (a property name, an enum value).

Every match runs in linear time (:mod:`constrained_spec.grammar.linear_regex`, ECMA-262 as the
compiler reads it), never Python's backtracking ``re``: the strings come with requests. The
module keeps its historical name; compiled patterns are cached (bounded) there.
"""

from __future__ import annotations

from constrained_spec.grammar.linear_regex import PATTERN_CACHE_SIZE, compile_pattern, pattern_problem

__all__ = ["py_pattern_ok", "py_fullmatch", "py_search", "universal_pattern", "line_pattern", "PY_RE_CACHE_SIZE"]

#: most compiled patterns kept (least recently used dropped first)
PY_RE_CACHE_SIZE = PATTERN_CACHE_SIZE


def py_pattern_ok(p: str) -> bool:
    """Whether the linear-time engine reads p."""
    return pattern_problem(p) is None


def py_fullmatch(p: str, s: str) -> bool:
    """Whether the anchored pattern p matches s; False when the engine cannot read it."""
    if pattern_problem(p) is not None:
        return False
    return compile_pattern(p).fullmatch(s)


def py_search(p: str, s: str) -> bool:
    """Whether pattern p matches somewhere in s (the jsonschema semantics); True (conservative:
    assume it matches) when the engine cannot read it."""
    if pattern_problem(p) is not None:
        return True
    return compile_pattern(p).search(s)


def universal_pattern(p: str) -> bool:
    """Patterns that every string matches (search semantics)."""
    return p in ("", ".*", "^.*", ".*$", "(.*)", "[\\s\\S]*", "^[\\s\\S]*$") or (
        not p.startswith("^") and p.endswith("*") and p[:-1] in (".", "\\S", "\\w", "[a-z]", "[A-Za-z]", "\\d")
    )


def line_pattern(p: str) -> bool:
    """Patterns matching exactly the strings without line terminators."""
    return p in ("^.*$", "^(.*)$", "^.*?$")
