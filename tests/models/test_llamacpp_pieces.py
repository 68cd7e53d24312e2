"""Where a llama.cpp prefill is cut (``models.llamacpp.pieces``), against bounds written out by hand."""

from __future__ import annotations

import pytest

from constrained_spec.models.llamacpp.pieces import complete_end, piece_bounds


def test_pieces_are_cut_at_absolute_multiples():
    assert piece_bounds(0, 600, 256) == [(0, 256), (256, 512), (512, 600)]
    assert piece_bounds(300, 800, 256) == [(300, 512), (512, 768), (768, 800)]
    assert piece_bounds(256, 512, 256) == [(256, 512)]
    assert piece_bounds(7, 7, 256) == []


def test_a_prompt_fed_in_any_chunks_is_cut_where_one_prefill_cuts_it():
    """Chunks of 100 computed up to their complete pieces, then the rest, give the one-prefill cuts."""
    cuts, start = [], 0
    for end in range(100, 701, 100):
        cut = complete_end(start, end, 256)
        cuts += piece_bounds(start, cut, 256)
        start = cut
    cuts += piece_bounds(start, 700, 256)
    assert cuts == piece_bounds(0, 700, 256)


def test_complete_end():
    assert complete_end(0, 255, 256) == 0
    assert complete_end(0, 256, 256) == 256
    assert complete_end(100, 600, 256) == 512
    assert complete_end(512, 600, 256) == 512


def test_bad_spans_raise():
    with pytest.raises(ValueError):
        piece_bounds(5, 4)
