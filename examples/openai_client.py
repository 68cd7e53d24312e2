"""Talk to ``constrained-spec serve`` with OpenAI-style requests: a JSON Schema reply, then a tool call.

Start a server (its extra: ``pip install 'constrained-spec[server]'``), then run this script:

    constrained-spec serve --port 8000
    python examples/openai_client.py --base-url http://127.0.0.1:8000/v1

Uses the ``openai`` package when it is installed, plain ``httpx`` otherwise; ``--api-key KEY`` (default
``$CONSTRAINED_SPEC_API_KEY``) for a server started with a key. ``--in-process`` skips the server
process and drives the app in process with random tiny models (offline).
"""

from __future__ import annotations

import argparse
import json
import os

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 40}, "age": {"type": "integer", "minimum": 0, "maximum": 130}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}}, "required": ["city"]}}}


def requests() -> list[dict]:
    return [
        {"messages": [{"role": "user", "content": "Invent a person."}], "seed": 1,
         "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}},
        {"messages": [{"role": "user", "content": "What's the weather in Oslo?"}], "seed": 1,
         "tools": [WEATHER_TOOL], "tool_choice": "required"},
    ]


def show(body: dict) -> None:
    if "error" in body:
        print("error:", body["error"]["message"])
        return
    message = body["choices"][0]["message"]
    for call in message.get("tool_calls") or []:
        print(f"tool call: {call['function']['name']}({call['function']['arguments']})")
    if message.get("content") is not None:
        print("content:", message["content"])
    stats = body.get("constrained_spec", {}).get("stats", {})
    print(f"  usage {body.get('usage')}, acceptance {stats.get('acceptance_rate')}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--api-key", default=os.environ.get("CONSTRAINED_SPEC_API_KEY", "unused"),
                   help="sent as 'Authorization: Bearer KEY' for a server started with --api-key "
                        "(default: $CONSTRAINED_SPEC_API_KEY, the server's variable)")
    p.add_argument("--in-process", action="store_true", help="no server: run the app in process on random tiny models")
    args = p.parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"}
    if args.in_process:
        from _models import make_generator
        from fastapi.testclient import TestClient

        from constrained_spec.serving import create_app

        with TestClient(create_app(make_generator(argparse.Namespace(tiny=True))), headers=headers) as client:
            model = client.get("/v1/models").json()["data"][0]["id"]
            for req in requests():
                show(client.post("/v1/chat/completions", json={"model": model, **req}).json())
        return
    try:
        from openai import OpenAI
    except ImportError:
        import httpx

        base = args.base_url.rstrip("/")
        model = httpx.get(base + "/models", headers=headers, timeout=60).json()["data"][0]["id"]
        for req in requests():
            show(httpx.post(base + "/chat/completions", json={"model": model, **req}, headers=headers, timeout=600).json())
        return
    client = OpenAI(base_url=args.base_url, api_key=args.api_key)
    model = client.models.list().data[0].id  # the id the server reports for its model
    for req in requests():
        completion = client.chat.completions.create(model=model, **req)
        show(completion.model_dump())
        if completion.choices[0].message.content:
            print("  parsed:", json.loads(completion.choices[0].message.content))


if __name__ == "__main__":
    main()
