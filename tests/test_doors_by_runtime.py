"""Every public door on every runtime: the feature-by-runtime matrix.

Each door (``generate_json``, a Pydantic output, a regex, a Lark grammar, ``stream``, ``arun``,
``run_batch``, ``alignment="smc"`` alone and as batch rows, ``response_format`` and tools through the
server, the CLI's ``generate``) runs on the torch tiny pair (two random Llamas) and on the llama.cpp
tiny pair (two random-weight GGUF files read by llama.cpp as stored), both over GPT-2's vocabulary.
Each is checked by an oracle that is not the code under test (``jsonschema``, ``re.fullmatch``,
``lark``, pydantic's own validation) and, where greedy, for token-for-token equality with target-only
decoding on the same runtime. Under ``make test`` a missing llama.cpp binding fails these tests
instead of skipping them (``conftest.require_llamacpp``).
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cli_support import main_in_process
from pydantic import BaseModel, Field

from constrained_spec.grammar import CFG, Regex

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
PATTERN = r"(yes|no|maybe)-[0-9]{2}"
LARK = 'start: pair ("," pair)*\npair: WORD "=" NUMBER\nWORD: /[a-z]{1,6}/\nNUMBER: /[0-9]{1,3}/\n'
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}, "b": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["a", "b"],
    "additionalProperties": False}}}]


class Person(BaseModel):
    name: str = Field(max_length=12)
    age: int = Field(ge=0, le=120)


@dataclass
class Door:
    """One runtime's generators: speculative, target-only, batching (3 rows); the model files or folders."""

    runtime: str
    spec: Any
    alone: Any
    batched: Any
    files: list[str]
    cache: Path


@pytest.fixture(scope="module", params=["torch", "llamacpp"])
def door(request, gpt2_tokenizer, tmp_path_factory) -> Door:
    from constrained_spec.api import Generator

    cache = tmp_path_factory.mktemp(f"doors-{request.param}")
    options: dict[str, Any] = dict(tokenizer=gpt2_tokenizer, progress=False, cache_dir=cache, draft_plan="always", calibrate_plan=False)
    if request.param == "torch":
        from tiny_models import tiny_llama

        files = request.getfixturevalue("model_dirs")
        target, draft = tiny_llama(50257, seed=1), tiny_llama(50257, seed=2)
    else:
        files = [str(p) for p in request.getfixturevalue("tiny_ggufs")]
        target, draft = files
        options["runtime"] = "llamacpp"
    return Door(request.param, Generator(target, draft, **options), Generator(target, None, **options),
                Generator(target, draft, max_batch_size=3, batch_max_tokens=256, prefix_cache_mb=0, **options), list(files), cache)


def test_the_generators_run_on_their_runtime(door):
    expected = "LlamaCppModel" if door.runtime == "llamacpp" else "HFModel"
    assert type(door.spec.target).__name__ == expected and type(door.spec.draft).__name__ == expected


def test_generate_json_top_level(door, monkeypatch):
    from constrained_spec import api

    monkeypatch.setenv("CONSTRAINED_SPEC_CACHE", str(door.cache))
    value = api.generate_json(SCHEMA, "A person:", model=door.files[0], draft=door.files[1], max_new_tokens=60)
    jsonschema.validate(value, SCHEMA)
    gen = api._default_generator(door.files[0], door.files[1])
    assert type(gen.target).__name__ == ("LlamaCppModel" if door.runtime == "llamacpp" else "HFModel")


def test_pydantic_output_greedy_equals_target_only(door):
    got = door.spec.run("A person:", Person, max_new_tokens=60)
    assert isinstance(got.value, Person)
    Person.model_validate_json(got.text)  # pydantic's own check of the text
    assert got.token_ids == door.alone.run("A person:", Person, max_new_tokens=60).token_ids


def test_regex_greedy_equals_target_only(door):
    got = door.spec.run("Answer:", Regex(PATTERN), max_new_tokens=20)
    assert re.fullmatch(PATTERN, got.text), got.text
    assert got.token_ids == door.alone.run("Answer:", Regex(PATTERN), max_new_tokens=20).token_ids


def test_lark_grammar_parses(door):
    from lark import Lark

    got = door.spec.run("Pairs:", CFG(LARK), max_new_tokens=40, temperature=1.0, seed=2)
    Lark(LARK).parse(got.text)  # lark itself, not the engine's matcher


def test_stream_deltas_join_to_the_result(door):
    chunks = list(door.spec.stream("A person:", SCHEMA, max_new_tokens=60))
    assert chunks[-1].done and chunks[-1].result is not None
    result = chunks[-1].result
    assert "".join(c.text for c in chunks) == result.text
    jsonschema.validate(json.loads(result.text), SCHEMA)


def test_arun_equals_run(door):
    got = asyncio.run(door.spec.arun("Answer:", Regex(PATTERN), max_new_tokens=20))
    assert got.token_ids == door.spec.run("Answer:", Regex(PATTERN), max_new_tokens=20).token_ids


def test_run_batch_rows_equal_target_only(door):
    requests = [dict(prompt=f"Person {i}: " + "word " * i, output_type=SCHEMA, max_new_tokens=60) for i in range(4)]
    got = door.batched.run_batch(requests)
    for request, g in zip(requests, got):
        jsonschema.validate(g.value, SCHEMA)
        assert g.token_ids == door.alone.run(**request).token_ids


@pytest.mark.parametrize("which", ["alone", "batch-rows"])
def test_smc_gives_a_valid_sample(door, which):
    gen = door.spec if which == "alone" else door.batched
    got = gen.run("Answer:", Regex(PATTERN), alignment="smc", particles=3, temperature=1.0, seed=5, max_new_tokens=20)
    assert re.fullmatch(PATTERN, got.text) and got.smc is not None and len(got.smc.particles) == 3
    for p in got.smc.particles:
        assert p.state != "done" or re.fullmatch(PATTERN, p.text)


def test_server_response_format_and_tools(door):
    from fastapi.testclient import TestClient

    from constrained_spec.serving.app import ServerConfig, create_app

    with TestClient(create_app(door.spec, ServerConfig(model_name="tiny"))) as client:
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "A person."}], "max_tokens": 60, "seed": 1,
                                                       "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}})
        assert r.status_code == 200, r.text
        jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), SCHEMA)
        r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Add 2 and 3."}], "tools": TOOLS,
                                                       "tool_choice": "required", "max_tokens": 80, "seed": 1})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["finish_reason"] == "tool_calls", r.text
        calls = r.json()["choices"][0]["message"]["tool_calls"]
        assert calls and all(c["function"]["name"] == "add" for c in calls)
        for c in calls:
            jsonschema.validate(json.loads(c["function"]["arguments"]), TOOLS[0]["function"]["parameters"])


def test_cli_generate(door, tmp_path, capsys, monkeypatch):
    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(SCHEMA))
    extra = ["--runtime", "llamacpp"] if door.runtime == "llamacpp" else ["--dtype", "fp32"]
    code, out, err = main_in_process(capsys, monkeypatch, door.cache, "generate", "--schema", str(schema), "--prompt", "A person:",
                                     "--model", door.files[0], "--draft", door.files[1], "--max-new-tokens", "60", *extra)
    assert code == 0, err[-2000:]
    jsonschema.validate(json.loads(out), SCHEMA)
