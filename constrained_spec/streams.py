"""Streams and coroutines over ``Generator.run``: ``stream`` (an iterator of chunks), ``arun`` and
``astream`` (asyncio, never blocking the event loop).

Each call decodes on a worker thread of its own through ``Generator.run`` and its ``on_tokens``
hook, so with ``max_batch_size > 1`` concurrent streams decode as rows of one batch. A chunk holds
one step's committed tokens, the text they complete (:class:`~constrained_spec.grammar.vocab.TextStream`:
a UTF-8 character split across tokens waits for its last byte, so a delta never ends inside one)
and, for JSON outputs, the value parsed so far (:class:`PartialJSON`).

Cancelling (leaving a ``for`` loop, closing the iterator, cancelling the task of ``arun`` or of the
``async for``) stops the decode at its next step: the row's batch slot (or the Generator's lock)
is free from then on. An ``async for`` left by ``break`` is closed when the event loop finalises
the async generator (soon after); ``contextlib.aclosing`` closes it at once.
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import threading
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator

__all__ = ["PartialJSON", "StreamChunk", "StreamCancelled", "arun", "astream", "stream"]


class StreamCancelled(Exception):
    """Raised inside the decode (from its ``on_tokens`` hook) when the consumer went away."""


@dataclass(frozen=True)
class StreamChunk:
    """One step of a streamed generation.

    ``text``: the text this step completes (may be empty while a multi-byte character is
    unfinished); the deltas of a stream join to ``result.text``. ``token_ids``: the step's committed
    tokens (EOS excluded). ``partial`` (JSON Schema and Pydantic outputs; None otherwise): the JSON
    value of the text so far, as :class:`PartialJSON` completes it (a dict/list/str/number, not a
    Pydantic instance); None before any value has begun. ``result``: on the last chunk (``done``),
    what ``Generator.run`` returns.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    partial: Any = None
    done: bool = False
    result: Any = None


_LONE_HIGH_SURROGATE = re.compile(r"(?<!\\)((?:\\\\)*)\\u[dD][89abAB][0-9a-fA-F]{2}$")


class PartialJSON:
    """The value of a prefix of a JSON text, completed to the largest value it already implies.

    What a partial holds, for the prefix read so far: open strings are closed (an unfinished escape,
    or half of a surrogate pair, left out); open arrays and objects are closed; a number, ``true``,
    ``false`` or ``null`` appears once its text has ended (the next character read, or
    :meth:`finish`: ``12`` may still become ``125`` or ``12e3``, so it waits); an object member
    appears once its key is complete and its value can be shown (an unfinished key, a key whose value
    has not started or is a number still being written, is dropped). So each partial is a prefix
    of the final value: its objects hold the first keys of the final object in order, every member
    but the last equal to the final one; its arrays the first elements, every one but the last
    equal; its last string or container a prefix of the final one. Fed the whole text (then
    :meth:`finish`), it is the value itself; None before any value can be shown.

    Incremental: :meth:`feed` scans each new character once; :meth:`value` closes the prefix and
    parses it with :func:`json.loads` (C speed; the text is re-read, not re-scanned).
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._length = 0
        self._stack: list[list[Any]] = []  # [kind '{' or '[', expecting, index after the last complete member]
        self._in_string = False
        self._key = False  # the open string is an object key
        self._escape = 0  # -1: after a backslash; n > 0: hex digits of a \u escape still to come
        self._scalar: int | None = None  # start of a number or literal being read
        self._complete = False  # the top-level value has ended

    def feed(self, text: str) -> None:
        """Read more of the JSON text."""
        for offset, char in enumerate(text):
            self._char(char, self._length + offset)
        self._text.append(text)
        self._length += len(text)

    def finish(self) -> None:
        """The text is whole: a number (or literal) at its very end has ended."""
        if self._scalar is not None:
            self._scalar = None
            self._ended(self._length)

    def _ended(self, end: int) -> None:
        """A value ended at ``end`` (exclusive)."""
        if not self._stack:
            self._complete = True
            return
        frame = self._stack[-1]
        frame[1], frame[2] = "comma", end

    def _char(self, char: str, index: int) -> None:
        if self._in_string:
            if self._escape == -1:
                self._escape = 4 if char == "u" else 0
            elif self._escape > 0:
                self._escape -= 1
            elif char == "\\":
                self._escape = -1
            elif char == '"':
                self._in_string = False
                if self._key:
                    self._stack[-1][1] = "colon"
                else:
                    self._ended(index + 1)
            return
        if self._scalar is not None:
            if char.isalnum() or char in "+-.":
                return
            self._scalar = None
            self._ended(index)
        if char in " \t\r\n":
            return
        if char in "{[":
            self._stack.append([char, "key" if char == "{" else "value", index + 1])
        elif char in "}]":
            self._stack.pop()
            self._ended(index + 1)
        elif char == '"':
            self._in_string = True
            self._key = bool(self._stack) and self._stack[-1][0] == "{" and self._stack[-1][1] == "key"
        elif char == ":":
            self._stack[-1][1] = "value"
        elif char == ",":
            self._stack[-1][1] = "key" if self._stack[-1][0] == "{" else "value"
        else:
            self._scalar = index

    def _open_value(self, text: str) -> str | None:
        """The value being written at the end of ``text``, closed; None if it cannot be shown yet."""
        if self._in_string and not self._key:
            body = text
            if self._escape == -1:
                body = body[:-1]
            elif self._escape > 0:
                body = body[: len(body) - (2 + 4 - self._escape)]
            body = _LONE_HIGH_SURROGATE.sub(r"\1", body)  # half of a surrogate pair: wait for the other
            return body + '"'
        return None  # a number or literal being read: left out until it ends

    def value(self) -> Any:
        """The partial value (None before any value has begun)."""
        text = "".join(self._text)
        self._text = [text]
        if self._complete and not self._stack:
            return json.loads(text)
        opened = self._open_value(text)
        if not self._stack:
            return None if opened is None else json.loads(opened)
        frame = self._stack[-1]
        if opened is None:
            opened = text[: frame[2]]  # drop the unfinished member (and a trailing comma or key)
        closing = "".join("}" if f[0] == "{" else "]" for f in reversed(self._stack))
        return json.loads(opened + closing)


# -- the worker -------------------------------------------------------------------------------------

_DONE = object()


def _start(generator: Any, prompt: Any, output_type: Any, options: dict[str, Any],
           emit: Callable[[Any], None]) -> tuple[threading.Event, threading.Thread]:
    """Run ``generator.run`` on a worker thread; ``emit`` gets each step's token ids, then
    ``(_DONE, result)`` or ``(_DONE, exception)``. Setting the returned event cancels it."""
    cancel = threading.Event()
    user_hook = options.pop("on_tokens", None)
    user_step = options.pop("on_step", None)

    def check() -> None:
        if cancel.is_set():
            raise StreamCancelled("the stream's consumer went away")

    def on_step() -> None:
        check()
        if user_step is not None:
            user_step()

    def on_tokens(ids: list[int]) -> None:
        check()
        if user_hook is not None:
            user_hook(ids)
        emit(list(ids))

    def work() -> None:
        try:
            result: Any = generator.run(prompt, output_type, on_tokens=on_tokens, on_step=on_step, **options)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            result = exc
        emit((_DONE, result))

    thread = threading.Thread(target=work, name="constrained-spec-stream", daemon=True)
    thread.start()
    return cancel, thread


class _Chunker:
    """Token ids -> chunks: the UTF-8 text delta and, for JSON kinds, the partial value."""

    def __init__(self, generator: Any, output_type: Any, schema_draft: str | None) -> None:
        self.compiled = compiled = generator.compile(output_type, schema_draft)  # what the run is handed
        self._text = generator.vocab.text_stream()
        self._json = PartialJSON() if compiled.spec.kind in ("json", "pydantic") else None
        self._partial: Any = None

    def chunk(self, ids: list[int]) -> StreamChunk:
        text = self._text.push(ids)
        if text and self._json is not None:
            self._json.feed(text)
            self._partial = self._json.value()
        return StreamChunk(text, tuple(ids), self._partial)

    def last(self, result: Any) -> StreamChunk:
        text = self._text.flush()
        if self._json is not None:
            self._json.feed(text)
            self._json.finish()
            self._partial = self._json.value()
        return StreamChunk(text, (), self._partial, True, result)


def stream(generator: Any, prompt: Any, output_type: Any, **options: Any) -> Iterator[StreamChunk]:
    """Chunks of ``generator.run(prompt, output_type, **options)`` as it decodes; the last one
    (``done``) carries the result. Errors of the run are raised by the iterator, after the chunks
    before them. Closing the iterator early cancels the decode at its next step."""
    chunker = _Chunker(generator, output_type, options.get("schema_draft"))
    events: queue.SimpleQueue[Any] = queue.SimpleQueue()
    cancel, _ = _start(generator, prompt, chunker.compiled, dict(options), events.put)
    try:
        while True:
            item = events.get()
            if isinstance(item, tuple) and item[0] is _DONE:
                if isinstance(item[1], BaseException):
                    raise item[1]
                yield chunker.last(item[1])
                return
            yield chunker.chunk(item)
    finally:
        cancel.set()  # a consumer that stopped early frees the row at the next step


async def astream(generator: Any, prompt: Any, output_type: Any, **options: Any) -> AsyncIterator[StreamChunk]:
    """:func:`stream` for asyncio: the decode runs on a worker thread, chunks arrive through the
    event loop (which it never blocks); cancelling the task or closing the iterator cancels the
    decode at its next step."""
    loop = asyncio.get_running_loop()
    chunker = await asyncio.to_thread(_Chunker, generator, output_type, options.get("schema_draft"))  # may compile
    events: asyncio.Queue[Any] = asyncio.Queue()

    def emit(item: Any) -> None:
        try:
            loop.call_soon_threadsafe(events.put_nowait, item)
        except RuntimeError:  # the loop has closed: nobody is listening
            cancel.set()

    cancel, _ = _start(generator, prompt, chunker.compiled, dict(options), emit)
    try:
        while True:
            item = await events.get()
            if isinstance(item, tuple) and item[0] is _DONE:
                if isinstance(item[1], BaseException):
                    raise item[1]
                yield chunker.last(item[1])
                return
            yield chunker.chunk(item)
    finally:
        cancel.set()


async def arun(generator: Any, prompt: Any, output_type: Any, **options: Any) -> Any:
    """``generator.run(...)`` awaited: what ``run`` returns, without blocking the event loop;
    cancelling the awaiting task cancels the decode at its next step."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def emit(item: Any) -> None:
        if isinstance(item, tuple) and item[0] is _DONE:
            def settle() -> None:
                if not done.done():
                    (done.set_exception if isinstance(item[1], BaseException) else done.set_result)(item[1])
            try:
                loop.call_soon_threadsafe(settle)
            except RuntimeError:  # the loop has closed
                pass

    cancel, _ = _start(generator, prompt, output_type, dict(options), emit)
    try:
        return await done
    finally:
        cancel.set()
