"""JSON Schema compile: per-schema time (front end vs llguidance grammar compile) and a fingerprint
of the output, to check that a speed-up changes no compiled language.

Times are CPU times of this process (``time.process_time``: the host is shared, wall clock
there measures the neighbours); the wall time of the front end is kept beside it.

``--out FILE`` compiles every schema of the sets (JSONSchemaBench dev, JSON-Schema-Test-Suite
draft2020-12) in this process and writes one row per schema: the front end's time
(``schema_to_regex``), the lazy engine's (``compile_grammar`` + the first mask, with
``--tokenizer``) and a SHA-256 of everything ``schema_to_regex`` returned (regex, Lark grammar,
notes, unenforced keywords, depth, ignored formats) or of the error it raised (type and message).
``--compare A B`` prints the schemas whose fingerprints differ (exit 1 when any does) and the
time distributions of both. ``--profile NAME`` runs cProfile on the named schemas.

Run it from the tree whose compiler it measures (it imports ``constrained_spec`` from its parent)::

    python3 benchmarks/compile_equiv.py --out /tmp/after.json --tokenizer qwen2
    python3 benchmarks/compile_equiv.py --compare /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import importlib.util
import json
import pstats
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
SETS = {"dev": DATA / "jsonschemabench-dev" / "data", "jsts": DATA / "json-schema-test-suite" / "draft2020-12"}


def _coverage() -> Any:
    """benchmarks/coverage.py (its case reader and tokenizer loader), loaded once."""
    if "_cov" not in sys.modules:
        spec = importlib.util.spec_from_file_location("_cov", Path(__file__).resolve().parent / "coverage.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["_cov"] = module
        spec.loader.exec_module(module)
    return sys.modules["_cov"]


def _iter_cases(sets: list[str]) -> list[tuple[str, Any]]:
    cov = _coverage()
    cases = []
    for name in sets:
        for i, c in enumerate(cov.iter_cases([SETS[name]])):
            cases.append((f"{name}:{c.category}/{c.name}#{i}", c.schema))
    return cases


def fingerprint(schema: Any, budget_s: float) -> tuple[str, str, Any]:
    """(digest of the compile's output or error, a short status, the output or None) for one schema."""
    from constrained_spec.grammar.json_schema import SchemaOptions, schema_to_regex

    try:
        r = schema_to_regex(schema, SchemaOptions(time_budget_s=budget_s))
    except Exception as e:  # noqa: BLE001 - the error is part of the output compared
        text = f"{type(e).__name__}: {e}"
        status = "error:" + type(e).__name__
        r = None
    else:
        text = json.dumps([r.regex, r.lark, list(r.narrowed), list(r.unenforced), r.recursion_depth,
                           [list(x) for x in r.ignored_formats]], ensure_ascii=False)
        status = "lark" if r.lark else "regex"
    return hashlib.sha256(text.encode()).hexdigest(), status, r


def _lazy(tokenizer: str) -> Callable[[Any], Optional[float]]:
    """A function timing the lazy engine's compile (+ first mask) of one schema's output."""
    cov = _coverage()
    from constrained_spec.grammar.backends.llguidance import compile_grammar
    from constrained_spec.grammar.vocab import build_vocabulary

    tok = cov.load_tokenizer(tokenizer)
    vocab = build_vocabulary(tok)

    def encode(s: str) -> list[int]:
        return list(tok.encode(s, add_special_tokens=False))

    def run(r: Any) -> Optional[float]:
        if r is None:
            return None
        kind, text = ("lark", r.lark) if r.lark else ("regex", r.regex)
        c0 = time.process_time()
        try:
            compile_grammar(kind, text, vocab, encode).matcher().bitmask()
        except Exception:  # noqa: BLE001
            return None
        return time.process_time() - c0

    return run


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def _dist(xs: list[float]) -> str:
    return (f"p50 {_pct(xs, .5) * 1e3:.1f} / p90 {_pct(xs, .9) * 1e3:.1f} / p99 {_pct(xs, .99) * 1e3:.1f} / "
            f"max {max(xs) * 1e3:.0f} ms (n={len(xs)})")


def _dev_split_line(rows: list[dict[str, Any]]) -> str:
    """Front end + lazy engine (0 where it did not run) over the dev split's schemas: the
    distribution, how many pass 250 ms / 500 ms / 1 s, and the sum (the figures
    docs/compile-slow-path.md reports)."""
    xs = [r["front_s"] + (r.get("lazy_s") or 0.0) for r in rows if r["name"].startswith("dev:")]
    if not xs:
        return "dev split: no rows"
    over = " / ".join(str(sum(x > t for x in xs)) for t in (0.25, 0.5, 1.0))
    return f"dev split, front end + lazy: {_dist(xs)}; over 250 ms / 500 ms / 1 s: {over}; sum {sum(xs):.0f} s"


def _names(path: Path, slowest: Optional[int]) -> set[str]:
    """The schema names a ``--only`` file lists: one a line, or (an ``--out`` file of an earlier run)
    its ``slowest`` slowest rows by front-end time (all rows without ``slowest``)."""
    text = path.read_text()
    if text.lstrip().startswith("["):
        rows = sorted(json.loads(text), key=lambda r: -r["front_s"])
        return {r["name"] for r in (rows[:slowest] if slowest else rows)}
    return {line.strip() for line in text.splitlines() if line.strip()}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write per-schema rows (time, fingerprint) here")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--profile", action="append", default=[], help="cProfile the schema of this name (repeatable)")
    ap.add_argument("--sets", default="dev,jsts")
    ap.add_argument("--budget", type=float, default=60.0, help="the compiler's time budget (s)")
    ap.add_argument("--tokenizer", help="also time the lazy engine's compile with this tokenizer (e.g. qwen2)")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--only", help="compile only the schemas named in this file (one name a line)")
    ap.add_argument("--slowest", type=int, metavar="N",
                    help="with --only naming an --out file of an earlier run: its N slowest schemas (front end)")
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        rows_a = {r["name"]: r for r in a}
        rows_b = {r["name"]: r for r in b}
        diff = [n for n in rows_a if n in rows_b and rows_a[n]["digest"] != rows_b[n]["digest"]]
        missing = sorted(set(rows_a) ^ set(rows_b))
        for n in diff:
            print(f"DIFFERS {n}: {rows_a[n]['status']} -> {rows_b[n]['status']}")
        for label, rows in (("before", a), ("after", b)):
            print(f"{label}: front end {_dist([r['front_s'] for r in rows])}")
            lz = [r["lazy_s"] for r in rows if r.get("lazy_s") is not None]
            if lz:
                tot = [r["front_s"] + r["lazy_s"] for r in rows if r.get("lazy_s") is not None]
                print(f"{label}: lazy       {_dist(lz)}")
                print(f"{label}: total      {_dist(tot)}")
        for label, rows in (("before", a), ("after", b)):
            print(f"{label}: {_dev_split_line(rows)}")
        print(f"{len(rows_a)} / {len(rows_b)} schemas; {len(diff)} differ; {len(missing)} in one file only")
        return 1 if diff or missing else 0
    cases = _iter_cases([s.strip() for s in args.sets.split(",") if s.strip()])
    if args.limit:
        cases = cases[:args.limit]
    if args.only:
        wanted = _names(Path(args.only), args.slowest)
        cases = [c for c in cases if c[0] in wanted]
    if args.profile:
        by_name = dict(cases)
        prof = cProfile.Profile()
        for name in args.profile:
            prof.enable()
            fingerprint(by_name[name], args.budget)
            prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(45)
        return 0
    lazy = _lazy(args.tokenizer) if args.tokenizer else None
    rows = []
    for name, schema in cases:
        t0, c0 = time.perf_counter(), time.process_time()
        digest, status, result = fingerprint(schema, args.budget)
        row: dict[str, Any] = {"name": name, "front_s": time.process_time() - c0, "front_wall_s": time.perf_counter() - t0,
                               "digest": digest, "status": status}
        if lazy is not None:
            row["lazy_s"] = lazy(result)
        rows.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=0))
    print(f"front end {_dist([r['front_s'] for r in rows])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
