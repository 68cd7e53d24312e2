"""``instructor`` against ``constrained-spec serve``, unchanged: a Pydantic model in, a Pydantic model
out, on the first try (the server's constraint makes instructor's validation retries unnecessary).

    pip install instructor
    constrained-spec serve --port 8000
    python examples/instructor_client.py --base-url http://127.0.0.1:8000/v1

``--in-process`` skips the server process and drives the app in process with random tiny models
(offline). Both of instructor's OpenAI modes are shown: ``TOOLS`` (its default: a forced function
call) and ``JSON_SCHEMA`` (``response_format`` json_schema).
"""

from __future__ import annotations

import argparse
import os
from typing import Literal

from pydantic import BaseModel, Field


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int = Field(ge=0, le=130)
    role: Literal["engineer", "artist", "doctor"]


def openai_client(args: argparse.Namespace):
    """An ``openai.OpenAI`` client for the server (or, ``--in-process``, for the app on tiny models)."""
    from openai import OpenAI

    if not args.in_process:
        return OpenAI(base_url=args.base_url, api_key=args.api_key)
    from _models import make_generator
    from fastapi.testclient import TestClient

    from constrained_spec.serving import create_app

    http = TestClient(create_app(make_generator(argparse.Namespace(tiny=True))))
    return OpenAI(base_url="http://testserver/v1", api_key=args.api_key, http_client=http)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", default=os.environ.get("CONSTRAINED_SPEC_API_KEY", "unused"))
    p.add_argument("--in-process", action="store_true", help="no server: run the app in process on random tiny models")
    args = p.parse_args()
    import instructor

    client = openai_client(args)
    model = client.models.list().data[0].id
    for mode in (instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA):
        structured = instructor.from_openai(client, mode=mode)
        person, completion = structured.chat.completions.create_with_completion(
            model=model, response_model=Person, max_retries=0, seed=1,  # no retry is ever needed
            messages=[{"role": "user", "content": "Invent a person."}])
        assert isinstance(person, Person)
        print(f"{mode.name}: {person.model_dump_json()} ({completion.usage.completion_tokens} tokens)")


if __name__ == "__main__":
    main()
