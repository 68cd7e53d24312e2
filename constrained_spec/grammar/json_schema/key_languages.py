"""Names of extra properties, exactly: the names that match exactly a given set of
``patternProperties`` patterns and none of the others (their value must satisfy exactly those
patterns' schemas), and the names that match none (``additionalProperties``), declared names aside.

JSON Schema applies to a property every ``patternProperties`` schema whose pattern matches its name,
and ``additionalProperties`` only where none matches. The names are cut into the cells of the
patterns' Boolean algebra with bounded DFAs over decoded code points (:mod:`.content_dfa`: names
are JSON strings, so the algebra of their texts would not be exact), and each cell is spelled back
as the content regex of a JSON string (one spelling per code point). Past a DFA bound
:class:`~.content_dfa.DfaTooLarge` passes to the caller, which refuses the keyword by name.
"""

from __future__ import annotations

import functools
from typing import Optional

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema.content_dfa import Dfa, dfa_of_node, product, to_node
from constrained_spec.grammar.json_schema.negation import recipe_dfa, remembered_failure

__all__ = ["KeyCell", "key_cells"]

#: one cell: (indices of the patterns its names match, content regex of its names)
KeyCell = tuple[tuple[int, ...], str]


def _both(a: bool, b: bool) -> bool:
    return a and b


def _first_only(a: bool, b: bool) -> bool:
    return a and not b


def _empty(d: Dfa) -> bool:
    return not any(d.accept)


def key_cells(patterns: tuple[str, ...], words: tuple[str, ...], others: Optional[ecma.Ranges]) -> list[KeyCell]:
    """The non-empty cells of names (none of ``words``): for each set of patterns some name matches
    exactly (search semantics), that set and the regex of those names; with ``others`` (a set of
    characters), the names of those characters that match no pattern as the cell ``()``. Remembered
    (the most recent 256; a construction past its bound raises again at once)."""
    key = ("key-cells", patterns, words, others)
    return list(remembered_failure(key, _key_cells, patterns, words, others))


@functools.lru_cache(maxsize=256)
def _key_cells(patterns: tuple[str, ...], words: tuple[str, ...], others: Optional[ecma.Ranges]) -> tuple[KeyCell, ...]:
    cells: list[tuple[tuple[int, ...], Dfa]] = [((), recipe_dfa((0, None, (), None)))]
    for i, p in enumerate(patterns):
        d = recipe_dfa((0, None, (p,), None))
        split: list[tuple[tuple[int, ...], Dfa]] = []
        for s, c in cells:
            for s2, part in ((s + (i,), product(c, d, _both)), (s, product(c, d, _first_only))):
                if not _empty(part):
                    split.append((s2, part))
        cells = split
    minus = recipe_dfa((0, None, (), tuple(sorted(set(words))))) if words else None
    out: list[KeyCell] = []
    for s, c in cells:
        if not s:
            if others is None:
                continue
            c = product(c, dfa_of_node(("rep", ("set", others), 0, None)), _both)
        if minus is not None:
            c = product(c, minus, _first_only)
        node = to_node(c)
        if node is None:
            continue
        body = ecma.emit(node)
        if body is not None:
            out.append((s, body))
    return tuple(out)
