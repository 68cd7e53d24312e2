"""docs/migrating.md: every block marked ``# constrained-spec`` runs, in order, on tiny random models
(the peers' blocks are not run: their packages are not this project's). The names the blocks use
(model, draft, tokenizer, inputs, prompt, schema, Person) are set up here; the values the blocks
produce are checked with jsonschema, re and lark."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import torch

DOC = Path(__file__).resolve().parents[1] / "docs" / "migrating.md"
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"], "additionalProperties": False}


def our_blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)
    return [b for b in blocks if b.startswith("# constrained-spec\n")]


def test_the_doc_has_a_block_per_peer():
    text = DOC.read_text(encoding="utf-8")
    for peer in ("## outlines", "## xgrammar", "## llguidance", "## vLLM", "## llama.cpp"):
        assert peer in text
    assert len(our_blocks()) == 5


def test_our_blocks_run_and_their_values_validate(gpt2_tokenizer, tmp_path, monkeypatch):
    from pydantic import BaseModel, Field
    from tiny_models import tiny_llama

    monkeypatch.setenv("CONSTRAINED_SPEC_CACHE", str(tmp_path))

    class Person(BaseModel):
        name: str = Field(max_length=8)
        age: int = Field(ge=0, le=99)

    model, draft = tiny_llama(50257, seed=1), tiny_llama(50257, seed=2)
    for m in (model, draft):  # the tokenizer's EOS, as a real model's config names it
        m.generation_config.eos_token_id = m.generation_config.pad_token_id = gpt2_tokenizer.eos_token_id
        m.generation_config.bos_token_id = None
    namespace = {"model": model, "draft": draft, "tokenizer": gpt2_tokenizer, "Person": Person, "schema": SCHEMA,
                 "prompt": "Answer:", "inputs": gpt2_tokenizer(["Answer:"], return_tensors="pt"), "print": lambda *a, **k: None}
    for block in our_blocks():
        exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the doc's own code
    assert isinstance(namespace["person"], (Person, dict))
    jsonschema.validate(namespace["person"] if isinstance(namespace["person"], dict) else namespace["person"].model_dump(), SCHEMA)
    assert re.fullmatch(r"[A-Z]{3}-[0-9]{4}", namespace["code"])
    assert re.fullmatch(r"(yes|no) [0-9]+", namespace["answer"])
    jsonschema.validate(namespace["value"], SCHEMA)
    assert isinstance(namespace["allowed"], torch.Tensor) and namespace["allowed"].dtype == torch.bool
    assert len(namespace["rows"]) == 2


def test_vllm_json_parameters_are_refused_by_name(tiny_generator):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from constrained_spec.serving.app import ServerConfig, create_app

    with TestClient(create_app(tiny_generator(draft=False), ServerConfig(model_name="tiny"))) as client:
        for field, value, hint in (("guided_json", SCHEMA, "response_format"), ("guided_choice", ["a", "b"], "grammar")):
            r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], field: value})
            assert r.status_code == 400 and field in r.json()["error"]["message"] and hint in r.json()["error"]["message"], r.text
