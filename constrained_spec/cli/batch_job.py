"""A job of many documents: ``constrained-spec generate --input prompts.jsonl`` (one constraint).

Each non-blank input line is a JSON object with ``prompt`` (a string, or chat messages: a list of
``{"role", "content"}`` objects) and optionally ``id`` (any JSON value, copied to the output), or a
bare JSON string (the prompt). Each gives one output line, in input order:

    {"line": 3, "id": "a7", "value": {...}}        a JSON Schema's value ("text" for a regex or Lark grammar)
    {"line": 4, "id": "a8", "error": "..."}        a bad input line or a failed decode, named and skipped

Resumable: where the output file exists, the lines it records are not run again and new records
are appended; an incomplete last line (the run was stopped while writing) is cut off first. Records
are written in input order as they complete, so what a stopped run leaves is a prefix of the job.
Rows decode together (``Generator.run_batch``) where the Generator batches (``--batch-size``).
Nothing here imports torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from constrained_spec.errors import ConstrainedSpecError

__all__ = ["JobLine", "JobSummary", "append_records", "parse_job", "recorded_lines", "run_job"]


@dataclass(frozen=True)
class JobLine:
    """One input line: its 1-based ``number``, its ``id`` (None where none), and either its
    ``prompt`` or the ``error`` that makes it unusable."""

    number: int
    id: Any = None
    prompt: str | list[dict[str, Any]] | None = None
    error: str | None = None


@dataclass
class JobSummary:
    """What a job did: records written now, records found from an earlier run, errors (line numbers)."""

    written: int = 0
    resumed: int = 0
    errors: list[int] | None = None


def _prompt_of(data: Any) -> tuple[Any, str | list[dict[str, Any]] | None, str | None]:
    """(id, prompt, error) of one decoded line."""
    if isinstance(data, str):
        return None, data, None if data.strip() else "the prompt is empty"
    if not isinstance(data, dict):
        return None, None, f"expected a JSON object with \"prompt\" or a JSON string, got {type(data).__name__}"
    ident, prompt = data.get("id"), data.get("prompt")
    if prompt is None:
        return ident, None, "no \"prompt\" field"
    if isinstance(prompt, str):
        return ident, prompt, None if prompt.strip() else "the prompt is empty"
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) and isinstance(m.get("content"), str) and isinstance(m.get("role"), str)
                                                  for m in prompt):
        return ident, prompt, None
    return ident, None, "\"prompt\" must be a string or a list of {\"role\", \"content\"} messages"


def parse_job(text: str) -> list[JobLine]:
    """The job's lines (blank lines are left out; a line that is not usable carries its error)."""
    lines = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except ValueError as exc:
            lines.append(JobLine(number, error=f"not JSON: {exc}"))
            continue
        ident, prompt, error = _prompt_of(data)
        lines.append(JobLine(number, ident, prompt if error is None else None, error))
    return lines


def recorded_lines(path: Path) -> set[int]:
    """The input lines an earlier run recorded in ``path`` (none where it does not exist); an
    incomplete or unreadable tail (a stopped write) is cut off the file."""
    if not path.exists():
        return set()
    done: set[int] = set()
    keep = 0
    with path.open("rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            try:
                record = json.loads(raw)
                number = record["line"]
            except (ValueError, KeyError, TypeError):
                break
            if not isinstance(number, int):
                break
            done.add(number)
            keep += len(raw)
    if keep < path.stat().st_size:
        with path.open("r+b") as f:
            f.truncate(keep)
    return done


def append_records(out: IO[str], records: Sequence[dict[str, Any]]) -> None:
    """Write ``records`` as JSON lines and flush them to disk (a stopped run keeps what it wrote)."""
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    out.flush()
    try:
        os.fsync(out.fileno())
    except (OSError, ValueError, AttributeError):  # stdout, a pipe, a test's buffer
        pass


def _chunks(lines: Sequence[JobLine], size: int) -> Iterator[Sequence[JobLine]]:
    for start in range(0, len(lines), size):
        yield lines[start:start + size]


def _record(line: JobLine, **fields: Any) -> dict[str, Any]:
    head: dict[str, Any] = {"line": line.number}
    if line.id is not None:
        head["id"] = line.id
    return {**head, **fields}


def _message(exc: BaseException) -> str:
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or type(exc).__name__


def run_job(lines: Sequence[JobLine], decode: Callable[[Sequence[JobLine]], list[Any]], out: IO[str],
            result_record: Callable[[Any], dict[str, Any]], *, chunk: int, done: set[int] | None = None,
            progress: Any = None) -> JobSummary:
    """Run the lines not in ``done``, ``chunk`` at a time: ``decode`` gets a chunk's usable lines
    and returns a result or an exception for each, in order; each line's record
    (``result_record(result)``, or its error) is written to ``out`` in input order after its chunk.
    ``progress``: a tqdm bar (or None), advanced per line. A decode error that is not a
    :class:`ConstrainedSpecError` (a bug, a lost disk) stops the job: what was written stays."""
    done = done or set()
    todo = [line for line in lines if line.number not in done]
    summary = JobSummary(resumed=len(lines) - len(todo), errors=[])
    for part in _chunks(todo, max(chunk, 1)):
        usable = [line for line in part if line.error is None]
        results = dict(zip((line.number for line in usable), decode(usable) if usable else []))
        records = []
        for line in part:
            result = results.get(line.number)
            if line.error is not None:
                records.append(_record(line, error=f"line {line.number}: {line.error}"))
            elif isinstance(result, ConstrainedSpecError):
                records.append(_record(line, error=f"line {line.number}: {_message(result)}"))
            elif isinstance(result, BaseException):
                append_records(out, records)
                raise result
            else:
                records.append(_record(line, **result_record(result)))
            if "error" in records[-1]:
                assert summary.errors is not None
                summary.errors.append(line.number)
        append_records(out, records)
        summary.written += len(records)
        if progress is not None:
            progress.update(len(records))
    return summary
