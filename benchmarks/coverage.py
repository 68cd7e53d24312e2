"""Coverage runner: how many real-world schemas the JSON Schema compiler handles, and how well.

Reads two formats:

* the JSON Schema Test Suite (``json-schema-test-suite/draft2020-12/*.json``): each file a
  list of ``{description, schema, tests: [{description, data, valid}]}``; ``optional/``
  folders are skipped unless named directly;
* JSONSchemaBench (``jsonschemabench-dev/data/<Category>---<name>.json``): each file one
  ``{description, meta, schema, tests: [{valid, data}]}``.

For every schema it compiles the regex (:func:`schema_to_regex`), serialises every test
instance compactly and checks a full match at the string level.  A valid instance counts as
accepted when its text in the instance's own key order *or* in the compiler's key order
matches; an invalid instance counts as a false accept when either matches.  With a tokenizer
it also builds the token automaton and times it.

``python benchmarks/coverage.py [--limit N] [--tokenizer NAME] PATHS...`` (from a source
checkout, against the installed ``constrained_spec`` package) prints the table;
:func:`run_coverage` returns a :class:`CoverageReport`.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from constrained_spec.errors import (
    CompileLimitError,
    ConstrainedSpecError,
    EmptyLanguageError,
    SchemaError,
    UnsupportedKeywordError,
)
from constrained_spec.grammar.json_schema import SchemaOptions, canonical_key_orders, schema_to_regex

__all__ = [
    "SchemaCase",
    "CategoryStats",
    "CoverageReport",
    "iter_cases",
    "run_coverage",
    "check_case",
    "reorder_keys",
    "load_tokenizer",
    "main",
]

import re as _re

try:  # the `regex` package supports a per-match timeout
    import regex as _rx
except ImportError:  # pragma: no cover - fallback
    _rx = None

# a quantified group whose body ends in a quantifier: may backtrack badly in Python `re`
_RISKY = _re.compile(r"[*+}]\)[*+{]")


def _compile(p: str):
    """Compile for string-level checks: Python `re` (fast to compile) unless the regex has
    nested quantifiers, then the `regex` package (matches with a timeout)."""
    if _rx is not None and _RISKY.search(p):
        return _rx.compile(p)
    return _re.compile(p)


def _fullmatch(c, s: str, timeout: float) -> Optional[bool]:
    try:
        if _rx is not None and isinstance(c, _rx.Pattern):
            return c.fullmatch(s, timeout=timeout) is not None
        return c.fullmatch(s) is not None
    except TimeoutError:
        return None


@dataclass
class SchemaCase:
    """One schema and its test instances."""

    category: str
    name: str
    schema: Any
    tests: list  # of (data, valid, description)


@dataclass
class CategoryStats:
    schemas: int = 0
    compiled: int = 0
    passing: int = 0
    tests: int = 0
    tests_passing: int = 0
    false_accepts: int = 0
    false_rejects: int = 0
    artefact_rejects: int = 0
    match_timeouts: int = 0
    empty_correct: int = 0  # unsatisfiable schemas whose instances are all invalid
    compile_errors: Counter = field(default_factory=Counter)
    ignored_formats: Counter = field(default_factory=Counter)  # format name -> schemas
    compile_times: list = field(default_factory=list)
    regex_chars: list = field(default_factory=list)
    index_times: list = field(default_factory=list)
    mask_times_us: list = field(default_factory=list)
    false_accept_cases: list = field(default_factory=list)
    false_reject_cases: list = field(default_factory=list)

    def merge(self, o: "CategoryStats") -> None:
        for k in ("schemas", "compiled", "passing", "tests", "tests_passing", "false_accepts",
                  "false_rejects", "artefact_rejects", "match_timeouts", "empty_correct"):
            setattr(self, k, getattr(self, k) + getattr(o, k))
        self.compile_errors.update(o.compile_errors)
        self.ignored_formats.update(o.ignored_formats)
        for k in ("compile_times", "regex_chars", "index_times", "mask_times_us",
                  "false_accept_cases", "false_reject_cases"):
            getattr(self, k).extend(getattr(o, k))


@dataclass
class CoverageReport:
    categories: dict

    def total(self) -> CategoryStats:
        t = CategoryStats()
        for s in self.categories.values():
            t.merge(s)
        return t

    def format_table(self) -> str:
        return format_table(self)


# ---------------------------------------------------------------------------
# reading the data sets


def _category_for_bench(path: Path) -> str:
    stem = path.stem
    if "---" in stem:
        return stem.split("---", 1)[0]
    return path.parent.name


def iter_cases(paths: Sequence[str | Path], include_optional: bool = False) -> Iterator[SchemaCase]:
    """Yield the schema cases found under the given files or folders (sorted)."""
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            for f in sorted(p.rglob("*.json")):
                rel = f.relative_to(p).parts
                if not include_optional and "optional" in rel[:-1]:
                    continue
                files.append(f)
        elif p.is_file():
            files.append(p)
    for f in files:
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, list):
            # JSON Schema Test Suite
            cat = "JSTS " + (f.parent.name if f.parent.name != "optional" else "optional")
            for i, group in enumerate(doc):
                if not isinstance(group, dict) or "schema" not in group:
                    continue
                tests = [(t.get("data"), bool(t.get("valid")), t.get("description", "")) for t in group.get("tests", [])]
                yield SchemaCase(cat, f"{f.stem}#{i}: {group.get('description', '')}", group["schema"], tests)
        elif isinstance(doc, dict) and "schema" in doc and "tests" in doc:
            tests = [(t.get("data"), bool(t.get("valid")), t.get("description", "")) for t in doc["tests"]]
            yield SchemaCase(_category_for_bench(f), f.stem, doc["schema"], tests)


# ---------------------------------------------------------------------------
# checking


def reorder_keys(value: Any, order: dict) -> Any:
    """Copy of value with object keys sorted by the compiler's key order (unknown last)."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (order.get(k, math.inf), list(value).index(k)))
        return {k: reorder_keys(value[k], order) for k in keys}
    if isinstance(value, list):
        return [reorder_keys(v, order) for v in value]
    return value


def _dumps(v: Any) -> Optional[str]:
    try:
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError):
        return None


def _is_artefact(v: Any) -> bool:
    """Instances whose text form differs from the value the schema judges."""
    if isinstance(v, bool) or v is None:
        return False
    if isinstance(v, float):
        return v.is_integer() or abs(v) >= 1e15 or (v != 0 and abs(v) < 1e-4)
    if isinstance(v, int):
        return abs(v) >= 10**15
    if isinstance(v, str):
        return any(ord(c) > 0xFFFF or 0xD800 <= ord(c) <= 0xDFFF for c in v)
    if isinstance(v, list):
        return any(_is_artefact(x) for x in v)
    if isinstance(v, dict):
        return any(_is_artefact(x) for x in v.values())
    return False


def _error_reason(e: Exception) -> str:
    if isinstance(e, UnsupportedKeywordError):
        return f"unsupported:{e.keyword}"
    if isinstance(e, CompileLimitError):
        return "limit"
    if isinstance(e, EmptyLanguageError):
        return "empty"
    if isinstance(e, SchemaError):
        return "invalid-schema"
    if isinstance(e, ConstrainedSpecError):
        return type(e).__name__
    return f"crash:{type(e).__name__}"


def check_case(
    case: SchemaCase,
    options: SchemaOptions,
    stats: CategoryStats,
    automaton=None,
    match_timeout: float = 2.0,
) -> None:
    """Compile one schema, classify its instances, and add the outcome to ``stats``."""
    stats.schemas += 1
    stats.tests += len(case.tests)
    t0 = time.perf_counter()
    try:
        compiled = schema_to_regex(case.schema, options)
        err = None
    except Exception as e:  # noqa: BLE001 - a crash must not stop the run
        compiled, err = None, e
    dt = time.perf_counter() - t0
    stats.compile_times.append(dt)
    if compiled is None and isinstance(err, EmptyLanguageError):
        # the compiler proved (or restricted) the language to nothing: every instance is
        # rejected, which is right for invalid ones
        stats.compile_errors["empty"] += 1
        cre = None
    elif compiled is None:
        stats.compile_errors[_error_reason(err)] += 1
        return
    else:
        try:
            cre = _compile(compiled.regex)
        except Exception as e:  # noqa: BLE001
            stats.compile_errors[f"bad-regex:{type(e).__name__}"] += 1
            return
        stats.compiled += 1
        stats.regex_chars.append(len(compiled.regex))
        stats.ignored_formats.update({name for _, name in compiled.ignored_formats})
        if automaton is not None:
            automaton(compiled.regex, stats)
    order = None
    ok_all = True
    for data, valid, desc in case.tests:
        texts = [_dumps(data)]
        if isinstance(data, (dict, list)):
            if order is None:
                order = canonical_key_orders(case.schema)
            texts.append(_dumps(reorder_keys(data, order)))
        texts = [t for t in dict.fromkeys(texts) if t is not None]
        matched = False
        timed_out = False
        for t in texts:
            if cre is None:
                break
            m = _fullmatch(cre, t, match_timeout)
            if m is None:
                timed_out = True
            elif m:
                matched = True
                break
        if timed_out and not matched:
            stats.match_timeouts += 1
        if matched == valid:
            stats.tests_passing += 1
            continue
        ok_all = False
        if matched and not valid:
            stats.false_accepts += 1
            stats.false_accept_cases.append((case.category, case.name, texts[0][:200] if texts else "", desc))
        else:
            if _is_artefact(data):
                stats.artefact_rejects += 1
            else:
                stats.false_rejects += 1
                stats.false_reject_cases.append((case.category, case.name, texts[0][:200] if texts else "", desc))
    if ok_all and cre is not None:
        stats.passing += 1
    elif ok_all:
        stats.empty_correct += 1


def load_tokenizer(name: str):
    """A tokenizer by offline name (``gpt-2``, ``llama-spm``, ``llama-bpe``, ``qwen2``: fetched once by
    :mod:`constrained_spec.models.store.tokenizer_assets`), folder or hub id."""
    from transformers import AutoTokenizer

    from constrained_spec.models.store.tokenizer_assets import VOCAB_TOKENIZERS, ensure_vocab_tokenizer

    path = ensure_vocab_tokenizer(name) if name in VOCAB_TOKENIZERS and not Path(name).exists() else Path(name)
    return AutoTokenizer.from_pretrained(str(path))


def _make_automaton(tokenizer_name: Optional[str]):
    """A callable that builds and times the token automaton for a regex, or None without a
    tokenizer (none named, or it cannot be loaded)."""
    if not tokenizer_name:
        return None
    from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
    from constrained_spec.grammar.vocab import build_vocabulary

    try:
        vocabulary = build_vocabulary(load_tokenizer(tokenizer_name))
    except Exception as e:  # noqa: BLE001
        print(f"[coverage] token automaton skipped: cannot load tokenizer: {e}", file=sys.stderr)
        return None
    compiler = AutomatonCompiler(vocabulary, disk_cache=False, compile_timeout=60.0)

    def run(regex: str, stats: CategoryStats) -> None:
        t0 = time.perf_counter()
        try:
            automaton = compiler.compile(regex)
        except Exception as e:  # noqa: BLE001
            stats.compile_errors[f"automaton:{type(e).__name__}"] += 1
            return
        stats.index_times.append(time.perf_counter() - t0)
        # per-token mask time along a greedy walk (first mask of a state is the cold cost)
        try:
            state = automaton.initial_state
            for _ in range(16):
                t1 = time.perf_counter()
                allowed = automaton.allowed_ids(state)
                stats.mask_times_us.append((time.perf_counter() - t1) * 1e6)
                if len(allowed) == 0:
                    break
                nxt = automaton.next_state(state, int(allowed[len(allowed) // 2]))
                if nxt is None:
                    break
                state = nxt
        except Exception:  # noqa: BLE001
            pass

    return run


def run_coverage(
    paths: Sequence[str | Path],
    tokenizer: Optional[str] = None,
    options: Optional[SchemaOptions] = None,
    limit: Optional[int] = None,
    progress: bool = True,
    sample_seed: Optional[int] = None,
    include_optional: bool = False,
) -> CoverageReport:
    """Compile every schema under ``paths`` and check its instances (see module doc).

    ``limit``: only the first N schemas (or a seeded random sample of N when
    ``sample_seed`` is given).
    """
    options = options or SchemaOptions(time_budget_s=10.0)
    cases = list(iter_cases(paths, include_optional=include_optional))
    if limit is not None and limit < len(cases):
        if sample_seed is not None:
            rng = random.Random(sample_seed)
            cases = sorted(rng.sample(cases, limit), key=lambda c: (c.category, c.name))
        else:
            cases = cases[:limit]
    automaton = _make_automaton(tokenizer)
    cats: dict = defaultdict(CategoryStats)
    it: Iterable = cases
    if progress:
        try:
            from tqdm import tqdm

            it = tqdm(cases, desc="schemas", unit="schema", file=sys.stderr)
        except ImportError:  # pragma: no cover
            pass
    for case in it:
        check_case(case, options, cats[case.category], automaton)
    return CoverageReport(dict(sorted(cats.items())))


def _pct(values: list, q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(math.ceil(q * len(v))) - 1))
    return v[k]


def format_table(report: CoverageReport) -> str:
    rows = []
    head = (
        f"{'category':<22}{'schemas':>8}{'compiled':>9}{'passing':>9}{'pass%':>7}"
        f"{'tests':>7}{'t-pass':>7}{'f-acc':>6}{'f-rej':>6}{'artef':>6}"
        f"{'p50 ms':>8}{'p99 ms':>8}"
    )
    rows.append(head)
    rows.append("-" * len(head))
    items = list(report.categories.items()) + [("TOTAL", report.total())]
    for name, s in items:
        pct = 100.0 * s.passing / s.schemas if s.schemas else 0.0
        rows.append(
            f"{name:<22}{s.schemas:>8}{s.compiled:>9}{s.passing:>9}{pct:>6.1f}%"
            f"{s.tests:>7}{s.tests_passing:>7}{s.false_accepts:>6}{s.false_rejects:>6}{s.artefact_rejects:>6}"
            f"{1000 * _pct(s.compile_times, 0.5):>8.1f}{1000 * _pct(s.compile_times, 0.99):>8.1f}"
        )
    tot = report.total()
    if tot.index_times:
        rows.append(
            f"token automaton: built {len(tot.index_times)}; build p50 {1000 * _pct(tot.index_times, .5):.0f} ms, "
            f"p99 {1000 * _pct(tot.index_times, .99):.0f} ms; mask p50 {_pct(tot.mask_times_us, .5):.0f} us, "
            f"p99 {_pct(tot.mask_times_us, .99):.0f} us"
        )
    if tot.regex_chars:
        rows.append(
            f"regex size (chars): p50 {_pct(tot.regex_chars, .5):.0f}, p99 {_pct(tot.regex_chars, .99):.0f}, "
            f"max {max(tot.regex_chars)}"
        )
    rows.append("")
    rows.append("compile errors by reason (schemas):")
    for name, s in items:
        if s.compile_errors:
            errs = ", ".join(f"{k} {v}" for k, v in s.compile_errors.most_common())
            rows.append(f"  {name}: {errs}")
    if tot.ignored_formats:
        names = ", ".join(f"{k!r} {v}" for k, v in tot.ignored_formats.most_common(12))
        more = len(tot.ignored_formats) - 12
        rows.append(
            f"format names JSON Schema does not define, ignored as annotations (schemas): {names}"
            + (f", and {more} more" if more > 0 else "")
        )
    if tot.match_timeouts:
        rows.append(f"match timeouts: {tot.match_timeouts}")
    if tot.empty_correct:
        rows.append(
            f"unsatisfiable schemas (EmptyLanguageError) whose instances are all invalid: {tot.empty_correct} "
            "(their tests count as passing; the schemas do not)"
        )
    return "\n".join(rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python benchmarks/coverage.py",
        description="Compile JSON Schema test data to regexes and check the instances.",
    )
    ap.add_argument("paths", nargs="+", help="files or folders (test suite or JSONSchemaBench)")
    ap.add_argument("--limit", type=int, default=None, help="check at most N schemas")
    ap.add_argument("--seed", type=int, default=None, help="sample --limit schemas at random with this seed")
    ap.add_argument("--tokenizer", default=None, help="also build the token automaton with this tokenizer")
    ap.add_argument("--whitespace", choices=["compact", "flexible"], default="compact")
    ap.add_argument("--property-order", choices=["schema", "any"], default="schema")
    ap.add_argument("--allow-unenforced", action="store_true")
    ap.add_argument(
        "--additional-properties", choices=["declared", "spec"], default="declared",
        help="'spec': generate extra properties wherever the schema allows them",
    )
    ap.add_argument(
        "--unknown-formats", choices=["annotation", "error"], default="annotation",
        help="'annotation' (default): ignore format names JSON Schema does not define (validators "
        "ignore them too) and refuse defined ones the compiler cannot enforce; 'error': refuse "
        "every format without a pattern",
    )
    ap.add_argument("--timeout", type=float, default=10.0, help="compile time budget per schema (s)")
    ap.add_argument(
        "--schema-draft", choices=["2020-12", "2019-09", "7", "6", "4"], default=None,
        help="draft of schemas without $schema (default 2020-12); e.g. 4 for the test suite's draft4/",
    )
    ap.add_argument("--optional", action="store_true", help="include optional/ test folders")
    ap.add_argument("--show-failures", type=int, default=0, help="print up to N false accepts/rejects")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    opts = SchemaOptions(
        whitespace=args.whitespace,
        property_order=args.property_order,
        allow_unenforced=args.allow_unenforced,
        time_budget_s=args.timeout,
        additional_properties=args.additional_properties,
        unknown_formats=args.unknown_formats,
        draft=args.schema_draft,
    )
    rep = run_coverage(
        args.paths,
        tokenizer=args.tokenizer,
        options=opts,
        limit=args.limit,
        progress=not args.no_progress,
        sample_seed=args.seed,
        include_optional=args.optional,
    )
    print(format_table(rep))
    if args.show_failures:
        tot = rep.total()
        print("\nfalse accepts:")
        for c in tot.false_accept_cases[: args.show_failures]:
            print("  ", c)
        print("false rejects:")
        for c in tot.false_reject_cases[: args.show_failures]:
            print("  ", c)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
