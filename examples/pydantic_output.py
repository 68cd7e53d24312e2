"""A Pydantic model as the output type: the result is an instance, always valid.

    python examples/pydantic_output.py            # Qwen2.5-Coder 1.5B target, 0.5B draft
    python examples/pydantic_output.py --tiny     # offline smoke run with random tiny models
"""

from __future__ import annotations

import argparse
from typing import Literal

from _models import add_model_args, make_generator
from pydantic import BaseModel, Field


class Ingredient(BaseModel):
    name: str = Field(max_length=30)
    grams: int = Field(ge=1, le=1000)


class Recipe(BaseModel):
    title: str = Field(max_length=60)
    difficulty: Literal["easy", "medium", "hard"]
    minutes: int = Field(ge=1, le=240)
    ingredients: list[Ingredient] = Field(min_length=1, max_length=6)


def main() -> None:
    args = add_model_args(argparse.ArgumentParser(description=__doc__)).parse_args()
    generator = make_generator(args, num_draft_tokens=4)
    result = generator.run("Give me a simple pancake recipe.", Recipe, temperature=0.7, seed=1)
    recipe: Recipe = result.value
    print(recipe.model_dump_json(indent=2))
    stats = result.stats
    print(f"{stats.generated_tokens} tokens, {stats.target_forwards} target forwards, "
          f"acceptance {stats.acceptance_rate:.0%}")


if __name__ == "__main__":
    main()
