"""Object members under ``minProperties``/``maxProperties``, exactly: the comma-separated member
sequence (:class:`~.regex_text.SeqItem`: required, optional, repeated extra properties) cut into
*shapes*, each a sequence with some members fixed present or absent, whose union is the set of
sequences with between ``lo`` and ``hi`` counted members (optional and extra ones).

A decision tree over the members in order: a member is left as it is once no choice after it can
take the count out of the window, so the shapes are disjoint and usually few (``maxProperties: 1``
over n optional properties: n + 1 shapes). Extra properties (``star`` items) may repeat a name, and
a repeated name counts once: a star member counts toward ``hi`` by its copies (a sound upper count)
and toward ``lo`` by one at most, so the caller refuses ``lo`` of two or more where star members exist.
"""

from __future__ import annotations

from typing import Optional

from constrained_spec.grammar.json_schema.regex_text import SeqItem

__all__ = ["member_shapes", "counted_max"]


def counted_max(items: list[SeqItem]) -> Optional[int]:
    """The most counted members items can hold (None: unbounded)."""
    total = 0
    for it in items:
        if it.kind == "opt":
            total += 1
        elif it.kind == "star":
            if it.count is None:
                return None
            total += it.count
    return total


def member_shapes(items: list[SeqItem], lo: int, hi: Optional[int], max_shapes: int) -> Optional[list[list[SeqItem]]]:
    """Shapes whose union is the sequences of ``items`` with ``lo..hi`` counted members (``hi`` None:
    no upper bound); [] where there is none; None past ``max_shapes`` shapes. A star member counts its
    copies (the caller makes sure ``lo`` never needs two copies of one)."""
    n = len(items)
    rest_max: list[Optional[int]] = [counted_max(items[i:]) for i in range(n + 1)]
    shapes: list[list[SeqItem]] = []

    def fits(have: int, i: int) -> bool:
        """Whether the members from i on, as they are, cannot take ``have`` above hi."""
        m = rest_max[i]
        return hi is None or (m is not None and have + m <= hi)

    def walk(i: int, have: int, prefix: list[SeqItem]) -> bool:
        if len(shapes) > max_shapes:
            return False
        if have >= lo and fits(have, i):
            shapes.append(prefix + items[i:])
            return True
        if hi is not None and have >= hi:
            if have == hi and have >= lo:
                shapes.append(prefix + [it for it in items[i:] if it.kind == "req"])
            return True
        if i == n:
            return True  # fewer than lo members: no shape
        it = items[i]
        m = rest_max[i]
        if m is not None and have + m < lo:
            return True
        if it.kind == "req":
            return walk(i + 1, have, prefix + [it])
        if it.kind == "opt":
            return walk(i + 1, have, prefix) and walk(i + 1, have + 1, prefix + [SeqItem("req", it.regex)])
        # a star member: absent, or present some number of times
        if not walk(i + 1, have, prefix):
            return False
        room = None if hi is None else hi - have
        top = it.count if room is None else room if it.count is None else min(it.count, room)
        least = max(1, lo - have)
        if top is not None and top < least:
            return True
        head = [SeqItem("req", it.regex)] * least
        if hi is None or rest_max[i + 1] == 0:
            # no upper bound, or nothing counted after it: least..top copies as one shape
            more = None if top is None else top - least
            if more != 0:
                head.append(SeqItem("star", it.regex, more))
            if hi is None:  # lo is met and nothing bounds what follows
                shapes.append(prefix + head + items[i + 1:])
                return True
            assert top is not None  # hi is set
            return walk(i + 1, have + top, prefix + head)
        assert top is not None
        for k in range(least, top + 1):
            if not walk(i + 1, have + k, prefix + [SeqItem("req", it.regex)] * k):
                return False
        return True

    if not walk(0, 0, []) or len(shapes) > max_shapes:
        return None
    return shapes
