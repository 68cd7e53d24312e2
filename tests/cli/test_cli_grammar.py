"""``constrained-spec generate --grammar FILE.lark``: the text printed is in the grammar's language
(judged by lark, independently of the CLI), and a bad grammar file is one error line, exit 2,
before any model loads."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_support import main_in_process
from grammar_oracles import in_language

ROOT = Path(__file__).resolve().parents[2]
#: finite languages, so a tiny random model always finishes within its budget
GRAMMARS = {
    "yes_no.lark": 'start: "yes" | "no"\n',
    "brackets.lark": 'start: pair | pair pair\npair: "(" ")" | "[" "]"\n',
}


def test_the_oracle_rejects_text_outside_the_language():  # negative control of in_language
    assert in_language(GRAMMARS["yes_no.lark"], "yes") and not in_language(GRAMMARS["yes_no.lark"], "yes\n")
    assert not in_language(GRAMMARS["brackets.lark"], "(]") and in_language(GRAMMARS["brackets.lark"], "()[]")


def test_generate_prints_text_in_the_grammars_language(model_dirs, tmp_path, capsys, monkeypatch):
    """The whole command with a draft model, run by ``cli.main`` in this process (the command in a fresh
    process, same flags with --schema: tests/cli/test_cli.py::test_generate_prints_a_valid_value_and_stats)."""
    path = tmp_path / "brackets.lark"
    path.write_text(GRAMMARS["brackets.lark"])
    code, out, err = main_in_process(capsys, monkeypatch, tmp_path, "generate", "--grammar", str(path), "--prompt", "Answer.",
                                     "--model", model_dirs[0], "--draft", model_dirs[1], "-k", "3", "--debug-checks",
                                     "--temperature", "1.0", "--seed", "3", "--stats")
    assert code == 0, err[-2000:]
    assert out.endswith("\n") and out.count("\n") == 1
    text = out[:-1]  # print's newline
    assert in_language(GRAMMARS["brackets.lark"], text), text
    stats = json.loads(err[err.index("{"):])
    assert stats["generated_tokens"] >= 1 and stats["stop_reason"] == "eos"


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_every_seed_gives_text_in_the_language(model_dirs, tmp_path, capsys, monkeypatch, seed):
    path = tmp_path / "yes_no.lark"
    path.write_text(GRAMMARS["yes_no.lark"])
    code, out, err = main_in_process(capsys, monkeypatch, tmp_path, "generate", "--grammar", str(path), "--prompt", "Yes or no?",
                                     "--model", model_dirs[0], "--draft", "none", "--temperature", "1.0", "--seed", str(seed),
                                     "--dtype", "fp32")
    assert code == 0, err[-2000:]
    assert in_language(GRAMMARS["yes_no.lark"], out[:-1]) and out.endswith("\n"), out


def test_a_repository_grammar_file_is_accepted(model_dirs, tmp_path, capsys, monkeypatch):
    """grammars/json.lark: with a small budget a tiny model may not finish, so the run ends in
    either a JSON text lark parses or the one-line token-budget error (exit 1)."""
    grammar = (ROOT / "grammars" / "json.lark").read_text()
    code, out, err = main_in_process(capsys, monkeypatch, tmp_path, "generate", "--grammar", str(ROOT / "grammars" / "json.lark"),
                                     "--prompt", "A JSON value:", "--model", model_dirs[0], "--draft", "none", "--max-new-tokens", "24",
                                     "--temperature", "1.0", "--seed", "1", "--dtype", "fp32")
    if code == 0:
        assert in_language(grammar, out[:-1]), out
        json.loads(out)
    else:
        lines = [line for line in err.splitlines() if line.startswith("constrained-spec: error: ")]
        assert code == 1 and len(lines) == 1 and "token budget" in lines[0] and "Traceback" not in err, err[-2000:]


def bad_grammar_cases(tmp: Path) -> dict[str, tuple[list[str], str]]:
    (tmp / "undefined.lark").write_text("start: foo\n")
    (tmp / "syntax.lark").write_text('start: "a" |\n  | ) (\n')
    (tmp / "lookahead.lark").write_text("start: /a(?=b)/\n")  # Python's re (lark) takes it, llguidance does not
    (tmp / "declare.lark").write_text("%declare FOO\nstart: FOO\n")
    (tmp / "latin1.lark").write_bytes(b'start: "\xe9"\n')
    (tmp / "dir.lark").mkdir(exist_ok=True)
    return {
        "missing file": ([str(tmp / "nope.lark")], "does not exist"),
        "a directory": ([str(tmp / "dir.lark")], "directory"),
        "not UTF-8": ([str(tmp / "latin1.lark")], "UTF-8"),
        "undefined rule (lark)": ([str(tmp / "undefined.lark")], "foo"),
        "syntax error (lark)": ([str(tmp / "syntax.lark")], "lark cannot load"),
        "look-ahead (llguidance)": ([str(tmp / "lookahead.lark")], "look-around"),
        "declare (llguidance)": ([str(tmp / "declare.lark")], "declare"),
    }


def test_bad_grammar_files_are_one_line_before_any_model_loads(tmp_path, capsys, monkeypatch):
    """Run by ``cli.main`` in this process (what a fresh process prints for a bad grammar file, and how
    fast, is tests/cli/test_cli.py's fail-fast test, whose cases include grammar files)."""
    times = {}
    for name, (args, needle) in bad_grammar_cases(tmp_path).items():
        start = time.perf_counter()
        code, out, err = main_in_process(capsys, monkeypatch, tmp_path, "generate", "--grammar", *args, "--prompt", "x",
                                         "--model", str(tmp_path / "no-such-model"))
        times[name] = time.perf_counter() - start
        lines = err.splitlines()
        assert code == 2, (name, code, err[-2000:])
        assert len(lines) == 1 and lines[0].startswith("constrained-spec: error: "), (name, err)
        assert needle in lines[0] and "Traceback" not in err and out == "", (name, lines)
        assert "no-such-model" not in lines[0], name  # the grammar was refused first: no model was looked at
    print("\n".join(f"{t:5.2f} s  {name}" for name, t in times.items()))


def test_grammar_checks_import_neither_torch_nor_transformers(tmp_path):
    (tmp_path / "bad.lark").write_text("start: /a(?=b)/\n")
    (tmp_path / "good.lark").write_text('start: "a"\n')
    code = (
        "import json, sys\n"
        "from constrained_spec.cli import commands as cli\n"
        "codes = [cli.main(['generate', '--grammar', sys.argv[1], '--prompt', 'x'])]\n"
        "import argparse\n"
        "args = argparse.Namespace(schema=None, regex=None, grammar=sys.argv[2], progress=False)\n"
        "spec = cli.compile_constraint(args)\n"
        "print(json.dumps([codes, spec.kind, [m for m in ('torch', 'transformers') if m in sys.modules]]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "bad.lark"), str(tmp_path / "good.lark")], capture_output=True,
                         text=True, cwd=ROOT, timeout=120, check=False)
    codes, kind, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    assert codes == [2] and kind == "lark", out.stderr
    assert heavy == [], f"the grammar checks imported {heavy}"


def test_regex_files_still_work(model_dirs, tmp_path, capsys, monkeypatch):
    import re

    path = tmp_path / "digits.regex"
    path.write_text("[0-9]{2}-[a-c]\n")
    code, out, err = main_in_process(capsys, monkeypatch, tmp_path, "generate", "--grammar", str(path), "--prompt", "x",
                                     "--model", model_dirs[0], "--draft", "none", "--temperature", "1.0", "--seed", "2", "--dtype", "fp32")
    assert code == 0, err[-2000:]
    assert re.fullmatch("[0-9]{2}-[a-c]", out[:-1]), out
