"""Every Lark grammar in ``grammars/`` as an output type: JSON with unbounded nesting, arithmetic,
a SQL SELECT subset and a function-call DSL.

    python examples/cfg_grammars.py            # Qwen2.5-Coder 1.5B target, 0.5B draft
    python examples/cfg_grammars.py --tiny     # offline smoke run with random tiny models

Each output is masked token by token by the grammar (llguidance's Lark) and parsed by lark at the
end (``result.tree``); speculative decoding leaves it exactly what the target alone would write.
No grammar is appended to the prompt (a schema is, for JSON Schema outputs), so each prompt says
what to write: told only "as a function call", the 1.5B model starts with prose, which the grammar
squeezes into one long identifier until the token budget runs out.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _models import add_model_args, make_generator

from constrained_spec import CFG, TokenBudgetExceeded

GRAMMARS = Path(__file__).resolve().parents[1] / "grammars"

PROMPTS = {
    "json": "Write a JSON object for a book with a title, an author and a list of two chapter titles. JSON:",
    "arithmetic": "Write only an arithmetic expression for the cost of 3 pens at 1.25 and 2 pads at 4.5. Expression:",
    "sql_select": "Table people(name, age, city). Write one SQL query: the names of people over 30 in Paris. SQL:",
    "function_call": ("Reply with only a function call, no prose, in the form name(arg=value). Example: search(query=\"cats\", limit=2)\n"
                      "Task: get the weather in Paris for the next 3 days with get_weather(city, days)."),
}


def main() -> None:
    p = add_model_args(argparse.ArgumentParser(description=__doc__))
    p.add_argument("--max-new-tokens", type=int, default=96)
    args = p.parse_args()
    generator = make_generator(args)
    for name, prompt in PROMPTS.items():
        grammar = CFG.from_file(GRAMMARS / f"{name}.lark")
        try:
            result = generator.run(prompt, grammar, max_new_tokens=args.max_new_tokens)
        except TokenBudgetExceeded:  # an unfinished text is never returned as if it were complete
            print(f"{name}: no complete output within {args.max_new_tokens} tokens")
            continue
        s = result.stats
        print(f"{name}: {result.text!r}  (lark tree root {str(result.tree.data)!r}; {s.generated_tokens} tokens, "
              f"{s.target_forwards} target forwards)")


if __name__ == "__main__":
    main()
