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
from constrained_spec.serving.errors import APIError, api_error
from constrained_spec.serving.protocol import budget_usage, new_call_id, usage
from constrained_spec.serving.scheduler import Scheduler
from constrained_spec.tools import ToolCallStream

__all__ = ["sse", "stream_completion", "tool_call_deltas"]

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


async def stream_completion(scheduler: Scheduler, plan: Plan, output_type: Any, options: dict[str, Any], *, completion_id: str,
                            created: int, model: str, include_usage: bool, cancel: threading.Event, timeout: float | None) -> Any:
    """Start the generation; at its first event (the first tokens, or its end), answer with the
    SSE stream, or raise the :class:`APIError` it failed with before any token."""
    from fastapi.responses import StreamingResponse

    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()
    vocab: Any = getattr(scheduler.generator, "vocab", None)
    stream_text = hasattr(vocab, "text_stream")

    def request_error(exc: BaseException) -> APIError:
        return api_error(exc, plan.param, request_timeout=scheduler.request_timeout)

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
    try:
        first = await events.get()
    except asyncio.CancelledError:
        cancel.set()
        raise
    if first[0] == "error" and not isinstance(first[1], TokenBudgetExceeded):
        cancel.set()
        raise request_error(first[1]) from first[1]
    base = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model, "system_fingerprint": None}

    def chunk(delta: dict, finish_reason: str | None = None, **more: Any) -> str:
        return sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}], **more})

    def error_event(exc: BaseException) -> list[str]:
        return [sse(request_error(exc).body()), DONE]

    async def body() -> AsyncIterator[str]:
        text: Any = vocab.text_stream() if stream_text else None  # "tokens" events come only with stream_text
        calls = ToolCallStream() if plan.mode == "tools" else None
        call_ids: dict[int, str] = {}
        sent: list[str] = []  # text streamed as content (modes text and json)
        pending: list[tuple] = [first]
        try:
            yield chunk({"role": "assistant", "content": None if plan.mode == "tools" else ""})
            while True:
                kind, payload = pending.pop() if pending else await events.get()
                if kind == "tokens":
                    piece = text.push(payload)
                    if calls is not None:
                        for delta in tool_call_deltas(calls.push(piece), call_ids):
                            yield chunk({"tool_calls": [delta]})
                    elif piece:
                        sent.append(piece)
                        yield chunk({"content": piece})
                    continue
                if kind == "error" and isinstance(payload, TokenBudgetExceeded):  # a 200 ending in "length"
                    if calls is None:
                        so_far = "".join(sent)
                        rest = payload.partial_text[len(so_far):] if payload.partial_text.startswith(so_far) else ""
                        if rest:
                            yield chunk({"content": rest})
                    elif not calls.calls:  # no call streamed: the reply's partial text (or calls, if no token stream)
                        partial = partial_message(plan, payload.partial_text)
                        if partial.get("tool_calls"):
                            yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(partial["tool_calls"])]})
                        elif partial.get("content"):
                            yield chunk({"content": partial["content"]})
                    yield chunk({}, "length", constrained_spec={"stats": None, "mode": plan.mode})
                    if include_usage:
                        yield sse({**base, "choices": [], "usage": budget_usage(payload)})
                    yield DONE
                    return
                if kind == "error":
                    for event in error_event(payload):
                        yield event
                    return
                result = payload
                if text is not None and calls is not None:
                    for delta in tool_call_deltas(calls.push(text.flush()), call_ids):
                        yield chunk({"tool_calls": [delta]})
                try:
                    message, finish = reply_message(plan, result)
                except Exception as exc:  # noqa: BLE001
                    for event in error_event(exc):
                        yield event
                    return
                if message.get("tool_calls"):
                    streamed = calls.calls if calls is not None else []
                    final = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
                    if not streamed:  # no token stream to read (a generator without a vocabulary)
                        yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]})
                    elif streamed != final:  # cannot happen: both are read off the same text
                        for event in error_event(RuntimeError("the streamed tool calls differ from the generated value")):
                            yield event
                        return
                elif message.get("content") is not None:
                    so_far, content = ("".join(sent), message["content"]) if plan.mode != "tools" else ("", message["content"])
                    if not content.startswith(so_far):  # cannot happen: content is the decoded token ids
                        for event in error_event(RuntimeError("the streamed text differs from the generated value")):
                            yield event
                        return
                    if content[len(so_far):]:
                        yield chunk({"content": content[len(so_far):]})
                yield chunk({}, finish, constrained_spec=stats_extra(plan, result))
                if include_usage:
                    yield sse({**base, "choices": [], "usage": usage(result)})
                yield DONE
                return
        finally:
            cancel.set()  # finished, or the client went away: a generation still running stops at its next step

    return StreamingResponse(body(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

