"""The regex-text memos stay small: a long text a request fed is not kept after the request.

Found with ``benchmarks/soak.py``: the memos of ``ecma_regex`` held every big schema's regex text
(up to 8,192 of them, ~15 MiB per big compile), so the server's memory grew with each new schema."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from constrained_spec.grammar import ecma_regex


def _retained_bytes(ask, texts: int, chars: int) -> int:
    """Bytes still allocated after asking ``ask`` about ``texts`` distinct long texts and dropping them."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(texts):
            text = f"(a{i}|b)" + "c" * chars
            ask(text)
            del text
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(("ask", "texts", "chars"), [(ecma_regex.top_level_bar, 20, 10_000),
                                                      (ecma_regex.is_atom, 20, 10_000),
                                                      (ecma_regex.parse, 4, 2_000)],
                         ids=["top_level_bar", "is_atom", "parse"])
def test_long_texts_are_not_kept(ask, texts, chars):
    # a memo that kept them would retain their 200 kB of text (parse: their trees, over 300 kB)
    assert _retained_bytes(ask, texts, chars) < 50_000


def test_short_texts_still_answer_alike():
    # memoised or not, the answer is the scan's: checked on both sides of the bound
    for pad in (10, ecma_regex.MEMO_TEXT_CHARS + 10):
        assert ecma_regex.top_level_bar("a|" + "b" * pad) is True
        assert ecma_regex.top_level_bar("(a|b)" + "c" * pad) is False
        assert ecma_regex.is_atom("(" + "a" * pad + ")") is True
        assert ecma_regex.is_atom("(a)(" + "b" * pad + ")") is False
        assert ecma_regex.parse("x" * pad) == ecma_regex.parse("x" * pad)


def test_negative_control_a_plain_memo_is_caught():
    # the same measure sees a memo that keeps everything: the test above can fail
    import functools

    keep_all = functools.lru_cache(maxsize=8192)(lambda p: "|" in p)
    assert _retained_bytes(keep_all, 20, 10_000) > 150_000
