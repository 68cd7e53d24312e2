"""The CFG workload of ``python benchmarks/bench.py --workload cfg``: prompts whose output is
constrained by a Lark grammar from ``grammars/`` (context-free: nesting, SQL, arithmetic).

Each entry's ``schema`` is a :class:`constrained_spec.CFG`; validity is lark's parse of the output.
The prompts say what to write, since no schema hint is appended for a grammar. Written once, before
any measurement, and not tuned on.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

from constrained_spec import CFG

GRAMMAR_DIR = Path(__file__).resolve().parents[1] / "grammars"


def _prompt_class():
    spec = importlib.util.spec_from_file_location("bench_workload_base", Path(__file__).with_name("workload.py"))
    module = sys.modules.get("bench_workload_base")
    if module is None:
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules["bench_workload_base"] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.Prompt


Prompt = _prompt_class()

PROMPTS = [
    Prompt("sql-select", "sql_select", "extraction",
           "Write one SQL SELECT query (no explanation) over the table orders(id, customer_id, total, status, "
           "created_at) that returns each customer_id with the number of shipped orders and their summed total, "
           "only for customers with more than 3 shipped orders, largest total first, at most 10 rows."),
    Prompt("json-nested", "json", "generative",
           "Write a JSON document (no explanation) describing a small library with two shelves; each shelf has "
           "a label and a list of books, each book with a title, an author, a year and a list of tags."),
    Prompt("arith-expr", "arithmetic", "extraction",
           "Write only an arithmetic expression (numbers, + - * / and parentheses; no words, no '=') that computes "
           "the total cost of 3 notebooks at 4.25 each and 2 pens at 1.5 each, minus a discount of 2."),
]


def load_workload(n: int | None = None) -> list:
    """The first ``n`` prompts with their grammars (``schema``: a CFG)."""
    chosen = PROMPTS if n is None else PROMPTS[: max(0, n)]
    return [dataclasses.replace(p, schema=CFG.from_file(GRAMMAR_DIR / f"{p.schema_name}.lark")) for p in chosen]
