"""Streams and asyncio: ``for chunk in gen.stream(...)`` prints the value as it grows, then
``await gen.arun(...)`` and two ``async for ... in gen.astream(...)`` at once, decoded as rows of one batch.

    python examples/stream_async.py            # Qwen2.5-Coder 1.5B target, 0.5B draft
    python examples/stream_async.py --tiny     # offline smoke run with random tiny models
"""

from __future__ import annotations

import argparse
import asyncio
import json

from _models import add_model_args, make_generator
from pydantic import BaseModel, Field


class Book(BaseModel):
    title: str = Field(max_length=40)
    author: str = Field(max_length=30)
    year: int = Field(ge=1450, le=2030)


async def both(generator) -> list[str]:
    async def one(prompt: str) -> str:
        text = ""
        async for chunk in generator.astream(prompt, Book):
            text += chunk.text
        return text

    return await asyncio.gather(one("Name a novel."), one("Name a poetry book."))


def main() -> None:
    args = add_model_args(argparse.ArgumentParser(description=__doc__)).parse_args()
    generator = make_generator(args, max_batch_size=2)
    text = ""
    for chunk in generator.stream("Name a classic book.", Book, max_new_tokens=120):
        text += chunk.text  # the delta; never half a character
        if chunk.text:
            print("partial:", json.dumps(chunk.partial))  # the JSON value so far
        if chunk.done:
            print("final:", chunk.result.value.model_dump_json())
    result = asyncio.run(generator.arun("Name a classic book.", Book, max_new_tokens=120))
    print("arun:", result.value.model_dump_json(), "same as the stream:", result.text == text)
    for row, row_text in enumerate(asyncio.run(both(generator))):
        print(f"astream row {row}:", row_text)


if __name__ == "__main__":
    main()
