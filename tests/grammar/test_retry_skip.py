"""The size-cap retries skip a try that differs from a failed one only in options that one never read
(``compiler._OptionsRead``): the answer is the same as trying every retry, with fewer compiles.

Oracle: the same schema compiled with the skipping turned off (every planned try run), compared
field by field, plus ``jsonschema`` on values the regex full-matches. Negative control: a skip rule
that forgets that ``any_value_depth`` was read skips the try that fits, and the comparison sees it.
"""

from __future__ import annotations

import json
import re
from typing import Union

import jsonschema
import pytest

from constrained_spec.errors import CompileLimitError
from constrained_spec.grammar.json_schema import SchemaOptions, SchemaRegex, compiler, schema_to_regex


def _free_form_record(n: int) -> dict:
    """An object of ``n`` required free-form properties (``any_value_depth`` read, ``linear_objects``
    not: no all-optional object, no ``$ref``)."""
    names = [f"p{i}" for i in range(n)]
    return {"type": "object", "properties": {k: {} for k in names}, "required": names,
            "additionalProperties": False}


#: (schema, cap): the first compile and the depth-1 try pass the cap, the depth-0 try fits
CASES = [(_free_form_record(3), 1_500), (_free_form_record(5), 2_500)]


def _runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, bool]]:
    """Record the (any_value_depth, max_recursion_depth, linear_objects) of every compile."""
    seen: list[tuple[int, int, bool]] = []
    run = compiler.Compiler.run

    def counted(self: compiler.Compiler) -> SchemaRegex:
        seen.append((self.opts.any_value_depth, self.opts.max_recursion_depth, self.opts.linear_objects))
        return run(self)

    monkeypatch.setattr(compiler.Compiler, "run", counted)
    return seen


def _answer(schema: dict, cap: int) -> Union[SchemaRegex, tuple[str, str]]:
    try:
        return schema_to_regex(schema, SchemaOptions(max_regex_chars=cap, time_budget_s=None))
    except CompileLimitError as e:
        return ("refused", str(e))


@pytest.mark.parametrize("schema,cap", CASES)
def test_skipping_gives_the_answer_of_every_try(schema: dict, cap: int, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(monkeypatch)
    skipped = _answer(schema, cap)
    n_skipping = len(runs)
    monkeypatch.setattr(compiler._OptionsRead, "covers", lambda self, ad, rd, lin: False)
    runs.clear()
    every = _answer(schema, cap)
    assert skipped == every
    assert n_skipping < len(runs)  # tries were skipped (the test is not vacuous)
    assert not isinstance(skipped, tuple) and skipped.regex  # the depth-0 try fits: a regex came back
    for value in [{"p0": 1, "p1": "x", "p2": None}, {"p0": False, "p1": -2.5, "p2": "{}"}]:  # depth 0: scalars
        value.update({f"p{i}": 0 for i in range(3, len(schema["required"]))})
        text = json.dumps(value, separators=(",", ":"))
        assert re.fullmatch(skipped.regex, text) and jsonschema.validate(value, schema) is None


def test_a_skip_that_forgets_a_read_option_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: ``any_value_depth`` taken as never read skips the depth-0 try that fits."""
    schema, cap = CASES[0]
    right = _answer(schema, cap)
    read = compiler._options_read
    monkeypatch.setattr(compiler, "_options_read",
                        lambda comp: compiler._OptionsRead(None, read(comp).max_recursion_depth, None))
    assert _answer(schema, cap) != right
