"""The command line on tiny saved model folders: value on stdout, stats on stderr, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
from cli_support import main_in_process, run_cli
from tiny_models import tiny_llama

ROOT = Path(__file__).resolve().parents[2]


def test_generate_prints_a_valid_value_and_stats(model_dirs, tmp_path):
    out = run_cli("generate", "--schema", "schemas/tool_call.json", "--prompt", "Search the web for cats",
                  "--model", model_dirs[0], "--draft", model_dirs[1], "-k", "3", "--stats", "--debug-checks",
                  "--temperature", "1.0", "--seed", "4", cache=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    value = json.loads(out.stdout)
    jsonschema.validate(value, json.loads((ROOT / "schemas/tool_call.json").read_text()))
    stats = json.loads(out.stderr[out.stderr.index("{"):])
    assert stats["generated_tokens"] > 0 and stats["target_forwards"] >= 1 and "acceptance_rate" in stats


def test_errors_are_one_clear_line(model_dirs, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "array", "uniqueItems": true}')
    out = run_cli("generate", "--schema", str(bad), "--prompt", "x", "--model", model_dirs[0], "--draft", "none", cache=tmp_path)
    assert out.returncode == 2
    assert "uniqueItems" in out.stderr and "Traceback" not in out.stderr
    out = run_cli("generate", "--schema", "schemas/person.json", "--prompt", "x", "--model", "/no/such/model", cache=tmp_path)
    assert out.returncode == 2 and "does not exist" in out.stderr and "Traceback" not in out.stderr


def test_grammar_files_compile():  # .lark files on the command line: tests/cli/test_cli_grammar.py
    from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
    from constrained_spec.grammar.vocab import TokenVocabulary

    vocab = TokenVocabulary(tokens={i: bytes([i]) for i in range(32, 127)}, eos_token_ids=(0,), size=128)
    for path in (ROOT / "grammars").glob("*.regex"):
        automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(path.read_text().strip())
        assert automaton.num_states > 1


# -- fail fast: user errors answer in one line, before any model loads ---------------------------

HEAVY = ("torch", "transformers")
#: the issue asks for under 2 s; a loaded 2-core machine gets headroom, the measured figures print
FAST_S = 5.0
CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"enum": ["San Francisco, California", "Amsterdam, North Holland"]},
                   "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["city", "n"], "additionalProperties": False,
}
CITY_PROMPT = "Which city? San Francisco, California, n = 7"


def user_error_cases(tmp: Path) -> dict[str, list[str]]:
    (tmp / "meta.json").write_text('{"type": 5}')  # invalid against the metaschema
    (tmp / "unique.json").write_text('{"type": "array", "uniqueItems": true}')  # not compilable exactly
    (tmp / "broken.json").write_text('{"type": ')
    (tmp / "bad.regex").write_text("[0-9]{2,1}\n")
    person = ["--schema", "schemas/person.json"]
    return {
        "missing schema file": ["--schema", str(tmp / "nope.json")],
        "schema is a directory": ["--schema", str(tmp)],
        "schema fails the metaschema": ["--schema", str(tmp / "meta.json")],
        "schema not compilable": ["--schema", str(tmp / "unique.json")],
        "schema not JSON": ["--schema", str(tmp / "broken.json")],
        "invalid regex": ["--regex", "a(b"],
        "invalid regex range": ["--regex", "[z-a]+"],
        "invalid grammar file": ["--grammar", str(tmp / "bad.regex")],
        "missing grammar file": ["--grammar", str(tmp / "nope.regex")],
        "two constraints": [*person, "--regex", "a"],
        "no constraint": [],
        "negative temperature": [*person, "--temperature", "-1"],
        "nan temperature": [*person, "--temperature", "nan"],
        "negative k": [*person, "-k", "-1"],
        "negative top-k": [*person, "--top-k", "-1"],
        "top-p above 1": [*person, "--top-p", "2"],
        "zero max-new-tokens": [*person, "--max-new-tokens", "0"],
        "unknown proposer": [*person, "--proposers", "draft,oracle"],
        "draft proposer without a draft": [*person, "--draft", "none", "--proposers", "draft"],
        "missing model folder": [*person, "--model", str(tmp / "no-such-model")],
        "model folder without a model": [*person, "--model", str(tmp)],
    }


@pytest.fixture(scope="module")
def user_error_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, float]]:
    """Each user-error case run once, as its own ``constrained-spec generate`` process: name -> (the
    process, its seconds). The two tests below read the same runs."""
    tmp = tmp_path_factory.mktemp("user-errors")
    runs = {}
    for name, args in user_error_cases(tmp).items():
        start = time.perf_counter()
        out = run_cli("generate", *args, "--prompt", "x", cache=tmp)
        runs[name] = (out, time.perf_counter() - start)
    return runs


def test_user_errors_fail_fast_in_one_line(user_error_runs):
    times = {}
    for name, (out, seconds) in user_error_runs.items():
        times[name] = seconds
        lines = out.stderr.splitlines()
        assert out.returncode == 2, (name, out.returncode, out.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("constrained-spec: error: "), (name, out.stderr)
        assert "Traceback" not in out.stderr and out.stdout == "", name
    print("\n".join(f"{t:5.2f} s  {name}" for name, t in times.items()))
    assert max(times.values()) < FAST_S, times
    assert sorted(times.values())[len(times) // 2] < 2.0, times  # the median, as the issue asks


def test_error_lines_say_what_is_wrong(user_error_runs):
    expect = {"missing schema file": "does not exist", "schema is a directory": "directory",
              "schema fails the metaschema": "/type", "schema not compilable": "uniqueItems",
              "invalid regex": "a(b", "negative temperature": "--temperature", "negative k": "-k",
              "top-p above 1": "--top-p", "zero max-new-tokens": "--max-new-tokens", "unknown proposer": "oracle",
              "missing model folder": "does not exist"}
    for name, needle in expect.items():
        out, _ = user_error_runs[name]
        assert needle in out.stderr, (name, out.stderr)


def test_help_and_argument_errors_import_neither_torch_nor_transformers(tmp_path):
    code = (
        "import json, sys\n"
        "from constrained_spec.cli import commands as cli\n"
        "codes = []\n"
        "for argv in (['--help'], ['generate', '--help'], ['generate', '--schema', sys.argv[1], '--prompt', 'x'],\n"
        "             ['generate', '--schema', 'schemas/person.json', '--prompt', 'x', '--temperature', '-1'],\n"
        "             ['generate', '--regex', 'a(', '--prompt', 'x']):\n"
        "    try:\n"
        "        codes.append(cli.main(argv))\n"
        "    except SystemExit as exc:\n"
        "        codes.append(exc.code)\n"
        f"print(json.dumps([codes, [m for m in {HEAVY!r} if m in sys.modules]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "none.json")], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, check=False)
    codes, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    assert codes == [0, 0, 2, 2, 2], out.stderr
    assert heavy == [], f"argument checks imported {heavy}"


def test_serve_without_its_extra_names_the_extra(monkeypatch, capsys):
    from constrained_spec.cli import commands as cli
    from constrained_spec.cli import serve

    called = []
    monkeypatch.setattr(serve, "main", lambda argv=None: called.append(argv) or 0)
    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi -> ImportError, as when not installed
    assert cli.main(["serve", "--port", "9"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "fastapi" in err[0] and "pip install 'constrained-spec[server]'" in err[0], err
    assert called == []  # refused before the server (and its models) started
    monkeypatch.delitem(sys.modules, "fastapi")
    assert cli.main(["serve", "--port", "9"]) == 0 and called == [["--port", "9"]]


def test_runtime_errors_exit_1_in_one_line(model_dirs, tmp_path, capsys, monkeypatch):
    from constrained_spec.cli import commands as cli

    monkeypatch.setenv("CONSTRAINED_SPEC_CACHE", str(tmp_path))
    schema = tmp_path / "city.json"
    schema.write_text(json.dumps(CITY_SCHEMA))
    code = cli.main(["generate", "--schema", str(schema), "--prompt", CITY_PROMPT, "--model", model_dirs[0],
                     "--draft", "none", "--max-new-tokens", "2", "--dtype", "fp32"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("constrained-spec: error: ")]
    assert code == 1 and len(errors) == 1 and "token budget" in errors[0], err
    assert "Traceback" not in err


# -- --draft none: target-only, every proposer off ---------------------------------------------

def test_draft_none_is_target_only(model_dirs, tmp_path, gpt2_tokenizer, capsys, monkeypatch):
    from constrained_spec.api import Generator
    from constrained_spec.config import PROPOSERS

    target, draft = tiny_llama(50257, seed=1), tiny_llama(50257, seed=2)
    alone = Generator(target, None, gpt2_tokenizer, disk_cache=False)
    assert alone.proposers == ()
    got = alone.run(CITY_PROMPT, CITY_SCHEMA)
    jsonschema.validate(got.value, CITY_SCHEMA)
    s = got.stats
    assert (s.drafted_tokens, s.model_proposed, s.grammar_proposed, s.lookup_proposed, s.draft_forwards) == (0, 0, 0, 0, 0)
    # every step is a forced token or one target forward, and commits one token (the EOS included)
    assert s.stop_reason == "eos" and s.target_forwards + s.forced_tokens == s.steps == s.generated_tokens + 1
    # the same prompt does give zero-cost proposals when they are asked for: the check above can fail
    asked = Generator(target, None, gpt2_tokenizer, disk_cache=False, proposers=PROPOSERS).run(CITY_PROMPT, CITY_SCHEMA)
    assert asked.stats.grammar_proposed + asked.stats.lookup_proposed > 0
    # what the benchmark calls target-only (k = 0 with a draft loaded) decodes the same tokens at the same cost
    bench_baseline = Generator(target, draft, gpt2_tokenizer, disk_cache=False).run(CITY_PROMPT, CITY_SCHEMA, num_draft_tokens=0)
    assert bench_baseline.token_ids == got.token_ids
    assert bench_baseline.stats.target_forwards == s.target_forwards

    schema = tmp_path / "city.json"
    schema.write_text(json.dumps(CITY_SCHEMA))
    code, out, err = main_in_process(capsys, monkeypatch, tmp_path, "generate", "--schema", str(schema), "--prompt", CITY_PROMPT,
                                     "--model", model_dirs[0], "--draft", "none", "--stats")
    assert code == 0, err[-2000:]
    jsonschema.validate(json.loads(out), CITY_SCHEMA)
    stats = json.loads(err[err.index("{"):])
    assert stats["draft_forwards"] == stats["drafted_tokens"] == 0
    assert stats["model_proposed"] == stats["grammar_proposed"] == stats["lookup_proposed"] == 0
    assert stats["target_forwards"] + stats["forced_tokens"] == stats["steps"] == stats["generated_tokens"] + 1


# -- generate_json and Generator share loaded models ---------------------------------------------

def test_generate_json_and_generators_share_loaded_models(monkeypatch, tmp_path, gpt2_tokenizer):
    import gc

    from constrained_spec import api
    from constrained_spec.lru import LRUCache
    from constrained_spec.models.torch import resolve as model_store

    loads: list[tuple[str, str, str]] = []

    def counting_resolve(spec, cache_dir=None, dtype="auto", progress=True, role="target", device="cpu"):
        loads.append((spec, str(dtype), role))
        return tiny_llama(50257, seed={"tiny-a": 1, "tiny-b": 2}[spec]), gpt2_tokenizer

    monkeypatch.setattr(model_store, "resolve_model", counting_resolve)
    monkeypatch.setattr(api, "_DEFAULT", LRUCache(2))
    monkeypatch.setenv("CONSTRAINED_SPEC_CACHE", str(tmp_path))
    schema = {"enum": ["yes", "no", "maybe"]}

    first = api.generate_json(schema, "Yes or no?", model="tiny-a", draft="tiny-b")
    assert first in schema["enum"] and len(loads) == 2
    gen = api.Generator("tiny-a", "tiny-b")
    assert len(loads) == 2, loads  # the default generator's models, not a second load
    default = api._DEFAULT.values()[0]
    assert gen.target.model is default.target.model and gen.draft.model is default.draft.model
    assert gen.target is not default.target  # each Generator has its own KV cache
    assert gen.generate_json(schema, "Yes or no?") == first

    api.Generator("tiny-a", None, dtype="fp32")  # another dtype: another load
    assert loads[2:] == [("tiny-a", "fp32", "target")]

    # the registry holds models only while a Generator does
    del gen, default
    api._DEFAULT.clear()
    gc.collect()
    api.Generator("tiny-a", "tiny-b")
    assert len(loads) == 5


def test_progress_shows_only_past_its_delay():
    import io

    from constrained_spec.progress import progress_after

    slow = io.StringIO()
    with progress_after("compiling the schema", delay=0.1, enabled=True, stream=slow):
        time.sleep(0.5)
    assert "compiling the schema" in slow.getvalue() and "[00:0" in slow.getvalue()
    quick = io.StringIO()
    with progress_after("compiling the schema", delay=2.0, enabled=True, stream=quick):
        pass
    assert quick.getvalue() == ""
    not_a_terminal = io.StringIO()  # enabled=None: only on a terminal
    with progress_after("compiling the schema", delay=0.05, stream=not_a_terminal):
        time.sleep(0.3)
    assert not_a_terminal.getvalue() == ""


# -- --draft-plan: the draft model used where it repays its prefill, or always ---------------------

def test_draft_plan_flag(model_dirs, tmp_path, capsys, monkeypatch):
    """On the CPU with the measured gain (0) and a short prompt (no overlapped prefill), the default
    plan leaves the draft out; ``--draft-plan always`` uses it. Both values validate. Run in this
    process with torch on as many threads as a fresh process would have (one per usable core; the
    tests run on one), so the "auto" prefill overlap is left out as it is for a user."""
    import torch

    from constrained_spec.engine.prefill import usable_cores

    schema = tmp_path / "city.json"
    schema.write_text(json.dumps(CITY_SCHEMA))
    stats = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(usable_cores())
    try:
        for plan in ("auto", "always"):
            code, out, err = main_in_process(capsys, monkeypatch, tmp_path, "generate", "--schema", str(schema), "--prompt", CITY_PROMPT,
                                             "--model", model_dirs[0], "--draft", model_dirs[1], "--draft-plan", plan, "--stats")
            assert code == 0, err[-2000:]
            jsonschema.validate(json.loads(out), CITY_SCHEMA)
            stats[plan] = json.loads(err[err.index("{"):])
    finally:
        torch.set_num_threads(threads)
    assert stats["auto"]["draft_skipped"] and stats["auto"]["draft_forwards"] == 0
    assert not stats["always"]["draft_skipped"] and stats["always"]["draft_forwards"] > 0


@pytest.mark.parametrize("runtime, expected", [("llamacpp", "gguf"), ("torch", "converted")])
def test_fetch_models_prepares_what_the_runtime_loads(capsys, monkeypatch, tmp_path, runtime, expected):
    """On the llama.cpp runtime fetch-models fetches the GGUFs and builds their tokenizers (nothing
    converted); on torch it converts (the control). The downloads are stubbed: no network here."""
    from constrained_spec.models import runtime as runtime_mod
    from constrained_spec.models.llamacpp import model as llamacpp
    from constrained_spec.models.store import fetch
    from constrained_spec.models.torch import resolve as store

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(fetch, "fetch_gguf", lambda name, cache_dir=None, progress=True: calls.append(("gguf", name)) or tmp_path / f"{name}.gguf")
    monkeypatch.setattr(llamacpp, "gguf_tokenizer", lambda path, cache_dir=None: calls.append(("tokenizer", str(path))))
    monkeypatch.setattr(store, "fetch_default_models", lambda **kw: calls.append(("converted", "pair")) or {"pair": tmp_path})
    monkeypatch.setattr(runtime_mod, "llamacpp_installed", lambda: True)
    code, out, _ = main_in_process(capsys, monkeypatch, tmp_path / "cache", "fetch-models", "--runtime", runtime)
    assert code == 0
    assert {kind for kind, _ in calls} == ({"gguf", "tokenizer"} if expected == "gguf" else {"converted"})
    if expected == "gguf":
        assert [name for kind, name in calls if kind == "gguf"] == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]
        assert "qwen2.5-coder-1.5b:" in out
