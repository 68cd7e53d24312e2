"""LangChain's ``ChatOpenAI(...).with_structured_output(Model)`` against ``constrained-spec serve``,
unchanged: the default method (``json_schema``: OpenAI's ``response_format``) and ``function_calling``.

    pip install langchain-openai
    constrained-spec serve --port 8000
    python examples/langchain_client.py --base-url http://127.0.0.1:8000/v1

``--in-process`` skips the server process and drives the app in process with random tiny models
(offline).
"""

from __future__ import annotations

import argparse
import os
from typing import Literal

from pydantic import BaseModel, Field


class Movie(BaseModel):
    title: str = Field(max_length=40)
    year: int = Field(ge=1900, le=2030)
    genre: Literal["drama", "comedy", "horror"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", default=os.environ.get("CONSTRAINED_SPEC_API_KEY", "unused"))
    p.add_argument("--in-process", action="store_true", help="no server: run the app in process on random tiny models")
    args = p.parse_args()
    from langchain_openai import ChatOpenAI

    options: dict = {"base_url": args.base_url}
    if args.in_process:
        from _models import make_generator
        from fastapi.testclient import TestClient

        from constrained_spec.serving import create_app

        options = {"base_url": "http://testserver/v1", "http_client": TestClient(create_app(make_generator(argparse.Namespace(tiny=True))))}
        model = options["http_client"].get("/v1/models").json()["data"][0]["id"]
    else:
        import httpx

        model = httpx.get(args.base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {args.api_key}"}).json()["data"][0]["id"]
    llm = ChatOpenAI(model=model, api_key=args.api_key, temperature=0, max_retries=0, **options)
    for method in ("json_schema", "function_calling"):
        movie = llm.with_structured_output(Movie, method=method).invoke("Name a movie.")
        assert isinstance(movie, Movie)
        print(f"{method}: {movie.model_dump_json()}")


if __name__ == "__main__":
    main()
