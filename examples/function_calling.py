"""Function calling: typed Python functions become tools, the model's call is dispatched.

    python examples/function_calling.py           # Qwen2.5-Coder 1.5B target, 0.5B draft
    python examples/function_calling.py --tiny    # offline smoke run with random tiny models

The call is generated under one JSON Schema built from the functions' signatures, so the name is
one of the tools and the arguments always validate; ``call_tool`` converts and dispatches them.
"""

from __future__ import annotations

import argparse
from typing import Annotated, Literal

from _models import add_model_args, make_generator
from pydantic import Field

from constrained_spec import TokenBudgetExceeded
from constrained_spec.tools import call_tool, generate_tool_calls


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """Current weather in a city.

    Args:
        city: The city's name, e.g. Paris.
        unit: The temperature unit.
    """
    return f"22 degrees {unit} and sunny in {city}"


def convert_currency(amount: Annotated[int, Field(ge=0, le=1_000_000)], source: Literal["EUR", "USD", "GBP"], target: Literal["EUR", "USD", "GBP"]) -> str:
    """Convert an amount of money between currencies.

    Args:
        amount: The amount, in whole units.
        source: The currency to convert from.
        target: The currency to convert to.
    """
    return f"{amount} {source} is about {amount} {target} (demo rates)"


def main() -> None:
    p = add_model_args(argparse.ArgumentParser(description=__doc__))
    p.add_argument("question", nargs="?", default="What's the weather like in Lisbon?")
    args = p.parse_args()
    generator = make_generator(args)
    tools = [get_weather, convert_currency]
    try:
        reply = generate_tool_calls(generator, args.question, tools, tool_choice="auto", temperature=0.0, max_new_tokens=200)
    except TokenBudgetExceeded as exc:  # e.g. a long free-text answer: nothing invalid is returned
        raise SystemExit(f"no complete reply: {exc}") from None
    if reply.content is not None:
        print("answer:", reply.content)
    for call in reply.tool_calls:
        print(f"call: {call.name}({call.arguments})")
        print("result:", call_tool(call, tools))


if __name__ == "__main__":
    main()
