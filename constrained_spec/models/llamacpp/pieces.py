"""Where a prompt's prefill on llama.cpp's fast paths is cut: into *pieces* at absolute positions.

On the fast default paths (repacked gemm, tiled matmuls) the bits of a prompt token's keys and values depend
on which tokens share its ``llama_decode`` call. So every prefill — one sequence's (``LlamaCppWeights.prefilled_state``)
and a batch row's (``LlamaCppRows``) — cuts the prompt at the same places: every multiple of :data:`PREFILL_PIECE`
positions, right after each *stop* token, the model's end-of-message tokens, and after a *head*: a token sequence that
many prompts start with (the chat header and schema hint's first words, which prompts with other schemas share). A row can
then compute each complete piece as soon as the batch coordinator has fed it, between the other rows' decode steps,
and still hold the very cache one sequence's prefill makes; and a prompt that starts as an earlier one, up to the end
of a message (a system message holding the schema hint), can keep the earlier cache of that part and compute only
the rest, bitwise as a prefill from scratch would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["PREFILL_PIECE", "PieceRule", "common_prefix", "complete_end", "piece_bounds"]

#: positions per prefill piece (= ``llama_decode``'s batch width there, so one sequence's prefill from position 0
#: is cut where it always was)
PREFILL_PIECE = 256


def piece_bounds(start: int, end: int, piece: int = PREFILL_PIECE) -> list[tuple[int, int]]:
    """The ``[a, b)`` position ranges a prefill of positions ``start``..``end - 1`` is computed in: cut at every
    multiple of ``piece`` (the first and last may be shorter)."""
    if piece < 1 or start < 0 or end < start:
        raise ValueError(f"no pieces for positions {start}..{end} of {piece}")
    bounds, a = [], start
    while a < end:
        b = min(end, (a // piece + 1) * piece)
        bounds.append((a, b))
        a = b
    return bounds


def complete_end(start: int, end: int, piece: int = PREFILL_PIECE) -> int:
    """Where the complete pieces of positions ``start``..``end - 1`` end: the last multiple of ``piece`` in
    ``(start, end]``, or ``start`` when the span holds no piece boundary (all of it waits for more tokens)."""
    cut = end - end % piece
    return cut if cut > start else start


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many first tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class PieceRule:
    """Pieces end at every multiple of ``width`` positions and right after each token of ``stops``. A cut depends
    only on its position and the token before it, so chunks of a prompt fed in any order of arrival are cut where
    one prefill of the whole prompt cuts it, and two prompts sharing their first ``n`` tokens share every cut up to ``n``."""

    width: int = PREFILL_PIECE
    stops: frozenset[int] = field(default_factory=frozenset)
    #: token sequences a prompt may start with: one that does is cut right after it. A head holds no stop token, so a
    #: prefill never starts inside one: ``start`` is 0 or a cut past it (rows and restores start at cuts)
    heads: frozenset[tuple[int, ...]] = field(default_factory=frozenset)

    def cuts(self, start: int, tokens: Sequence[int]) -> list[int]:
        """The cuts in ``(start, start + len(tokens)]`` of ``tokens`` placed at positions ``start``.., ascending."""
        end = start + len(tokens)
        at_width = set(range((start // self.width + 1) * self.width, end + 1, self.width))
        after_stop = {start + i + 1 for i, t in enumerate(tokens) if t in self.stops}
        return sorted(at_width | after_stop | set(self.head_ends(tokens) if start == 0 else ()))

    def head_ends(self, tokens: Sequence[int]) -> list[int]:
        """The cuts of a prompt ``tokens`` (from position 0) right after a head it starts with."""
        return [len(h) for h in self.heads if 0 < len(h) <= len(tokens) and tuple(tokens[: len(h)]) == h]

    def bounds(self, start: int, tokens: Sequence[int]) -> list[tuple[int, int]]:
        """The ``[a, b)`` ranges ``tokens`` (at positions ``start``..) are computed in."""
        edges = [start, *[c for c in self.cuts(start, tokens) if c < start + len(tokens)], start + len(tokens)]
        return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]

    def complete_end(self, start: int, tokens: Sequence[int]) -> int:
        """Where the complete pieces of ``tokens`` (at positions ``start``..) end; ``start`` where none is complete."""
        cuts = self.cuts(start, tokens)
        return cuts[-1] if cuts else start

    def last_cut(self, tokens: Sequence[int], limit: int) -> int:
        """The last cut of a prompt ``tokens`` (from position 0) at or before ``limit``; 0 where there is none."""
        limit = min(limit, len(tokens))
        return self.complete_end(0, tokens[:limit]) if limit > 0 else 0

    def message_ends(self, tokens: Sequence[int]) -> list[int]:
        """The cuts of ``tokens`` (from position 0) right after a stop token."""
        return [i + 1 for i, t in enumerate(tokens) if t in self.stops]

    def shared_ends(self, tokens: Sequence[int]) -> list[int]:
        """The cuts of a prompt ``tokens`` other prompts are likely to share: after a head and at message ends."""
        return sorted(set(self.head_ends(tokens)) | set(self.message_ends(tokens)))
