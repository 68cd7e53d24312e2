"""Compile-only pass over JSONSchemaBench folders: schemas compiled, refusals by keyword, size
refusals and compile-time percentiles (no instances checked: ``coverage.py`` does that).

``python benchmarks/keyword_refusals.py [--dump FILE] FOLDER...`` (from a source checkout, with
the package importable, e.g. ``PYTHONPATH=.``) prints the counts, then one line per refusal of the
keywords of issue 49 (``not``, ``oneOf``, ``if``, ``uniqueItems``, ``minProperties``,
``maxProperties``, ``dependentSchemas``) and per size/time limit; ``--dump`` writes
``{path: [status, sha1 of regex+grammar, seconds]}`` to compare two checkouts file by file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

from constrained_spec.errors import CompileLimitError, EmptyLanguageError, SchemaError, UnsupportedKeywordError
from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex

KEYWORDS = {"not", "oneOf", "if", "uniqueItems", "minProperties", "maxProperties", "dependentSchemas"}


def compile_one(schema: object) -> tuple[str, str, str]:
    """(status, hash of the regex and grammar, message) of one schema."""
    try:
        r = schema_to_regex(schema, SchemaOptions(time_budget_s=10.0))  # type: ignore[arg-type]
        return "ok", hashlib.sha1((r.regex + "\0" + (r.lark or "")).encode()).hexdigest(), ""
    except UnsupportedKeywordError as e:
        return "unsupported:" + e.keyword, "", str(e)
    except CompileLimitError as e:
        return "limit:" + (e.kind or "other"), "", str(e)  # other: a count cap (e.g. branch combinations)
    except EmptyLanguageError:
        return "empty", "", ""
    except SchemaError:
        return "invalid", "", ""


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/keyword_refusals.py", description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--dump", default=None, help="write the per-file results (JSON) here")
    args = ap.parse_args(argv)
    counts: Counter = Counter()
    lines: list[str] = []
    times: list[float] = []
    per: dict[str, tuple[str, str, float]] = {}
    for folder in args.folders:
        for p in sorted(Path(folder).glob("*.json")):
            schema = json.loads(p.read_text())["schema"]
            t0 = time.monotonic()
            status, digest, msg = compile_one(schema)
            dt = time.monotonic() - t0
            times.append(dt)
            counts[status] += 1
            per[str(p)] = (status, digest, dt)
            if status.startswith("limit") or (status.startswith("unsupported:") and status.split(":")[1] in KEYWORDS):
                lines.append(f"  {p.name} {status} {msg[:160]}")
    times.sort()
    print(dict(counts.most_common()))
    kw = sum(v for k, v in counts.items() if k.startswith("unsupported:") and k.split(":")[1] in KEYWORDS)
    print(f"keyword refusals ({', '.join(sorted(KEYWORDS))}): {kw}")
    print(f"size refusals: {counts['limit:size']}")
    if times:
        print(f"compile p50 {1000 * times[len(times) // 2]:.1f} ms, p99 {1000 * times[int(len(times) * 0.99)]:.1f} ms, n={len(times)}")
    print("\n".join(lines))
    if args.dump:
        Path(args.dump).write_text(json.dumps(per))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
