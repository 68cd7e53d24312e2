"""The conjunction regexes shared by the compiles of one document (``shared_memo``): the first
compile, the size-cap retries under tighter options, and what they leave (regex, grammar, ignored
formats, narrowings, recursion depth) are the same with and without sharing; only the work changes.

Oracles: the same schemas compiled with sharing off (``shared_memo.SHARE = False``, the code as it
was), compared whole, and ``jsonschema`` + ``re.fullmatch`` on values (every value the regex
accepts is valid). Negative controls: a store that serves an entry whatever options it read (an
``any_value_depth`` read at 2 served to a retry at 1), and a replay that drops the records of the
entries it serves; the comparison sees both.
"""

from __future__ import annotations

import collections
import json
import random
import re
from typing import Any, Optional

import jsonschema
import pytest

from constrained_spec.errors import ConstrainedSpecError
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex, shared_memo
from constrained_spec.grammar.json_schema.shared_memo import Entry, SharedMemo


def _schema(n: int) -> dict[str, Any]:
    """Many optional properties: recursive nodes, formats (ignored, recorded), small all-optional
    objects (``linear_objects`` read) and free-form values (``any_value_depth`` read)."""
    kinds: list[dict[str, Any]] = [{"$ref": "#/$defs/node"}, {"type": "integer", "format": "int32"},
                                   {"$ref": "#/$defs/leaf"}, {}]
    return {
        "$defs": {
            "node": {"type": "object", "additionalProperties": False,
                     "properties": {"v": {"type": "integer", "format": "int64"},
                                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}},
            "leaf": {"type": "object", "additionalProperties": False,
                     "properties": {"a": {"type": "string", "maxLength": 3}, "b": {"type": "boolean"},
                                    "c": {"type": "null"}}},
        },
        "type": "object",
        "properties": {f"p{i}": kinds[i % len(kinds)] for i in range(n)},
        "additionalProperties": False,
    }


CASES = [(_schema(12), 3_000), (_schema(12), 6_000), (_schema(12), 20_000), (_schema(9), 4_000), (_schema(16), 12_000)]


def _compile(schema: dict[str, Any], cap: int) -> object:
    """The whole result (or the error's type and text) of one compile."""
    try:
        return schema_to_regex(schema, SchemaOptions(max_regex_chars=cap, time_budget_s=None))
    except ConstrainedSpecError as e:
        return f"{type(e).__name__}: {e}"


def _both(monkeypatch: pytest.MonkeyPatch, schema: dict[str, Any], cap: int) -> tuple[object, object, int]:
    """(result without sharing, result with it, entries another compile took)."""
    taken: collections.Counter[str] = collections.Counter()
    get = SharedMemo.get

    def counting(self: SharedMemo, key: Any, comp: Any) -> Optional[Entry]:
        e = get(self, key, comp)
        taken["hit"] += e is not None
        return e

    monkeypatch.setattr(SharedMemo, "get", counting)
    monkeypatch.setattr(shared_memo, "SHARE", False)
    off = _compile(schema, cap)
    monkeypatch.setattr(shared_memo, "SHARE", True)
    on = _compile(schema, cap)
    return off, on, taken["hit"]


@pytest.mark.parametrize("schema,cap", CASES)
def test_sharing_changes_no_output(monkeypatch: pytest.MonkeyPatch, schema: dict[str, Any], cap: int) -> None:
    off, on, hits = _both(monkeypatch, schema, cap)
    assert on == off
    assert hits > 0  # the retries did take the first compile's entries


def test_the_outputs_are_sound_against_jsonschema(monkeypatch: pytest.MonkeyPatch) -> None:
    """Values drawn around the schema: every one the shared compile's regex accepts is valid."""
    monkeypatch.setattr(shared_memo, "SHARE", True)
    schema = _schema(12)
    r = schema_to_regex(schema, SchemaOptions(max_regex_chars=6_000, time_budget_s=None))
    assert r.lark is not None and r.ignored_formats and r.narrowed
    rng = random.Random(7)
    pool: list[Any] = [None, True, 0, 5, -3, "ab", "abcd", [], {}, {"v": 1}, {"kids": []}, {"a": "x", "b": False},
                       {"v": 1, "kids": [{"v": 2}]}, {"q": 1}, [1, {"a": None}]]
    seen = accepted = 0
    for _ in range(600):
        names = rng.sample([f"p{i}" for i in range(12)] + ["zz"], rng.randint(0, 4))
        names.sort(key=lambda n: (n == "zz", int(n[1:]) if n != "zz" else 0))
        value = {n: rng.choice(pool) for n in ["p0"] + [n for n in names if n != "p0"]}  # p0: required (narrowed)
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        seen += 1
        if re.fullmatch(r.regex, text):
            accepted += 1
            jsonschema.validate(value, schema)
    assert seen == 600 and accepted > 10


def test_a_full_store_stops_sharing_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bounded (``SHARED_CHARS_FACTOR`` times ``max_regex_chars``): at 0 nothing with a regex is
    kept for another compile, and the outputs are those without sharing."""
    monkeypatch.setattr(shared_memo, "SHARED_CHARS_FACTOR", 0)
    sizes: list[int] = []
    put = SharedMemo.put

    def recording(self: SharedMemo, key: Any, entry: Entry) -> None:
        put(self, key, entry)
        sizes.append(self.chars)

    monkeypatch.setattr(SharedMemo, "put", recording)
    off, on, _ = _both(monkeypatch, _schema(12), 6_000)
    assert on == off
    assert sizes and max(sizes) == 0


def test_control_serving_whatever_options_were_read_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: entries served without comparing the options they read (a free-form value
    at depth 2 handed to the retry at depth 1) change the retry's regex; the comparison sees it."""
    monkeypatch.setattr(Entry, "serves", lambda self, comp: self.plain and shared_memo.neutral(comp))
    differ = 0
    for schema, cap in CASES:
        off, on, _ = _both(monkeypatch, schema, cap)
        differ += on != off
    assert differ > 0


def test_control_dropping_the_records_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: a replay that leaves the records out (ignored formats, narrowings, read
    options) changes what the compile reports; the comparison sees it."""
    replay = Entry.replay

    def forgetful(self: Entry, comp: Any, sharing: Any) -> None:
        if self.owner is sharing:
            replay(self, comp, sharing)  # its own entries as before: only the taken ones forget

    monkeypatch.setattr(Entry, "replay", forgetful)
    differ = 0
    for schema, cap in CASES:
        off, on, _ = _both(monkeypatch, schema, cap)
        differ += on != off
    assert differ > 0
