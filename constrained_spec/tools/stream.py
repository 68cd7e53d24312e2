"""Reading a tool-enabled generation as it is written: the streamed-arguments scanner."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["ToolCallStream", "partial_json_string"]


class ToolCallStream:
    """Reads the text of a generation under :func:`tool_call_schema` piece by piece.

    :meth:`push` takes the next piece of text and returns events: ``("name", i, name)`` once call
    ``i``'s name is complete, then ``("arguments", i, text)`` with each new piece of that call's
    arguments, as the model writes them (the raw JSON text, so the pieces concatenate to
    :attr:`calls`' arguments text). Calls are the bare call object (index 0) or the items of
    ``{"tool_calls": [...]}``; the raw text of a ``{"content": ...}`` reply is kept in
    :attr:`content`. A JSON scanner that tracks where in the wrapper object each character is;
    it needs no particular key order or whitespace.
    """

    def __init__(self) -> None:
        self._stack: list[list[Any]] = []  # frames: ["obj", key, expecting_key] / ["arr", index]
        self._in_string = False
        self._escape = False
        self._is_key = False
        self._key: list[str] = []
        self._capture: tuple[str, int] | None = None  # ("arguments" | "name" | "content", call index)
        self._capture_depth = 0
        self._scalar = False  # the captured value is a number / true / false / null, still open
        self._names: dict[int, str] = {}
        self._name_raw: dict[int, list[str]] = {}
        self._args: dict[int, list[str]] = {}
        self._sent: dict[int, int] = {}  # argument pieces already reported, per call
        self._content: list[str] = []

    @property
    def calls(self) -> list[tuple[str, str]]:
        """``(name, arguments text so far)`` of every call whose name is complete, by index."""
        return [(self._names[i], "".join(self._args.get(i, []))) for i in sorted(self._names)]

    @property
    def content(self) -> str | None:
        """The raw JSON text of the reply's ``content`` value so far (None: no content key)."""
        return "".join(self._content) if self._content else None

    def _path(self) -> tuple:
        return tuple(frame[1] for frame in self._stack)

    def _target(self) -> tuple[str, int] | None:
        path = self._path()
        if path in (("arguments",), ("name",), ("content",)):
            return path[0], 0
        if len(path) == 3 and path[0] == "tool_calls" and isinstance(path[1], int) and path[2] in ("arguments", "name"):
            return path[2], path[1]
        return None

    def _emit(self, piece: str) -> None:
        kind, index = self._capture  # type: ignore[misc]
        if kind == "content":
            self._content.append(piece)
        else:
            (self._args if kind == "arguments" else self._name_raw).setdefault(index, []).append(piece)

    def _end_capture(self) -> None:
        kind, index = self._capture  # type: ignore[misc]
        self._capture = None
        self._scalar = False
        if kind == "name":
            raw = "".join(self._name_raw.get(index, []))
            try:
                self._names[index] = str(json.loads(raw))
            except ValueError:
                self._names[index] = raw.strip('"')

    def push(self, text: str) -> list[tuple[str, int, str]]:
        """Feed the next piece of generated text; returns the events it completes (see the class)."""
        named_before = set(self._names)
        for ch in text:
            self._char(ch)
        events: list[tuple[str, int, str]] = [("name", i, self._names[i]) for i in sorted(set(self._names) - named_before)]
        for i in sorted(self._names):
            pieces = self._args.get(i, [])
            if len(pieces) > self._sent.get(i, 0):
                events.append(("arguments", i, "".join(pieces[self._sent.get(i, 0):])))
                self._sent[i] = len(pieces)
        return events

    def _char(self, ch: str) -> None:
        if self._in_string:
            if self._capture is not None:
                self._emit(ch)
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == '"':
                self._in_string = False
                if self._is_key:
                    self._stack[-1][1], self._stack[-1][2] = json.loads('"' + "".join(self._key) + '"'), False
                    self._is_key = False
                elif self._capture is not None and len(self._stack) == self._capture_depth:
                    self._end_capture()  # a string that was the whole captured value
            elif self._is_key:
                self._key.append(ch)
            return
        if self._scalar and (ch in ",]}" or ch.isspace()):
            self._end_capture()  # a number / literal ends at the first delimiter
        top = self._stack[-1] if self._stack else None
        expecting_key = top is not None and top[0] == "obj" and top[2]
        if self._capture is None and not ch.isspace() and not expecting_key and ch not in ":,]}":
            target = self._target()  # the first character of a value: is it one to capture?
            if target is not None:
                self._capture, self._capture_depth = target, len(self._stack)
                self._scalar = ch not in '{["'
                self._emit(ch)
                self._structure(ch, expecting_key)
                return
        if self._capture is not None and (len(self._stack) > self._capture_depth or self._scalar):
            self._emit(ch)
        if not ch.isspace():
            self._structure(ch, expecting_key)

    def _structure(self, ch: str, expecting_key: bool) -> None:
        top = self._stack[-1] if self._stack else None
        if expecting_key and ch == '"':
            self._in_string, self._is_key, self._key = True, True, []
        elif ch == ",":
            if top is not None and top[0] == "obj":
                top[1], top[2] = None, True
            elif top is not None:
                top[1] += 1
        elif ch in "]}":
            if self._stack:
                self._stack.pop()
            if self._capture is not None and len(self._stack) == self._capture_depth and not self._scalar:
                self._end_capture()  # the captured object / array closed
        elif ch == "{":
            self._stack.append(["obj", None, True])
        elif ch == "[":
            self._stack.append(["arr", 0])
        elif ch == '"':
            self._in_string, self._is_key = True, False


def partial_json_string(raw: str) -> str:
    """The text of a JSON string literal that may be cut anywhere (a ``"`` and escapes missing)."""
    raw = raw.strip()
    if not raw.startswith('"'):
        return raw
    try:
        value = json.loads(raw)
        if isinstance(value, str):
            return value
    except ValueError:
        pass
    body = raw[1:]
    for cut in range(len(body), max(len(body) - 7, -1), -1):  # drop an unfinished escape at the end
        try:
            return json.loads('"' + body[:cut] + '"')
        except ValueError:
            continue
    return ""
