"""``stream: true``: the reply as server-sent events (``chat.completion.chunk``).

A chunk with the role, then the content as it is generated (the decoder's ``on_tokens`` hook hands
over each step's final tokens; a multi-byte character split across tokens is held back until it is
whole), a chunk with ``finish_reason`` (and the decoding stats), an optional usage chunk
(``stream_options.include_usage``) and ``data: [DONE]``. The deltas concatenate to exactly the
non-streamed ``content``. Tool calls stream as OpenAI's do: a first delta per call with its ``id``,
``type`` and ``function.name``, then ``function.arguments`` pieces as the model writes them
(:class:`~constrained_spec.tools.ToolCallStream` reads the wrapper object the grammar holds the
model to); they concatenate to the non-streamed ``arguments``. The text reply of
``tool_choice: "auto"`` comes as one chunk at the end. Errors found before the first token are
ordinary HTTP errors; later ones arrive as an ``{"error": {...}}`` event and ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, AsyncIterator

from constrained_spec.errors import TokenBudgetExceeded
from constrained_spec.serving.completion import Plan, partial_message, reply_message, stats_extra
from constrained_spec.serving.errors import api_error
from constrained_spec.serving.protocol import budget_usage, new_call_id, usage
from constrained_spec.serving.scheduler import Scheduler
from constrained_spec.tools import ToolCallStream

__all__ = ["ChunkWriter", "sse", "stream_completion", "tool_call_deltas"]

DONE = "data: [DONE]\n\n"


def sse(obj: Any) -> str:
    """One server-sent event carrying ``obj`` as JSON."""
    return "data: " + json.dumps(obj, ensure_ascii=False) + "\n\n"


def tool_call_deltas(events: list[tuple[str, int, str]], ids: dict[int, str]) -> list[dict]:
    """OpenAI ``delta.tool_calls`` entries for :class:`ToolCallStream` events: a call's first entry
    carries its id, type and name (and empty arguments), the next ones pieces of its arguments."""
    out = []
    for kind, index, value in events:
        if kind == "name":
            ids[index] = new_call_id()
            out.append({"index": index, "id": ids[index], "type": "function", "function": {"name": value, "arguments": ""}})
        else:
            out.append({"index": index, "function": {"arguments": value}})
    return out


def start_generation(scheduler: Scheduler, plan: Plan, output_type: Any, options: dict[str, Any], cancel: threading.Event,
                     timeout: float | None, stream_text: bool) -> asyncio.Queue:
    """Spawn the generation on ``scheduler``; its events arrive on the returned queue, in order:
    ``("tokens", ids)`` as steps commit (only with ``stream_text``), then ``("done", result)`` or
    ``("error", exc)``."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    def on_tokens(ids: list[int]) -> None:  # from the worker thread
        if stream_text:
            loop.call_soon_threadsafe(events.put_nowait, ("tokens", list(ids)))

    async def produce() -> None:
        try:
            result = await scheduler.generate(plan.prompt, output_type, options, cancel, timeout, on_tokens)
        except Exception as exc:  # noqa: BLE001 - every failure reaches the client
            events.put_nowait(("error", exc))
        else:
            events.put_nowait(("done", result))  # after every ("tokens", ...): same loop, FIFO

    scheduler.spawn(produce())
    return events


async def first_event(events: asyncio.Queue, cancel: threading.Event) -> tuple:
    """The generation's first event; a client gone meanwhile (this task cancelled) stops it."""
    try:
        return await events.get()
    except asyncio.CancelledError:
        cancel.set()
        raise


class ChunkWriter:
    """The SSE events of one streamed completion, step by step: the opening role chunk, content or
    tool-call pieces as tokens arrive, then the end (the rest of the reply, the finish reason with
    the stats, the optional usage chunk and ``[DONE]``; or an error event and ``[DONE]``)."""

    def __init__(self, plan: Plan, base: dict[str, Any], text: Any, *, include_usage: bool, request_timeout: float | None) -> None:
        self.plan = plan
        self.base = base  # the fields every chunk starts with
        self.text = text  # the vocabulary's text stream (None: the generator has none, no "tokens" events)
        self.include_usage = include_usage
        self.request_timeout = request_timeout
        self.calls = ToolCallStream() if plan.mode == "tools" else None
        self.call_ids: dict[int, str] = {}
        self.sent: list[str] = []  # text streamed as content (modes text and json)

    def chunk(self, delta: dict, finish_reason: str | None = None, **more: Any) -> str:
        """One ``chat.completion.chunk`` event."""
        return sse({**self.base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}], **more})

    def error(self, exc: BaseException) -> list[str]:
        """The events of a failure after the response started: its error body, then ``[DONE]``."""
        return [sse(api_error(exc, self.plan.param, request_timeout=self.request_timeout).body()), DONE]

    def opening(self) -> str:
        """The first chunk: the role (content null for tool calls)."""
        return self.chunk({"role": "assistant", "content": None if self.plan.mode == "tools" else ""})

    def tokens(self, ids: list[int]) -> list[str]:
        """The chunks of one step's tokens: their text as content, or as tool-call pieces."""
        piece = self.text.push(ids)
        if self.calls is not None:
            return self.tool_calls(piece)
        if not piece:
            return []
        self.sent.append(piece)
        return [self.chunk({"content": piece})]

    def tool_calls(self, piece: str) -> list[str]:
        """The ``delta.tool_calls`` chunks of the next ``piece`` of the wrapper object's text."""
        assert self.calls is not None
        return [self.chunk({"tool_calls": [delta]}) for delta in tool_call_deltas(self.calls.push(piece), self.call_ids)]

    def all_calls(self, calls: list[dict]) -> str:
        """Every tool call in one chunk (no token stream was read)."""
        return self.chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})

    def closing(self, kind: str, payload: Any) -> list[str]:
        """The last events, for the generation's ``("done", result)`` or ``("error", exc)``."""
        if kind == "error" and isinstance(payload, TokenBudgetExceeded):
            return self.out_of_budget(payload)
        if kind == "error":
            return self.error(payload)
        return self.finished(payload)

    def out_of_budget(self, exc: TokenBudgetExceeded) -> list[str]:
        """A 200 ending in ``"length"``: the partial text not streamed yet, the finish chunk, usage."""
        events = [*self.partial_rest(exc.partial_text), self.chunk({}, "length", constrained_spec={"stats": None, "mode": self.plan.mode})]
        if self.include_usage:
            events.append(self.usage(budget_usage(exc)))
        return events + [DONE]

    def partial_rest(self, partial_text: str) -> list[str]:
        """What of a budget-cut reply was not streamed: the content past what was sent; with no call
        streamed, the reply's partial text (or calls, if there was no token stream)."""
        if self.calls is None:
            so_far = "".join(self.sent)
            rest = partial_text[len(so_far):] if partial_text.startswith(so_far) else ""
            return [self.chunk({"content": rest})] if rest else []
        if self.calls.calls:
            return []
        partial = partial_message(self.plan, partial_text)
        if partial.get("tool_calls"):
            return [self.all_calls(partial["tool_calls"])]
        if partial.get("content"):
            return [self.chunk({"content": partial["content"]})]
        return []

    def finished(self, result: Any) -> list[str]:
        """The end of a complete generation: the last tool-call pieces, the reply not streamed yet
        (checked against what was), the finish chunk with the stats, usage."""
        events = self.tool_calls(self.text.flush()) if self.text is not None and self.calls is not None else []
        try:
            message, finish = reply_message(self.plan, result)
        except Exception as exc:  # noqa: BLE001
            return events + self.error(exc)
        problem = self.mismatch(message)
        if problem is not None:
            return events + self.error(RuntimeError(problem))
        events += self.reply_rest(message)
        events.append(self.chunk({}, finish, constrained_spec=stats_extra(self.plan, result)))
        if self.include_usage:
            events.append(self.usage(usage(result)))
        return events + [DONE]

    def streamed_text(self) -> str:
        """The content streamed so far (none in tools mode)."""
        return "".join(self.sent) if self.plan.mode != "tools" else ""

    def mismatch(self, message: dict) -> str | None:
        """How the streamed pieces differ from the final ``message`` (cannot happen: both are read
        off the same text), or None."""
        if message.get("tool_calls"):
            streamed = self.calls.calls if self.calls is not None else []
            final = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
            return "the streamed tool calls differ from the generated value" if streamed and streamed != final else None
        if message.get("content") is not None and not message["content"].startswith(self.streamed_text()):
            return "the streamed text differs from the generated value"
        return None

    def reply_rest(self, message: dict) -> list[str]:
        """What of the final ``message`` was not streamed: every call at once where no token stream
        was read (a generator without a vocabulary); the content past what was sent."""
        if message.get("tool_calls"):
            return [] if self.calls is not None and self.calls.calls else [self.all_calls(message["tool_calls"])]
        if message.get("content") is not None:
            rest = message["content"][len(self.streamed_text()):]
            return [self.chunk({"content": rest})] if rest else []
        return []

    def usage(self, used: dict) -> str:
        """The usage chunk (``stream_options.include_usage``): no choices."""
        return sse({**self.base, "choices": [], "usage": used})


async def relay(writer: ChunkWriter, events: asyncio.Queue, first: tuple, cancel: threading.Event) -> AsyncIterator[str]:
    """The response body: the generation's events (``first``, then the queue's) as SSE events. When
    it ends (finished, or the client went away) a generation still running stops at its next step."""
    pending: list[tuple] = [first]
    try:
        yield writer.opening()
        while True:
            kind, payload = pending.pop() if pending else await events.get()
            if kind == "tokens":
                for event in writer.tokens(payload):
                    yield event
                continue
            for event in writer.closing(kind, payload):
                yield event
            return
    finally:
        cancel.set()


async def stream_completion(scheduler: Scheduler, plan: Plan, output_type: Any, options: dict[str, Any], *, completion_id: str,
                            created: int, model: str, include_usage: bool, cancel: threading.Event, timeout: float | None) -> Any:
    """Start the generation; at its first event (the first tokens, or its end), answer with the
    SSE stream, or raise the :class:`APIError` it failed with before any token."""
    from fastapi.responses import StreamingResponse

    vocab: Any = getattr(scheduler.generator, "vocab", None)
    stream_text = hasattr(vocab, "text_stream")
    events = start_generation(scheduler, plan, output_type, options, cancel, timeout, stream_text)
    first = await first_event(events, cancel)
    if first[0] == "error" and not isinstance(first[1], TokenBudgetExceeded):
        cancel.set()
        raise api_error(first[1], plan.param, request_timeout=scheduler.request_timeout) from first[1]
    base = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model, "system_fingerprint": None}
    writer = ChunkWriter(plan, base, vocab.text_stream() if stream_text else None, include_usage=include_usage,
                         request_timeout=scheduler.request_timeout)
    return StreamingResponse(relay(writer, events, first, cancel), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
