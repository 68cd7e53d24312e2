"""A context-free output type: a SQL query in the language of ``grammars/sql_select.lark``.

    python examples/cfg_sql.py            # Qwen2.5-Coder 1.5B target, 0.5B draft
    python examples/cfg_sql.py --tiny     # offline smoke run with random tiny models

With the default models this is one call::

    import constrained_spec
    sql = constrained_spec.generate(prompt, constrained_spec.CFG.from_file("grammars/sql_select.lark"))

Here the same call goes through a ``Generator`` (so ``--tiny`` works) and ``run``, which also
returns the decoding stats and lark's parse tree of the query. Every token is masked by the
grammar (llguidance), and lark parses the finished text: the query is always in the grammar's
language. The grammar is syntax only: names are not checked against any database schema.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _models import add_model_args, make_generator

from constrained_spec import CFG, TokenBudgetExceeded

GRAMMAR = Path(__file__).resolve().parents[1] / "grammars" / "sql_select.lark"

PROMPT = """Tables:
  customers(id, name, city, country)
  orders(id, customer_id, total, created_at)
Write one SQL query: the 5 cities with the most orders in France, with their order counts.
SQL:"""


def main() -> None:
    p = add_model_args(argparse.ArgumentParser(description=__doc__))
    p.add_argument("question", nargs="?", default=PROMPT, help="the prompt (default: a question over two tables)")
    args = p.parse_args()
    generator = make_generator(args)
    sql = CFG.from_file(GRAMMAR)
    try:
        result = generator.run(args.question, sql, temperature=0.0, max_new_tokens=120)
    except TokenBudgetExceeded as exc:  # a query longer than the budget: nothing invalid is returned
        raise SystemExit(f"no complete query: {exc}") from None
    print("sql:", result.text)
    print("tree root:", result.tree.data, "with", len(list(result.tree.iter_subtrees())), "subtrees")
    stats = result.stats
    print(f"{stats.generated_tokens} tokens, {stats.target_forwards} target forwards, acceptance {stats.acceptance_rate:.0%}")


if __name__ == "__main__":
    main()
