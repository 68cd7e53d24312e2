"""``ecma_regex.intersect`` is remembered per pair of range tuples: the answers are those of the
plain computation (checked against a brute-force set of code points), and the memo stays bounded."""

from __future__ import annotations

import random

from constrained_spec.grammar import ecma_regex


def _random_ranges(rng: random.Random) -> tuple[tuple[int, int], ...]:
    """A small normalised range tuple over the first 300 code points."""
    cps = {c for _ in range(rng.randint(0, 4)) for c in range(*sorted((rng.randint(0, 300), rng.randint(0, 300))))}
    return ecma_regex.union(tuple((c, c) for c in cps))


def _points(r) -> set[int]:
    """The code points of a range tuple, one by one."""
    return {c for a, b in r for c in range(a, b + 1)}


def test_memoised_answers_equal_the_plain_ones_and_the_sets():
    rng = random.Random(49)
    pairs = [(_random_ranges(rng), _random_ranges(rng)) for _ in range(300)]
    for a, b in pairs + pairs:  # the second round is answered from the memo
        got = ecma_regex.intersect(a, b)
        assert got == ecma_regex._intersect(a, b)
        assert _points(got) == _points(a) & _points(b)


def test_unhashable_and_list_inputs_still_answer():
    a = [[0x41, 0x5A]]
    assert ecma_regex.intersect(a, ((0x50, 0x60),)) == ((0x50, 0x5A),)
    assert ecma_regex.intersect(((0x41, 0x5A),), ([0x50, 0x60],)) == ((0x50, 0x5A),)


def test_the_memo_is_bounded():
    for i in range(9000):
        ecma_regex.intersect(((i, i + 1),), ((i + 1, i + 5),))
    info = ecma_regex._intersect_memo.cache_info()
    assert info.currsize <= info.maxsize == 8192


def test_negative_control_a_wrong_memo_is_caught():
    # a memo keyed on the first argument alone answers a later pair wrongly: the set oracle sees it
    memo: dict = {}

    def wrong(a, b):
        return memo.setdefault(a, ecma_regex._intersect(a, b))

    a = ((0x41, 0x5A),)
    assert wrong(a, ((0x41, 0x45),)) == ((0x41, 0x45),)
    assert _points(wrong(a, ((0x50, 0x60),))) != _points(a) & set(range(0x50, 0x61))
