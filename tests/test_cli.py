"""The command line on tiny saved model folders: value on stdout, stats on stderr, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from tiny_models import tiny_llama

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model_dirs(gpt2_tokenizer, tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    dirs = []
    for seed in (1, 2):
        folder = base / f"tiny{seed}"
        tiny_llama(50257, seed=seed).save_pretrained(folder)
        gpt2_tokenizer.save_pretrained(folder)
        dirs.append(str(folder))
    return dirs


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {"CONSTRAINED_SPEC_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "constrained_spec.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


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


def test_grammar_files_compile_and_lark_is_refused(model_dirs, tmp_path):
    from constrained_spec.grammar.automaton import AutomatonCompiler
    from constrained_spec.vocab import TokenVocabulary

    vocab = TokenVocabulary(tokens={i: bytes([i]) for i in range(32, 127)}, eos_token_ids=(0,), size=128)
    for path in (ROOT / "grammars").glob("*.regex"):
        automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(path.read_text().strip())
        assert automaton.num_states > 1
    lark = tmp_path / "g.lark"
    lark.write_text('start: "a"')
    out = run_cli("generate", "--grammar", str(lark), "--prompt", "x", "--model", model_dirs[0], "--draft", "none", cache=tmp_path)
    assert out.returncode == 2 and "not supported" in out.stderr
