"""The compile's wall-time budget is a last-resort guard that refuses by time (CompileLimitError,
kind "time"); it never turns into a different answer (no grammar, fewer retries, a greedy-lexing
check answering "unsafe"), so what a schema compiles to does not depend on how busy the host is.

The clock is made to jump past the budget after the first regex compile (the step a quiet host
and a busy one share); on a quiet clock the same schema gets its grammar (the control)."""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest

from constrained_spec.errors import CompileLimitError
from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex
from constrained_spec.grammar.json_schema import compiler as compiler_mod
from constrained_spec.grammar.json_schema.lexeme_check import greedy_safe
from constrained_spec.grammar.json_schema.lexeme_lang import Lang, OverBudget

RECURSIVE = {
    "$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}, "v": {"type": "integer"}}}},
    "$ref": "#/$defs/n",
}


@pytest.fixture
def clock_jumps_after_first_run(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """time.monotonic() runs 1,000 s ahead once the first Compiler.run has returned."""
    real = time.monotonic
    state = {"late": False}
    run = compiler_mod.Compiler.run

    def late_run(self: Any) -> Any:
        try:
            return run(self)
        finally:
            state["late"] = True

    monkeypatch.setattr(compiler_mod.Compiler, "run", late_run)
    monkeypatch.setattr(time, "monotonic", lambda: real() + (1000.0 if state["late"] else 0.0))
    yield


def test_control_quiet_clock_has_a_grammar() -> None:
    r = schema_to_regex(RECURSIVE, SchemaOptions(time_budget_s=20.0))
    assert r.lark is not None and r.regex


def test_grammar_past_budget_refuses_by_time(clock_jumps_after_first_run: None) -> None:
    """Old behaviour: the regex without its grammar (an answer that depends on the clock)."""
    with pytest.raises(CompileLimitError) as info:
        schema_to_regex(RECURSIVE, SchemaOptions(time_budget_s=20.0))
    assert info.value.kind == "time"


def test_greedy_check_past_deadline_raises_time() -> None:
    """The greedy-lexing check's deadline raises (kind "time") instead of answering "unsafe";
    without a deadline the same terminals are safe (the control)."""
    terms = {"A": ecma.parse('"[a-z]+"'), "B": ecma.parse("[0-9]+")}
    colive = [frozenset({"A", "B"})]
    follows = {"A": frozenset({"B"}), "B": frozenset({"A"})}
    assert greedy_safe(terms, colive, follows, 100_000) is True
    lang = Lang(5000, deadline=time.monotonic() - 1.0)
    with pytest.raises(CompileLimitError) as info:
        for _ in range(5000):
            lang.spend()
    assert info.value.kind == "time"
    with pytest.raises(OverBudget):  # the step budget still answers "unsure" (deterministic)
        lang2 = Lang(10)
        for _ in range(11):
            lang2.spend()
