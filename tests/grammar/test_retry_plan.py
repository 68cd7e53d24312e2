"""The tighter retries past the size cap skip the tries that differ from a failed one in
``max_recursion_depth`` alone where that one failed before meeting any recursion (the same steps to
the same failure): the same answer as running every try (the reference: failures all marked as
having met recursion), with fewer compiles; a recursive schema keeps every try."""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex
from constrained_spec.grammar.json_schema import compiler as compiler_mod

FLAT = {"type": "object", "properties": {f"p{i}": {} for i in range(3)}, "required": ["p0", "p1", "p2"]}
RECURSIVE = {
    "$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}, "v": {}, "w": {}},
                    "required": ["v", "w"]}},
    "$ref": "#/$defs/n",
}
Run = tuple[int, int, bool, bool]  # any_value_depth, max_recursion_depth, linear_objects, succeeded


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Run]]:
    """Every Compiler.run of the test: its options and whether it returned."""
    seen: list[Run] = []
    run = compiler_mod.Compiler.run

    def counted(self: Any) -> Any:
        o = self.opts
        try:
            r = run(self)
        except Exception:
            seen.append((o.any_value_depth, o.max_recursion_depth, o.linear_objects, False))
            raise
        seen.append((o.any_value_depth, o.max_recursion_depth, o.linear_objects, True))
        return r

    monkeypatch.setattr(compiler_mod.Compiler, "run", counted)
    yield seen


def _reference(schema: Any, opts: SchemaOptions, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The answer with every try run: each failed compile marked as having met recursion."""
    run = compiler_mod.Compiler.run

    def marked(self: Any) -> Any:
        try:
            return run(self)
        except Exception:
            self.recursive = True
            raise

    with monkeypatch.context() as m:
        m.setattr(compiler_mod.Compiler, "run", marked)
        return schema_to_regex(schema, opts)


def test_recursion_free_failures_skip_depth_only_tries(runs: list[Run], monkeypatch: pytest.MonkeyPatch) -> None:
    opts = SchemaOptions(max_regex_chars=2000)
    got = schema_to_regex(FLAT, opts)
    ours = list(runs)
    runs.clear()
    ref = _reference(FLAT, opts, monkeypatch)
    assert got == ref
    assert (1, 2, True, False) in runs and (1, 1, True, False) in runs  # the control ran them
    assert not any(r[:3] in {(1, 2, True), (1, 1, True)} for r in ours)
    assert len(ours) < len(runs) and ours[-1][3]


def test_recursive_schema_keeps_every_try(runs: list[Run], monkeypatch: pytest.MonkeyPatch) -> None:
    opts = SchemaOptions(max_regex_chars=3000)
    try:
        got: Any = schema_to_regex(RECURSIVE, opts)
    except Exception as e:  # the same refusal either way
        got = (type(e), str(e))
    ours = list(runs)
    runs.clear()
    try:
        ref: Any = _reference(RECURSIVE, opts, monkeypatch)
    except Exception as e:
        ref = (type(e), str(e))
    assert got == ref and ours == runs
    assert len({r[1] for r in ours}) > 1  # max_recursion_depth was varied
