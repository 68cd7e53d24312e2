"""The cycle collector is paused while a schema compiles and resumed as it was found."""

from __future__ import annotations

import gc
import threading
from typing import Iterator

import pytest

from constrained_spec.errors import SchemaError
from constrained_spec.grammar import cycle_gc
from constrained_spec.grammar.cycle_gc import cycle_collection_paused
from constrained_spec.grammar.json_schema import compiler, schema_to_regex


@pytest.fixture(autouse=True)
def _collector_enabled() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_during_compile_and_resumed_after(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []
    run = compiler.Compiler.run

    def spying_run(self: compiler.Compiler) -> compiler.SchemaRegex:
        seen.append(gc.isenabled())
        return run(self)

    monkeypatch.setattr(compiler.Compiler, "run", spying_run)
    schema_to_regex({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert seen == [False]
    assert gc.isenabled()


def test_resumed_after_an_error() -> None:
    with pytest.raises(SchemaError):
        schema_to_regex('{"type": ')
    assert gc.isenabled()


def test_left_off_where_the_caller_turned_it_off() -> None:
    gc.disable()
    schema_to_regex({"type": "string"})
    assert not gc.isenabled()


def test_nested_and_concurrent_pauses_resume_once_all_end() -> None:
    inside = threading.Barrier(2)
    first_left = threading.Event()
    states: dict[str, bool] = {}

    def first() -> None:
        with cycle_collection_paused():
            inside.wait()
        first_left.set()

    def second() -> None:
        with cycle_collection_paused():
            inside.wait()
            first_left.wait(5)
            with cycle_collection_paused():  # nested
                pass
            states["after first left"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert states == {"after first left": False}
    assert gc.isenabled()
    assert cycle_gc._holders == 0
