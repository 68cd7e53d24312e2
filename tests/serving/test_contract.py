"""The server's OpenAPI document is its contract (marker ``contract``, not in the default run:
``python -m pytest -q -p no:randomly -m contract tests/serving/test_contract.py``).

* schemathesis, the same command a user runs (every phase: examples, coverage, fuzzing,
  stateful; ``--checks all``, and ``contract/contract_checks.py``'s check that a schema-valid
  request refused is refused for what it means, not its shape), against the tiny-pair server on a
  port: 0 failures, every phase run, the chat handler reached; and against a planted app (a 500, an
  undocumented status, a schema-valid body refused for its shape) that the same run must flag.
* a property-based fuzz of ``response_format`` schemas (hypothesis-jsonschema over a bounded slice
  of schema shapes, and mutations of real schemas from ../shared/data): each answered 200 with a
  value jsonschema accepts, or a 400 with a code that names why; ``/health`` answers meanwhile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("schemathesis", reason="schemathesis is not installed (pip install 'constrained-spec[test]')")
hypothesis_jsonschema = pytest.importorskip("hypothesis_jsonschema", reason="hypothesis-jsonschema is not installed (pip install 'constrained-spec[test]')")

import httpx  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from live_server import serving  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from constrained_spec.serving.app import ServerConfig, create_app  # noqa: E402

pytestmark = [pytest.mark.contract, pytest.mark.xdist_group("contract")]

HERE = Path(__file__).parent / "contract"
BENCH = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "jsonschemabench-dev" / "data"
#: test cases per operation and phase (60: about 1,400 cases in 90 s on 2 cores)
MAX_EXAMPLES = 60
SEED = 2
PHASES = ("examples", "coverage", "fuzzing", "stateful")
#: the 400 codes that name why a response_format is not served
NAMED_CODES = {"invalid_schema", "unsupported_schema_keyword", "compile_limit", "empty_language", "schema_too_large", "grammar_error",
               "constraint_error", "context_length_exceeded"}


def schemathesis_run(url: str, report: Path, max_examples: int = MAX_EXAMPLES, seed: int = SEED) -> tuple[dict, str, float]:
    """``schemathesis run`` (every phase, every check, this directory's config and hooks) against
    ``url``'s document: its JSON report, its output and the seconds it took."""
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(HERE / "schemathesis.toml"), "run", f"{url}/openapi.json",
               "--checks", "all", "--phases", ",".join(PHASES), "--max-examples", str(max_examples), "--seed", str(seed), "--workers", "1",
               "--request-timeout", "60", "--output-sanitize", "false", "--report", "json", "--report-json-path", str(report)]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "contract_checks", "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=report.parent)  # its .schemathesis cache there
    took = time.monotonic() - start
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(report.read_text()), done.stdout, took


def failures(report: dict) -> set[tuple[str, str]]:
    """(code, operation) of every failure the run found."""
    return {(f["code"], op) for f in report["failures"] for op in f["operations"]}


def test_schemathesis_finds_nothing_against_the_tiny_pair_server(tiny_generator, tmp_path):
    app = create_app(tiny_generator(max_new_tokens=16), ServerConfig(model_name="tiny", max_tokens_limit=16, max_particles=4))
    with serving(app) as url:
        report, out, took = schemathesis_run(url, tmp_path / "report.json")
    cases = report["test_cases"]
    print(f"schemathesis: {cases['generated']} cases, {len(report['failures'])} failures, {len(report['errors'])} errors, {took:.0f} s")
    assert report["failures"] == [] and report["errors"] == [] and report["exit_code"] == 0, out[-6000:]
    assert {name: phase["status"] for name, phase in report["phases"].items()} == dict.fromkeys(PHASES, "success")
    assert report["operations"]["tested"] == report["operations"]["total"] == 6
    chat = report["valid_rates"]["POST /v1/chat/completions"]
    assert sum(phase["accepted"] for phase in chat.values()) >= 100, chat  # the handler is reached, not refused at the door
    assert cases["generated"] >= 600 and took < 240


class PlantedBody(BaseModel):
    x: int


def planted_app() -> Any:
    """A small app with three planted faults: a 500, an undocumented 418, and a schema-valid body
    refused for its shape (a 400 ``invalid_message``)."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    @app.get("/boom")
    async def boom() -> dict:
        raise RuntimeError("planted")

    @app.get("/teapot")
    async def teapot() -> Any:
        return JSONResponse({"ok": False}, status_code=418)

    @app.post("/shape", responses={400: {"description": "refused"}})
    async def shape(body: PlantedBody) -> Any:
        return JSONResponse({"error": {"message": "planted", "type": "invalid_request_error", "param": "x", "code": "invalid_message"}},
                            status_code=400)

    return app


def test_the_same_run_flags_a_planted_500_and_an_undocumented_status(tmp_path):
    with serving(planted_app(), log_level="critical") as url:  # the planted 500 logs its traceback
        report, out, _ = schemathesis_run(url, tmp_path / "report.json", max_examples=5)
    found = failures(report)
    assert report["exit_code"] != 0
    assert ("ST101", "GET /boom") in found, out[-4000:]  # the 500
    assert ("ST103", "GET /teapot") in found, out[-4000:]  # the undocumented status
    assert ("ST901", "POST /shape") in found, out[-4000:]  # contract_checks.meaningful_rejection
    assert not any(op == "GET /teapot" for code, op in found if code == "ST101")  # each named for what it is


# -- response_format fuzz ------------------------------------------------------------------------

#: a bounded slice of JSON Schema: leaves with small bounds (and now and then a keyword this server
#: refuses by name), objects and arrays of them, two levels deep
LEAF = {"oneOf": [
    {"type": "object", "properties": {"type": {"const": "string"}, "maxLength": {"type": "integer", "minimum": 0, "maximum": 6},
                                      "minLength": {"type": "integer", "minimum": 0, "maximum": 2},
                                      "pattern": {"enum": ["^[a-z]*$", "^[0-9]+$"]}, "format": {"enum": ["date", "email", "uuid"]}},
     "required": ["type", "maxLength"], "additionalProperties": False},
    {"type": "object", "properties": {"type": {"enum": ["integer", "number"]}, "minimum": {"type": "integer", "minimum": -20, "maximum": 0},
                                      "maximum": {"type": "integer", "minimum": 0, "maximum": 20}, "multipleOf": {"enum": [2, 5]}},
     "required": ["type", "minimum", "maximum"], "additionalProperties": False},
    {"type": "object", "properties": {"type": {"enum": ["boolean", "null"]}}, "required": ["type"], "additionalProperties": False},
    {"type": "object", "properties": {"enum": {"type": "array", "items": {"type": ["string", "integer", "boolean", "null"], "maxLength": 4,
                                                                          "minimum": -9, "maximum": 9},
                                               "minItems": 1, "maxItems": 3, "uniqueItems": True}},
     "required": ["enum"], "additionalProperties": False},
    {"type": "object", "properties": {"const": {"type": ["string", "integer", "boolean"], "maxLength": 4, "minimum": -9, "maximum": 9}},
     "required": ["const"], "additionalProperties": False},
]}
NAMES = {"type": "string", "pattern": "^[a-z]{1,5}$"}
#: hypothesis without shrinking: a failing example is reported as found (each one costs generations)
NO_SHRINK = (Phase.explicit, Phase.generate)
#: the token budget of each fuzz request
MAX_TOKENS = 96


def _container(item: dict) -> dict:
    return {"oneOf": [
        {"type": "object", "properties": {"type": {"const": "object"}, "properties": {"type": "object", "propertyNames": NAMES, "maxProperties": 3,
                                                                                         "additionalProperties": item},
                                          "additionalProperties": {"const": False}, "required": {"const": []}},
         "required": ["type", "properties", "additionalProperties"], "additionalProperties": False},
        {"type": "object", "properties": {"type": {"const": "array"}, "items": item, "minItems": {"enum": [0, 1]},
                                          "maxItems": {"type": "integer", "minimum": 1, "maximum": 3}, "uniqueItems": {"const": True}},
         "required": ["type", "items", "maxItems"], "additionalProperties": False},
        {"type": "object", "properties": {"anyOf": {"type": "array", "items": item, "minItems": 1, "maxItems": 3}},
         "required": ["anyOf"], "additionalProperties": False},
    ]}


SHAPES = {"anyOf": [LEAF, _container(LEAF), _container({"anyOf": [LEAF, _container(LEAF)]})]}


def _bounded(schema: Any) -> Any:
    """``schema`` with every string and array bounded (maxLength 8, maxItems 2), so a tiny random
    model's value ends well within the token budget."""
    if isinstance(schema, list):
        return [_bounded(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _bounded(v) for k, v in schema.items()}
    types = out.get("type") if isinstance(out.get("type"), list) else [out.get("type")]
    if "string" in types and "enum" not in out and "const" not in out:
        out["maxLength"] = min(int(out.get("maxLength", 8)), 8)
        out["minLength"] = min(int(out.get("minLength", 0)), out["maxLength"])
    if "array" in types:
        out["maxItems"] = min(int(out.get("maxItems", 2)), 2)
        out["minItems"] = min(int(out.get("minItems", 0)), out["maxItems"])
    return out


def real_schemas(count: int = 12) -> list[dict]:
    """``count`` small real schemas (Glaiveai2K function signatures), bounded; skips when the data is absent."""
    if not BENCH.is_dir():
        pytest.skip(f"the JSON Schema bench is absent ({BENCH})")
    found = []
    for path in sorted(BENCH.glob("Glaiveai2K---*.json")):
        schema = json.loads(path.read_text())["schema"]
        if len(json.dumps(schema)) < 500:
            found.append(_bounded(schema))
        if len(found) == count:
            break
    return found


def _mutations(schema: dict) -> st.SearchStrategy[dict]:
    """``schema`` as it is, closed, with nothing required, or as the items of a short array."""
    closed = {**schema, "additionalProperties": False}
    loose = {k: v for k, v in schema.items() if k != "required"}
    listed = {"type": "array", "items": schema, "maxItems": 2}
    return st.sampled_from([schema, closed, loose, listed])


@contextmanager
def health_watch(url: str) -> Iterator[list[tuple[int, float]]]:
    """``GET /health`` every 0.2 s while the block runs: (status, seconds) of each answer."""
    seen: list[tuple[int, float]] = []
    stop = threading.Event()

    def poll() -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            while not stop.is_set():
                start = time.monotonic()
                try:
                    status = client.get("/health").status_code
                except httpx.HTTPError:
                    status = 0
                seen.append((status, time.monotonic() - start))
                stop.wait(0.2)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(15)


def judge(client: httpx.Client, schema: Any, outcomes: list[str]) -> None:
    """One request with ``schema``: a 200 whose value jsonschema accepts, or a 400 naming why. A
    200 cut by its token budget (``finish_reason: "length"``: a number's digits are unbounded, and
    a tiny random model may not end them) must have spent the whole budget."""
    body = {"messages": [{"role": "user", "content": "Give a value."}], "seed": 1, "max_tokens": MAX_TOKENS,
            "response_format": {"type": "json_schema", "json_schema": {"name": "fuzz", "schema": schema}}}
    r = client.post("/v1/chat/completions", json=body)
    if r.status_code == 200:
        answer = r.json()
        choice = answer["choices"][0]
        if choice["finish_reason"] == "length":
            assert answer["usage"]["completion_tokens"] == MAX_TOKENS, (schema, answer)
            outcomes.append("length")
            return
        assert choice["finish_reason"] == "stop", (schema, choice)
        value = json.loads(choice["message"]["content"])
        jsonschema.validators.validator_for(schema)(schema).validate(value)
        outcomes.append("valid")
        return
    assert r.status_code == 400, (schema, r.status_code, r.text)
    error = r.json()["error"]
    assert error["code"] in NAMED_CODES and error["message"], (schema, error)
    outcomes.append(error["code"])


def test_response_format_fuzz_answers_a_valid_value_or_a_named_400(tiny_generator):
    app = create_app(tiny_generator(max_new_tokens=200), ServerConfig(model_name="tiny"))
    outcomes: list[str] = []
    real = real_schemas()
    with serving(app) as url, health_watch(url) as health, httpx.Client(base_url=url, timeout=120) as client:
        start = time.monotonic()

        @settings(max_examples=60, deadline=None, derandomize=True, database=None, phases=NO_SHRINK,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
        @given(hypothesis_jsonschema.from_schema(SHAPES))
        def generated(schema: dict) -> None:
            judge(client, schema, outcomes)

        @settings(max_examples=24, deadline=None, derandomize=True, database=None, phases=NO_SHRINK, suppress_health_check=[HealthCheck.too_slow])
        @given(st.sampled_from(real).flatmap(_mutations))
        def mutated(schema: dict) -> None:
            judge(client, schema, outcomes)

        generated()
        mutated()
        took = time.monotonic() - start
    print(f"response_format fuzz: {len(outcomes)} requests in {took:.0f} s: {sorted((o, outcomes.count(o)) for o in set(outcomes))}")
    assert outcomes.count("valid") >= len(outcomes) // 2 and outcomes.count("length") <= len(outcomes) // 5  # mostly served whole
    assert health and all(status == 200 for status, _ in health), health
    assert max(seconds for _, seconds in health) < 5
    assert took < 150
