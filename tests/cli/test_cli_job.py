"""``constrained-spec generate --input prompts.jsonl``: a job of many documents (``cli.batch_job``).

On the tiny saved model folders, in this process (``cli_support.main_in_process``): records in
input order, a bad line named and skipped, values that ``jsonschema`` validates, the same records
from batch rows as one after another (greedy), and a run stopped mid-way (its output cut in the
middle of a record) resumed to the same file a whole run writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from cli_support import main_in_process

from constrained_spec.cli.batch_job import JobLine, parse_job, recorded_lines, run_job
from constrained_spec.errors import TokenBudgetExceeded

SCHEMA = {
    "type": "object",
    "properties": {"city": {"enum": ["San Francisco, California", "Amsterdam, North Holland"]},
                   "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["city", "n"],
    "additionalProperties": False,
}

#: (line text, what it must give): a value, or an error naming the line
LINES = [
    (json.dumps({"id": "a", "prompt": "Which city? San Francisco, California, n = 7"}), "value"),
    ("{not json", "error"),
    (json.dumps("Which city? Amsterdam, North Holland, n = 12"), "value"),
    (json.dumps({"id": 4, "text": "no prompt field"}), "error"),
    ("", None),  # blank: no record
    (json.dumps({"id": "f", "prompt": [{"role": "user", "content": "Pick a city and a number."}]}), "value"),
    (json.dumps({"id": "g", "prompt": "Which city? Amsterdam, n = 3"}), "value"),
]


@pytest.fixture
def job(tmp_path: Path) -> tuple[Path, Path]:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(text for text, _ in LINES) + "\n")
    return schema, prompts


def run(capsys, monkeypatch, tmp_path: Path, model_dirs, schema: Path, prompts: Path, *extra: str) -> tuple[int, str, str]:
    return main_in_process(capsys, monkeypatch, tmp_path / "cache", "generate", "--schema", str(schema), "--input", str(prompts),
                           "--model", model_dirs[0], "--draft", model_dirs[1], "-k", "3", "--draft-plan", "always",
                           "--max-new-tokens", "40", *extra)


def check_records(records: list[dict]) -> None:
    """One record per non-blank input line, in order, each as ``LINES`` says (values validated by jsonschema)."""
    expected = [(number, kind) for number, (_, kind) in enumerate(LINES, start=1) if kind is not None]
    assert [r["line"] for r in records] == [number for number, _ in expected]
    for record, (number, kind) in zip(records, expected):
        assert kind in record, record
        if kind == "value":
            jsonschema.validate(record["value"], SCHEMA)
        else:
            assert record["error"].startswith(f"line {number}: ")
    ids = {r["line"]: r.get("id") for r in records}
    assert (ids[1], ids[3], ids[4], ids[6]) == ("a", None, 4, "f")


def test_a_job_writes_records_in_order_and_names_bad_lines(model_dirs, tmp_path, job, capsys, monkeypatch):
    """To stdout: every line's record in input order, the two bad lines named as error records and
    on stderr; the same job as batch rows (``--batch-size 3``) to a file writes the same values."""
    schema, prompts = job
    code, out, err = run(capsys, monkeypatch, tmp_path, model_dirs, schema, prompts)
    assert code == 0, err[-2000:]
    records = [json.loads(line) for line in out.splitlines()]
    check_records(records)
    assert "2 error(s) (lines 2, 4)" in err
    assert "not JSON" in records[1]["error"] and "no \"prompt\" field" in records[3]["error"]

    batched = tmp_path / "batched.jsonl"
    code, out, err = run(capsys, monkeypatch, tmp_path, model_dirs, schema, prompts, "--batch-size", "3", "--output", str(batched))
    assert code == 0 and out == "", err[-2000:]
    assert [json.loads(line) for line in batched.read_text().splitlines()] == records


def test_a_stopped_job_resumes_to_the_whole_output(model_dirs, tmp_path, job, capsys, monkeypatch):
    """A whole run's file; the same file cut in the middle of its fourth record (a run stopped while
    writing) and run again: the stopped tail is cut, the three records kept are not decoded again,
    and the file ends byte for byte as the whole run's. A third run finds nothing to do and loads
    no model."""
    schema, prompts = job
    whole = tmp_path / "whole.jsonl"
    code, _, err = run(capsys, monkeypatch, tmp_path, model_dirs, schema, prompts, "--output", str(whole))
    assert code == 0, err[-2000:]
    text = whole.read_text()
    check_records([json.loads(line) for line in text.splitlines()])

    stopped = tmp_path / "stopped.jsonl"
    cut = [i for i, c in enumerate(text) if c == "\n"][2] + 1  # three whole records
    stopped.write_text(text[:cut] + text[cut:cut + 9])  # and part of the fourth
    code, _, err = run(capsys, monkeypatch, tmp_path, model_dirs, schema, prompts, "--output", str(stopped))
    assert code == 0, err[-2000:]
    assert "3 record(s) written, 1 error(s) (line 4), 3 from an earlier run" in err
    assert stopped.read_text() == text

    monkeypatch.setattr("constrained_spec.api.Generator.__init__", lambda *a, **k: pytest.fail("a model was loaded"))
    code, _, err = run(capsys, monkeypatch, tmp_path, model_dirs, schema, prompts, "--output", str(stopped))
    assert code == 0 and "nothing to do" in err and stopped.read_text() == text


@pytest.mark.parametrize("args, message", [
    (["--prompt", "x", "--output", "o.jsonl"], "--output needs --input"),
    (["--prompt", "x", "--batch-size", "2"], "--batch-size needs --input"),
    (["--prompt", "x", "--input", "IN"], "not both"),
    ([], "pass one of --prompt"),
    (["--input", "missing.jsonl"], "does not exist"),
    (["--input", "IN", "--output", "IN"], "must not be the --input file"),
])
def test_job_arguments_are_checked_before_loading(tmp_path, job, capsys, monkeypatch, args, message):
    schema, prompts = job
    args = [str(prompts) if a == "IN" else str(tmp_path / a) if a.endswith(".jsonl") else a for a in args]
    code, out, err = main_in_process(capsys, monkeypatch, tmp_path, "generate", "--schema", str(schema), "--model", "/nonexistent",
                                     *args)
    assert code == 2 and message in err and out == "", err


def test_the_runner_writes_in_order_and_stops_on_a_bug(tmp_path):
    """Without models: results out of the decoder's order still land in input order; a decode
    error of the project's is a record, any other error stops the job after the records before it."""
    import io

    lines = parse_job("\n".join(json.dumps({"prompt": f"p{i}"}) for i in range(5)))
    out = io.StringIO()

    def decode(part: list[JobLine]) -> list[object]:
        return [TokenBudgetExceeded(5, "partial") if line.number == 2 else {"n": line.number} for line in part]

    summary = run_job(lines, decode, out, lambda r: {"value": r}, chunk=2)
    records = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["line"] for r in records] == [1, 2, 3, 4, 5] and summary.errors == [2]
    assert [r.get("value") for r in records] == [{"n": 1}, None, {"n": 3}, {"n": 4}, {"n": 5}]

    out = io.StringIO()
    with pytest.raises(ZeroDivisionError):
        run_job(lines, lambda part: [ZeroDivisionError() if line.number == 4 else {} for line in part], out, lambda r: {"value": r}, chunk=2)
    assert [json.loads(x)["line"] for x in out.getvalue().splitlines()] == [1, 2, 3]

    path = tmp_path / "out.jsonl"
    path.write_text('{"line": 1}\n{"line": 2}\n{"line": 3, "val')
    assert recorded_lines(path) == {1, 2} and path.read_text() == '{"line": 1}\n{"line": 2}\n'
