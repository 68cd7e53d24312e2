"""Emitters of single values: ``enum``/``const`` (filtered by the validator) and free-form
values (``{}``/``true`` schemas, bounded in depth)."""

from __future__ import annotations

from typing import Any, Optional

from constrained_spec.grammar.json_schema.base import CompilerBase
from constrained_spec.grammar.json_schema.ir import Flat
from constrained_spec.grammar.json_schema.py_regex import py_fullmatch
from constrained_spec.grammar.json_schema.regex_text import alt
from constrained_spec.grammar.json_schema.values import json_value_regex

__all__ = ["ValueEmitter"]


class ValueEmitter(CompilerBase):
    """``enum``/``const`` and free-form values."""

    def compile_enum(self, flat: Flat) -> Optional[str]:
        """The alternation of the enum values that every source of flat accepts."""
        outs: list[Optional[str]] = []
        size = 0
        # the validator oracle ignores `format` (an annotation by default): keep only the
        # strings that match the compiler's own (restricting) format patterns
        formats = [p for p, _, k in flat.patterns if k == "format"]
        for v in flat.enum or []:
            self.tick()
            if not self.doc.valid_all(flat.sources, v):
                continue
            if formats and isinstance(v, str) and not all(py_fullmatch(p, v) for p in formats):
                continue
            r = self.value_regex(v)
            size += len(r) + 1
            if size > self.opts.max_regex_chars:
                self.check_size("x" * size)
            outs.append(r)
        return alt(outs)

    def value_regex(self, v: Any) -> str:
        """The regex of one JSON value in this compilation's whitespace."""
        return json_value_regex(v, self.ws)

    def any_value(self, depth: Optional[int] = None) -> str:
        """Any JSON value nested at most depth deep (default: ``any_value_depth``)."""
        if depth is None:
            self.read_any_depth = True
        d = self.opts.any_value_depth if depth is None else depth
        if d > 0:
            self.reducible = True
        if d in self._any_cache:
            return self._any_cache[d]
        ws = self.ws
        string = '"([^"\\\\\\x00-\\x1f]|\\\\(["\\\\/bfnrt]|u[0-9a-fA-F]{4}))*"'
        number = "-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?"
        scalar = "|".join([string, number, "true", "false", "null"])
        if d <= 0:
            r = "(" + scalar + ")"
        else:
            inner = self.any_value(d - 1)
            sep = ws + "," + ws
            arr = "\\[" + ws + "(" + inner + "(" + sep + inner + ")*)?" + ws + "\\]"
            kv = string + ws + ":" + ws + inner
            obj = "\\{" + ws + "(" + kv + "(" + sep + kv + ")*)?" + ws + "\\}"
            r = "(" + scalar + "|" + arr + "|" + obj + ")"
        self._any_cache[d] = r
        return r
