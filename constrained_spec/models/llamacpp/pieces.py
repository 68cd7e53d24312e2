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

__all__ = ["PREFILL_PIECE", "PREFILL_TAIL", "PieceRule", "common_prefix"]

#: positions per prefill piece (= ``llama_decode``'s batch width there, so one sequence's prefill from position 0
#: is cut where it always was)
PREFILL_PIECE = 512
#: a message end is a cut only where the prefill goes on for at least this many tokens after it (the answer's header
#: after the last message, 3 tokens in ChatML, is computed with the piece before it)
PREFILL_TAIL = 8


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
    """Pieces end at every multiple of ``width`` positions, right after a head a prompt starts with, and right after
    each token of ``stops`` that the prompt's prefill goes on past for at least ``tail`` tokens (so the few tokens
    of the answer's header after the last message end are not a ``llama_decode`` pass of their own: each pass
    reads all the weights, ~100 ms here). Every cut up to ``n - tail`` of a prefill of ``n`` tokens depends only on
    the tokens before it, so two prompts sharing their first ``c`` tokens, ``c`` at most ``n - tail`` for each, share
    every cut up to ``c`` (:meth:`reuse_limit`); rows fed chunk by chunk compute a piece only once every cut up to its
    end is settled (``final=False``), so they are cut where one prefill of the whole prompt cuts it."""

    width: int = PREFILL_PIECE
    stops: frozenset[int] = field(default_factory=frozenset)
    #: token sequences a prompt may start with: one that does is cut right after it. A head holds no stop token, so a
    #: prefill never starts inside one: ``start`` is 0 or a cut past it (rows and restores start at cuts)
    heads: frozenset[tuple[int, ...]] = field(default_factory=frozenset)
    #: a stop token's cut is made only where the prefill goes on for at least this many tokens after it
    tail: int = 0

    def cuts(self, start: int, tokens: Sequence[int], final: bool = True) -> list[int]:
        """The cuts in ``(start, start + len(tokens)]`` of a prefill whose tokens from position ``start`` on are
        ``tokens``, ascending. ``final``: those are all its tokens; else more may follow, and only the cuts before
        the first stop whose cut is not settled yet are given."""
        end = start + len(tokens)
        at_width = set(range((start // self.width + 1) * self.width, end + 1, self.width))
        after_stop = {start + i + 1 for i, t in enumerate(tokens) if t in self.stops}
        kept = {c for c in after_stop if end - c >= self.tail}
        out = sorted(at_width | kept | set(self.head_ends(tokens) if start == 0 else ()))
        unsettled = sorted(after_stop - kept)
        if not final and unsettled:
            out = [c for c in out if c < unsettled[0]]
        return out

    def head_ends(self, tokens: Sequence[int]) -> list[int]:
        """The cuts of a prompt ``tokens`` (from position 0) right after a head it starts with."""
        return [len(h) for h in self.heads if 0 < len(h) <= len(tokens) and tuple(tokens[: len(h)]) == h]

    def bounds(self, start: int, tokens: Sequence[int], cuts: Sequence[int] | None = None) -> list[tuple[int, int]]:
        """The ``[a, b)`` ranges ``tokens`` (at positions ``start``..) are computed in: split at ``cuts`` (absolute
        positions: those of the whole prefill these tokens are part of), by default :meth:`cuts` of these tokens."""
        end = start + len(tokens)
        inner = self.cuts(start, tokens) if cuts is None else cuts
        edges = [start, *sorted(c for c in set(inner) if start < c < end), end]
        return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]

    def complete_end(self, start: int, tokens: Sequence[int]) -> int:
        """Where the settled complete pieces of ``tokens`` (at positions ``start``.., more may follow) end; ``start``
        where none is."""
        cuts = self.cuts(start, tokens, final=False)
        return cuts[-1] if cuts else start

    def reuse_limit(self, tokens: Sequence[int]) -> int:
        """How far a prefill of ``tokens`` may share its cache with another prompt: up to ``len - tail`` (every stop
        before that is cut whatever follows) and before its last token (always computed, for its logits)."""
        return max(0, min(len(tokens) - 1, len(tokens) - self.tail))

    def last_cut(self, tokens: Sequence[int], limit: int) -> int:
        """The last cut of a prefill of ``tokens`` (from position 0, all of them) at or before ``limit``; 0 where none."""
        return max((c for c in self.cuts(0, tokens) if c <= limit), default=0)

    def ends_on_cut(self, tokens: Sequence[int]) -> bool:
        """Whether the end of ``tokens`` (a prompt's first tokens) is a cut of every prompt that starts with them and goes
        on for at least ``tail`` tokens more."""
        n = len(tokens)
        return n > 0 and (n % self.width == 0 or tokens[-1] in self.stops or n in self.head_ends(tokens))

    def shared_ends(self, tokens: Sequence[int]) -> list[int]:
        """The cuts of a prompt ``tokens`` other prompts are likely to share: after a head and at message ends."""
        return sorted(set(self.head_ends(tokens)) | {i + 1 for i, t in enumerate(tokens) if t in self.stops})
