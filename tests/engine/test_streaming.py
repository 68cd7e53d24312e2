"""Streaming: the decoder's on_tokens hook and the incremental UTF-8 text of token ids."""

from __future__ import annotations

import pytest
from synthetic import PrefixModel, letters_vocab, make_decoder

from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.grammar.vocab import TokenVocabulary
from constrained_spec.sampling.distribution import SamplingPolicy


def compile(regex: str):
    return AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(regex)


@pytest.mark.parametrize("k", [0, 1, 4])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_on_tokens_concatenates_to_the_result(k, temperature):
    automaton = compile(r"[abc]{3,30}")
    for seed in range(6):
        calls: list[list[int]] = []
        dec = make_decoder(PrefixModel(10, 1), PrefixModel(10, 2), automaton,
                                 SamplingPolicy(temperature=temperature, seed=seed), num_draft_tokens=k,
                                 max_new_tokens=30, debug_checks=True, on_tokens=lambda ids: calls.append(list(ids)))
        result = dec.run([0])
        assert [t for call in calls for t in call] == result.token_ids
        assert all(calls) and all(9 not in call for call in calls)  # never empty, EOS never handed over
        assert len(calls) <= result.stats.steps
        if len(result.token_ids) > k + 1:  # one step commits at most k + 1 tokens
            assert len(calls) >= 2


def test_an_exception_from_on_tokens_stops_the_decode():
    automaton = compile(r"[abc]{20,30}")
    seen: list[int] = []

    class Stop(Exception):
        pass

    def on_tokens(ids):
        seen.extend(ids)
        if len(seen) >= 3:
            raise Stop()

    dec = make_decoder(PrefixModel(10, 1), PrefixModel(10, 2), automaton, SamplingPolicy(temperature=1.0),
                             num_draft_tokens=2, max_new_tokens=30, on_tokens=on_tokens)
    with pytest.raises(Stop):
        dec.run([0])
    assert 3 <= len(seen) < 20


def test_text_stream_holds_back_split_characters():
    vocab = TokenVocabulary(tokens={0: b"a", 1: b"\xc3", 2: b"\xa9", 3: b"\xe2\x82", 4: b"\xac!", 5: b"\xf0\x9f", 6: b"\x98", 7: b"\x80"},
                            eos_token_ids=(9,), size=10)
    ids = [0, 1, 2, 3, 4, 5, 6, 7, 0]
    stream = vocab.text_stream()
    pieces = [stream.push([i]) for i in ids]
    assert pieces == ["a", "", "\u00e9", "", "\u20ac!", "", "", "\U0001F600", "a"]
    assert "".join(pieces) + stream.flush() == vocab.decode(ids)


def test_text_stream_matches_decode_on_invalid_and_unfinished_bytes():
    vocab = TokenVocabulary(tokens={0: b"a", 1: b"\xc3", 2: b"\xff", 3: b"\xe2\x82"}, eos_token_ids=(9,), size=10)
    for ids in ([1, 0], [2, 0, 1], [0, 3], [3, 3, 0], [1]):
        stream = vocab.text_stream()
        text = "".join(stream.push([i]) for i in ids) + stream.flush()
        assert text == vocab.decode(ids), ids
