"""Where a llama.cpp prefill is cut (``models.llamacpp.pieces``), against bounds written out by hand."""

from __future__ import annotations

from constrained_spec.models.llamacpp.pieces import PieceRule

WIDE = PieceRule(256)  # no stops, no heads: cuts at the width's multiples only


def _span(start: int, end: int) -> tuple[int, list[int]]:
    return start, list(range(start, end))


def test_pieces_are_cut_at_absolute_multiples():
    assert WIDE.bounds(*_span(0, 600)) == [(0, 256), (256, 512), (512, 600)]
    assert WIDE.bounds(*_span(300, 800)) == [(300, 512), (512, 768), (768, 800)]
    assert WIDE.bounds(*_span(256, 512)) == [(256, 512)]
    assert WIDE.bounds(*_span(7, 7)) == []


def test_a_prompt_fed_in_any_chunks_is_cut_where_one_prefill_cuts_it():
    """Chunks of 100 computed up to their complete pieces, then the rest, give the one-prefill cuts."""
    cuts, start = [], 0
    for end in range(100, 701, 100):
        cut = WIDE.complete_end(*_span(start, end))
        cuts += WIDE.bounds(*_span(start, cut))
        start = cut
    cuts += WIDE.bounds(*_span(start, 700))
    assert cuts == [(0, 256), (256, 512), (512, 700)]


def test_complete_end():
    assert WIDE.complete_end(*_span(0, 255)) == 0
    assert WIDE.complete_end(*_span(0, 256)) == 256
    assert WIDE.complete_end(*_span(100, 600)) == 512
    assert WIDE.complete_end(*_span(512, 600)) == 512


def test_a_rule_with_stops_cuts_after_each_stop_and_at_multiples():
    from constrained_spec.models.llamacpp.pieces import PieceRule

    rule = PieceRule(8, frozenset({99}))
    tokens = [1, 2, 99, 3, 4, 5, 6, 7, 8, 9, 99, 1, 2]  # stops at indices 2 and 10: cuts at 3, 8 (width), 11
    assert rule.cuts(0, tokens) == [3, 8, 11]
    assert rule.bounds(0, tokens) == [(0, 3), (3, 8), (8, 11), (11, 13)]
    assert rule.bounds(5, tokens[5:]) == [(5, 8), (8, 11), (11, 13)]
    assert rule.complete_end(0, tokens) == 11 and rule.complete_end(0, tokens[:2]) == 0
    assert rule.last_cut(tokens, 10) == 8 and rule.last_cut(tokens, 11) == 11 and rule.last_cut(tokens, 2) == 0
    assert rule.shared_ends(tokens) == [3, 11]
    assert PieceRule(256).bounds(0, list(range(600))) == [(0, 256), (256, 512), (512, 600)]  # no stops: the width cuts only


def test_a_prompt_fed_in_any_chunks_is_cut_where_one_prefill_cuts_it_with_stops():
    """The rows' case with stop tokens: chunks computed up to their complete pieces, then the rest, give the cuts
    of one prefill of the whole prompt, whatever the chunk sizes."""
    import random

    from constrained_spec.models.llamacpp.pieces import PieceRule

    rng = random.Random(3)
    rule = PieceRule(16, frozenset({0}))
    for _ in range(50):
        tokens = [rng.randrange(6) for _ in range(rng.randrange(1, 90))]
        got, start, pending = [], 0, []
        while start + len(pending) < len(tokens):
            fed = start + len(pending)
            pending += tokens[fed : fed + rng.randrange(1, 30)]
            cut = rule.complete_end(start, pending)
            got += rule.bounds(start, pending[: cut - start])
            pending, start = pending[cut - start :], cut
        got += rule.bounds(start, pending)
        assert got == rule.bounds(0, tokens)


def test_a_stop_near_the_end_of_the_prefill_is_not_a_cut():
    """``tail``: a stop's cut needs that many tokens after it; the rows' partial cuts stop before an unsettled stop."""
    from constrained_spec.models.llamacpp.pieces import PieceRule

    rule = PieceRule(8, frozenset({99}), tail=3)
    tokens = [1, 2, 99, 3, 4, 5, 6, 7, 8, 9, 99, 1, 2]  # the stop at index 10 has 2 tokens after it: no cut at 11
    assert rule.cuts(0, tokens) == [3, 8]
    assert rule.cuts(0, tokens + [5]) == [3, 8, 11]
    assert rule.cuts(0, tokens, final=False) == [3, 8]  # 11 is not settled: it may still become a cut
    assert rule.cuts(0, tokens[:4], final=False) == []  # the stop at index 2 has one token after it: not settled
    assert rule.reuse_limit(tokens) == 10 and rule.last_cut(tokens, rule.reuse_limit(tokens)) == 8
    assert rule.ends_on_cut(tokens[:3]) and rule.ends_on_cut(tokens[:8]) and not rule.ends_on_cut(tokens[:5])


def test_with_a_tail_chunks_and_shared_prefixes_are_cut_as_one_prefill_cuts():
    """Against the cuts of one prefill of the whole prompt (``final``): a prompt fed in random chunks, each computed up
    to its settled cuts as the rows do, gives the same pieces; and two prompts sharing their first ``c`` tokens, ``c``
    within both reuse limits, have the same cuts up to ``c`` (so a saved prefix there is bitwise a prefill's).
    Control: with the tail rule, computing each chunk up to its final-looking cuts gives other pieces."""
    import random

    from constrained_spec.models.llamacpp.pieces import PieceRule

    rng = random.Random(5)
    rule = PieceRule(16, frozenset({0}), heads=frozenset({(1, 2, 3)}), tail=4)
    naive_differs = 0
    for _ in range(300):
        tokens = [rng.randrange(6) for _ in range(rng.randrange(1, 90))]
        if rng.random() < 0.3:
            tokens[:3] = [1, 2, 3]
        for final_looking in (False, True):
            got, start, pending = [], 0, []
            while start + len(pending) < len(tokens):
                fed = start + len(pending)
                pending += tokens[fed : fed + rng.randrange(1, 30)]
                cuts = rule.cuts(start, pending, final=final_looking)
                cut = cuts[-1] if cuts else start
                got += rule.bounds(start, pending[: cut - start], cuts)
                pending, start = pending[cut - start :], cut
            got += rule.bounds(start, pending)
            if final_looking:
                naive_differs += got != rule.bounds(0, tokens)
            else:
                assert got == rule.bounds(0, tokens), tokens
        other = tokens[: rng.randrange(len(tokens) + 1)] + [rng.randrange(6) for _ in range(rng.randrange(0, 40))]
        shared = 0
        while shared < min(len(tokens), len(other)) and tokens[shared] == other[shared]:
            shared += 1
        c = rule.last_cut(tokens, min(shared, rule.reuse_limit(tokens), rule.reuse_limit(other)))
        assert [x for x in rule.cuts(0, tokens) if x <= c] == [x for x in rule.cuts(0, other) if x <= c]
    assert naive_differs > 10
