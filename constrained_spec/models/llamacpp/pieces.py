"""Where a prompt's prefill on llama.cpp's fast paths is cut: into *pieces* at absolute positions.

On the fast default paths (repacked gemm, tiled matmuls) the bits of a prompt token's keys and values depend
on which tokens share its ``llama_decode`` call. So every prefill — one sequence's (``LlamaCppWeights.prefilled_state``)
and a batch row's (``LlamaCppRows``) — cuts the prompt at the same places: every multiple of :data:`PREFILL_PIECE`
positions. A row can then compute each complete piece as soon as the batch coordinator has fed it, between the
other rows' decode steps, and still hold the very cache one sequence's prefill makes.
"""

from __future__ import annotations

__all__ = ["PREFILL_PIECE", "complete_end", "piece_bounds"]

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
