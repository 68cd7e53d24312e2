"""The examples, run as docs/examples.md shows them, on random tiny models: their printed output has the
documented shape, and every value in it validates against a JSON Schema written here (jsonschema is
the oracle, not the library's compiler).

Each example runs in its own process with ``CONSTRAINED_SPEC_EXAMPLE_MODELS=tiny`` (read by
``examples/_models.py`` only). The run through a real HTTP server with the ``openai`` client is
``slow``; ``make demo``'s command on the real pair is ``real_models``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

RECIPE_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 60},
        "difficulty": {"enum": ["easy", "medium", "hard"]},
        "minutes": {"type": "integer", "minimum": 1, "maximum": 240},
        "ingredients": {"type": "array", "minItems": 1, "maxItems": 6, "items": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 30},
                           "grams": {"type": "integer", "minimum": 1, "maximum": 1000}},
            "required": ["name", "grams"], "additionalProperties": False}},
    },
    "required": ["title", "difficulty", "minutes", "ingredients"],
    "additionalProperties": False,
}
CURRENCY = {"enum": ["EUR", "USD", "GBP"]}
TOOL_ARGS = {
    "get_weather": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
                    "required": ["city"], "additionalProperties": False},
    "convert_currency": {"type": "object", "properties": {"amount": {"type": "integer", "minimum": 0, "maximum": 1_000_000},
                                                          "source": CURRENCY, "target": CURRENCY},
                         "required": ["amount", "source", "target"], "additionalProperties": False},
}
PERSON_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 40},
                                                  "age": {"type": "integer", "minimum": 0, "maximum": 130}},
                 "required": ["name", "age"], "additionalProperties": False}
CITY_ARGS = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}}, "required": ["city"]}


def example_env() -> dict[str, str]:
    """The environment the examples run in: tiny models, offline, one torch thread."""
    env = dict(os.environ, CONSTRAINED_SPEC_EXAMPLE_MODELS="tiny", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONIOENCODING="utf-8")
    env.pop("CONSTRAINED_SPEC_API_KEY", None)
    # this checkout's package first (an installed copy elsewhere must not stand in for it)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


def run_example(*argv: str, timeout: float = 300) -> list[str]:
    """Run ``python examples/<argv>`` from the repository root; its stdout lines (exit 0 asserted)."""
    proc = subprocess.run([sys.executable, *argv], check=False, cwd=ROOT, env=example_env(), capture_output=True,
                          text=True, encoding="utf-8", timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    return proc.stdout.splitlines()


def check_usage(line: str) -> None:
    """``  usage {...}, acceptance X``: token counts that add up, an acceptance in [0, 1] or None."""
    m = re.fullmatch(r"  usage (\{.*\}), acceptance (None|[0-9.]+)", line)
    assert m, line
    usage = ast.literal_eval(m.group(1))
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0, usage
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    assert m.group(2) == "None" or 0.0 <= float(m.group(2)) <= 1.0, line


def check_openai_client_output(lines: list[str]) -> None:
    """Two replies: the json_schema one (content that validates), then one or more get_weather calls
    (parallel tool calls are on by default, as in OpenAI's API)."""
    assert not [line for line in lines if line.startswith("error:")], lines
    content = [i for i, line in enumerate(lines) if line.startswith("content: ")]
    calls = [i for i, line in enumerate(lines) if line.startswith("tool call: ")]
    assert len(content) == 1 and calls and content[0] < calls[0], lines
    jsonschema.validate(json.loads(lines[content[0]].removeprefix("content: ")), PERSON_SCHEMA)
    for i in calls:
        m = re.fullmatch(r"tool call: get_weather\((\{.*\})\)", lines[i])
        assert m, lines[i]
        jsonschema.validate(json.loads(m.group(1)), CITY_ARGS)
    usage = [line for line in lines if line.startswith("  usage ")]
    assert len(usage) == 2, lines
    for line in usage:
        check_usage(line)


def test_pydantic_output_prints_a_valid_recipe_then_stats() -> None:
    lines = run_example("examples/pydantic_output.py")
    *value_lines, stats = lines
    jsonschema.validate(json.loads("\n".join(value_lines)), RECIPE_SCHEMA)
    m = re.fullmatch(r"(\d+) tokens, (\d+) target forwards, acceptance (\d+)%", stats)
    assert m, stats
    tokens, forwards, acceptance = map(int, m.groups())
    assert tokens >= 1 and 1 <= forwards <= tokens + 1 and 0 <= acceptance <= 100, stats


def test_function_calling_prints_calls_with_valid_arguments_and_their_results() -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import function_calling  # the example's own functions compute the expected results
    finally:
        sys.path.remove(str(EXAMPLES))
    lines = run_example("examples/function_calling.py")
    answers = [line for line in lines if line.startswith("answer: ")]
    calls = [i for i, line in enumerate(lines) if line.startswith("call: ")]
    assert answers or calls, lines
    assert len(answers) + 2 * len(calls) == len(lines), lines
    for i in calls:
        m = re.fullmatch(r"call: (\w+)\((\{.*\})\)", lines[i])
        assert m, lines[i]
        name, arguments = m.group(1), ast.literal_eval(m.group(2))
        jsonschema.validate(arguments, TOOL_ARGS[name])
        assert lines[i + 1] == "result: " + getattr(function_calling, name)(**arguments)


def test_openai_client_in_process_prints_a_valid_reply_and_tool_call() -> None:
    check_openai_client_output(run_example("examples/openai_client.py", "--in-process"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_openai_client_against_a_served_tiny_model() -> None:
    """The README's two-process use: a uvicorn server on tiny models that wants an API key, the
    example over HTTP (the openai client when installed) with ``--api-key``."""
    import httpx

    port = _free_port()
    launcher = ("import argparse, sys; sys.path.insert(0, 'examples'); import uvicorn; from _models import make_generator; "
                "from constrained_spec.serving.app import ServerConfig, create_app; "
                "app = create_app(make_generator(argparse.Namespace(tiny=True)), ServerConfig(api_key='example-key')); "
                f"uvicorn.run(app, host='127.0.0.1', port={port}, log_level='warning')")
    server = subprocess.Popen([sys.executable, "-c", launcher], cwd=ROOT, env=example_env(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert server.poll() is None, server.stderr.read().decode(errors="replace")[-4000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the tiny server did not come up"
            time.sleep(0.5)
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).status_code == 401  # the key is enforced
        check_openai_client_output(run_example("examples/openai_client.py", "--base-url", f"http://127.0.0.1:{port}/v1",
                                               "--api-key", "example-key"))
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.real_models
def test_make_demo_command_on_the_real_pair() -> None:
    """``make demo``'s command: a value for schemas/order.json on stdout, the stats on stderr."""
    makefile = (ROOT / "Makefile").read_text()
    prompt = re.search(r"^DEMO_PROMPT = (.+)$", makefile, re.MULTILINE).group(1)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-m", "constrained_spec.cli", "generate", "--schema", "schemas/order.json",
                           "--stats", "--prompt", prompt], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    value = json.loads(proc.stdout)
    jsonschema.validate(value, json.loads((ROOT / "schemas" / "order.json").read_text()))
    assert "ORD-482913" in json.dumps(value)
    err = proc.stderr.splitlines()
    stats = json.loads("\n".join(err[max(i for i, line in enumerate(err) if line == "{"):]))
    assert stats["generated_tokens"] > 0 and stats["stop_reason"] == "eos", stats


def test_cfg_grammars_prints_texts_that_lark_parses() -> None:
    import lark

    lines = run_example("examples/cfg_grammars.py", "--max-new-tokens", "24")
    complete = 0
    for line in lines:
        m = re.fullmatch(r"(\w+): (.+)  \(lark tree root 'start'; (\d+) tokens, (\d+) target forwards\)", line)
        if m is None:
            assert re.fullmatch(r"\w+: no complete output within 24 tokens", line), line
            continue
        name, text = m.group(1), ast.literal_eval(m.group(2))
        lark.Lark((ROOT / "grammars" / f"{name}.lark").read_text()).parse(text)  # lark is the oracle
        assert 1 <= int(m.group(3)) <= 24
        complete += 1
    assert len(lines) == 4 and complete >= 1, lines


CITY_SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "country": {"type": "string", "maxLength": 30},
                                                "size": {"enum": ["small", "medium", "large"]}},
               "required": ["name", "country", "size"], "additionalProperties": False}


def test_transformers_generate_prints_valid_values_and_equal_tokens() -> None:
    lines = run_example("examples/transformers_generate.py")
    assert [line.split(":")[0] for line in lines] == ["processor", "drop-in", "same tokens", "row 0", "row 1"], lines
    for line in (lines[0], lines[1], lines[3]):
        jsonschema.validate(json.loads(line.split(": ", 1)[1]), CITY_SCHEMA)
    assert lines[2] == "same tokens: True"
    assert re.fullmatch(r"(yes|no)\. [A-Z][a-z]{2,12}", lines[4].split(": ", 1)[1]), lines[4]


BOOK_SCHEMA = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40}, "author": {"type": "string", "maxLength": 30},
                                                "year": {"type": "integer", "minimum": 1450, "maximum": 2030}},
               "required": ["title", "author", "year"], "additionalProperties": False}


def test_stream_async_prints_growing_partials_then_valid_values() -> None:
    from test_streams import is_json_prefix

    lines = run_example("examples/stream_async.py")
    partials = [json.loads(line.removeprefix("partial: ")) for line in lines if line.startswith("partial: ")]
    rest = [line for line in lines if not line.startswith("partial: ")]
    assert [line.split(":")[0] for line in rest] == ["final", "arun", "astream row 0", "astream row 1"], lines
    final = json.loads(rest[0].removeprefix("final: "))
    jsonschema.validate(final, BOOK_SCHEMA)
    assert partials and all(is_json_prefix(p, final) for p in partials) and partials[-1] == final
    m = re.fullmatch(r"arun: (\{.*\}) same as the stream: True", rest[1])
    assert m and json.loads(m.group(1)) == final
    for line in rest[2:]:
        jsonschema.validate(json.loads(line.split(": ", 1)[1]), BOOK_SCHEMA)


def _needs(package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed (pip install 'constrained-spec[test]')")


@pytest.mark.slow  # the server path is the openai client's test's; this one adds instructor's parsing (~15 s)
def test_instructor_client_in_process_prints_valid_models() -> None:
    _needs("instructor")
    lines = run_example("examples/instructor_client.py", "--in-process")
    assert [line.split(":")[0] for line in lines] == ["TOOLS", "JSON_SCHEMA"], lines
    for line in lines:
        m = re.fullmatch(r"\w+: (\{.*\}) \((\d+) tokens\)", line)
        assert m, line
        jsonschema.validate(json.loads(m.group(1)), {**PERSON_SCHEMA, "properties": {
            **PERSON_SCHEMA["properties"], "role": {"enum": ["engineer", "artist", "doctor"]}}, "required": ["name", "age", "role"]})


@pytest.mark.slow  # the server path is the openai client's test's; this one adds LangChain's parsing (~15 s)
def test_langchain_client_in_process_prints_valid_models() -> None:
    _needs("langchain_openai")
    lines = run_example("examples/langchain_client.py", "--in-process")
    assert [line.split(":")[0] for line in lines] == ["json_schema", "function_calling"], lines
    movie = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 40}, "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
                                              "genre": {"enum": ["drama", "comedy", "horror"]}},
             "required": ["title", "year", "genre"], "additionalProperties": False}
    for line in lines:
        jsonschema.validate(json.loads(line.split(": ", 1)[1]), movie)
