"""Streams and coroutines (constrained_spec.streams): deltas, partial JSON values, asyncio, cancellation.

The partial-value oracle (``is_json_prefix``) is written here from the documented definition, not
from the scanner; every prefix of hand-written JSON texts is checked against it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import jsonschema
import pytest

from constrained_spec import Regex
from constrained_spec.streams import PartialJSON

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
                                           "n": {"type": "integer", "minimum": -50, "maximum": 5000}},
          "required": ["name", "tags", "n"], "additionalProperties": False}


def is_json_prefix(partial, final) -> bool:
    """The documented sense: containers hold the first members (all but the last equal), strings and
    numbers the first characters of the final ones."""
    if partial is None:
        return True
    if isinstance(final, bool) or final is None:
        return partial == final
    if isinstance(final, (int, float)):
        return type(partial) is type(final) and partial == final  # a number appears once written whole
    if isinstance(final, str):
        return isinstance(partial, str) and final.startswith(partial)
    if isinstance(final, list):
        if not isinstance(partial, list) or len(partial) > len(final):
            return False
        return all(p == f for p, f in zip(partial[:-1], final)) and (not partial or is_json_prefix(partial[-1], final[len(partial) - 1]))
    if isinstance(final, dict):
        if not isinstance(partial, dict) or not set(partial) <= set(final):
            return False
        keys = [k for k in final if k in partial]
        if list(partial) != keys or keys != list(final)[: len(keys)]:
            return False
        return all(partial[k] == final[k] for k in keys[:-1]) and (not keys or is_json_prefix(partial[keys[-1]], final[keys[-1]]))
    return False


TEXTS = [
    '{"a": 1, "b": [true, false, null, -12.5e3], "c": {"d": "x\\"y\\\\z\\u00e9\\ud83d\\ude00"}, "e": []}',
    '[1, [2, [3, {}]], "s", {"k": [0.25]}]',
    '"caf\\u00e9 \u4e2d\u6587 \\n end"',
    '-0.5E+2',
    '{"name":"Ann","tags":["x","yz"],"n":42}',
    'null',
]


@pytest.mark.parametrize("text", TEXTS)
def test_every_prefix_gives_a_prefix_of_the_final_value(text):
    final = json.loads(text)
    for cut in range(len(text) + 1):
        parser = PartialJSON()
        parser.feed(text[:cut])
        partial = parser.value()
        assert is_json_prefix(partial, final), (text[:cut], partial)
    parser = PartialJSON()
    for char in text:  # fed a character at a time: the same scanner state
        parser.feed(char)
    parser.finish()
    assert parser.value() == final


def test_what_a_partial_holds():
    def partial(text):
        parser = PartialJSON()
        parser.feed(text)
        return parser.value()

    assert partial("") is None and partial("  ") is None
    assert partial('{"na') == {}  # an unfinished key is dropped
    assert partial('{"name":') == {} and partial('{"name": ') == {}  # a key without its value yet
    assert partial('{"name": "Jo') == {"name": "Jo"}  # an open string is closed
    assert partial('{"a": [1, 2') == {"a": [1]} and partial('{"a": ["x", "y') == {"a": ["x", "y"]}
    assert partial('{"a": [1, 2,') == {"a": [1, 2]}  # a trailing comma is dropped
    assert partial('{"a": tr') == {} and partial('[1, nu') == [1]  # an unfinished literal is left out
    assert partial('[1.5e') == [] and partial('[12') == [] and partial('[12,') == [12]  # a number once it has ended
    assert partial('{"n": 7') == {} and partial('{"n": 7}') == {"n": 7} and partial("42") is None
    assert partial('"ab\\') == "ab" and partial('"ab\\u00') == "ab" and partial('"\\ud83d') == ""


def test_the_oracle_rejects_non_prefixes():
    assert not is_json_prefix({"a": 2}, {"a": 1})
    assert not is_json_prefix({"b": 1}, {"a": 1, "b": 1})  # members out of order
    assert not is_json_prefix([1, 3], [1, 2, 3])
    assert not is_json_prefix("ba", "abc")
    assert not is_json_prefix(13, 12)


@pytest.fixture(scope="module")
def generator(tiny_generator):
    return tiny_generator(draft=True, max_batch_size=2, batch_max_tokens=512, max_new_tokens=120)


def test_stream_deltas_join_to_the_text_and_partials_are_prefixes(generator):
    chunks = list(generator.stream("Describe a thing.", SCHEMA, seed=3, temperature=0.8))
    last = chunks[-1]
    assert last.done and not any(c.done for c in chunks[:-1]) and len(chunks) >= 3
    result = last.result
    assert "".join(c.text for c in chunks) == result.text
    value = json.loads(result.text)
    jsonschema.validate(value, SCHEMA)
    assert last.partial == value == result.value
    assert [t for c in chunks for t in c.token_ids] == result.token_ids
    assert all(is_json_prefix(c.partial, value) for c in chunks)
    assert len({json.dumps(c.partial) for c in chunks}) >= 3  # the partial grows as it goes


def test_stream_never_splits_a_utf8_character(generator):
    pattern = "[\U0001F600\u9f98]{3,6}"  # characters of 4 and 3 UTF-8 bytes that GPT-2 spells in pieces
    chunks = list(generator.stream("Say it.", Regex(pattern), seed=1, temperature=1.0, num_draft_tokens=0))  # a token a step
    text = chunks[-1].result.text
    assert "".join(c.text for c in chunks) == text and "\ufffd" not in text
    assert all(c.partial is None for c in chunks)  # a regex output has no JSON partial
    # the test bites: some step ended inside a character (its bytes are not UTF-8 on their own)
    spelled = [b"".join(generator.vocab.tokens[t] for t in c.token_ids) for c in chunks[:-1]]

    def whole(data):
        try:
            data.decode("utf-8")
            return True
        except UnicodeDecodeError:
            return False

    assert not all(whole(data) for data in spelled)


def test_arun_returns_what_run_returns(generator):
    expected = generator.run("Describe a thing.", SCHEMA)
    result = asyncio.run(generator.arun("Describe a thing.", SCHEMA))
    assert (result.value, result.token_ids) == (expected.value, expected.token_ids)


def test_astream_decodes_rows_together_without_blocking_the_loop(generator):
    peak = []

    def watch(ids):
        peak.append(generator.batch.active_rows)

    async def collect(prompt):
        return [c async for c in generator.astream(prompt, SCHEMA, on_tokens=watch)]

    async def main():
        ticks = 0
        stop = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        runs = await asyncio.gather(collect("Describe a thing."), collect("Describe another thing."))
        stop.set()
        await task
        return runs, ticks

    (first, second), ticks = asyncio.run(main())
    for chunks, prompt in ((first, "Describe a thing."), (second, "Describe another thing.")):
        alone = generator.run(prompt, SCHEMA)
        assert chunks[-1].result.token_ids == alone.token_ids  # each row as it is alone (greedy)
        assert "".join(c.text for c in chunks) == alone.text
    assert max(peak) == 2  # the two streams were rows of one batch
    assert ticks >= 10  # the event loop kept running while they decoded


LONG = Regex("[a-z]{400}")


def wait_until(condition, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class Gate:
    """An on_tokens hook that counts the decode's steps and holds the second one until released, so
    the consumer goes away while the decode is known to be mid-way (no race with a loaded host)."""

    def __init__(self) -> None:
        self.calls = 0
        self.first = threading.Event()
        self.release = threading.Event()

    def __call__(self, ids) -> None:
        self.calls += 1
        self.first.set()
        if self.calls == 2:
            self.release.wait(20)


async def cancel_once_started(coroutine, gate: Gate) -> None:
    """Run ``coroutine`` as a task, cancel it once ``gate`` saw its first step (held at the second),
    check the cancel reached the awaiting side, then let the decode go on to see it."""
    task = asyncio.create_task(coroutine)
    while not gate.first.is_set():
        assert not task.done(), task.result()  # a decode that ended (or failed) before its first step
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    gate.release.set()


def test_leaving_the_loop_frees_the_row_at_the_next_step(generator):
    gate = Gate()
    for _ in generator.stream("Go.", LONG, max_new_tokens=450, on_tokens=gate):
        break  # the stream closes here
    gate.release.set()
    wait_until(lambda: generator.batch.active_rows == 0)
    time.sleep(0.3)
    assert gate.calls <= 2  # the step after the consumer left raised: far from the 400 letters
    # negative control: a stream read to its end takes many more steps
    full = Gate()
    full.release.set()
    list(generator.stream("Go.", LONG, max_new_tokens=450, on_tokens=full))
    assert full.calls > 20


def test_cancelling_the_tasks_frees_their_rows(generator):
    gates = [Gate(), Gate()]

    async def consume(gate):
        async for _ in generator.astream("Go.", LONG, max_new_tokens=450, on_tokens=gate):
            pass

    async def main():
        for gate, coroutine in zip(gates, (consume(gates[0]), generator.arun("Go.", LONG, max_new_tokens=450, on_tokens=gates[1]))):
            await cancel_once_started(coroutine, gate)

    asyncio.run(main())
    wait_until(lambda: generator.batch.active_rows == 0)
    time.sleep(0.3)
    assert [gate.calls <= 2 for gate in gates] == [True, True]


def test_cancelling_an_smc_request_frees_its_rows_at_the_next_round(generator):
    """SMC streams nothing (``on_tokens`` gets the sample once, at the end), so a cancel reaches
    it through ``on_step``, between its particles' rounds; the particles' rows are freed then."""
    gate = Gate()

    asyncio.run(cancel_once_started(generator.arun("Go.", LONG, max_new_tokens=450, alignment="smc", particles=2,
                                                   temperature=1.0, seed=1, on_step=lambda: gate([])), gate))
    wait_until(lambda: generator.batch.active_rows == 0)
    time.sleep(0.3)
    assert gate.calls <= 2  # the round after the cancel raised: far from the 400 letters
    # negative control: an SMC request left to run takes many more rounds
    full = Gate()
    full.release.set()
    result = generator.run("Go.", LONG, max_new_tokens=450, alignment="smc", particles=2, temperature=1.0, seed=1, on_step=lambda: full([]))
    assert len(result.text) == 400 and full.calls >= 10
