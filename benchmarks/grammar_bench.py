"""Grammar-engine benchmark: JSON Schema compile time, masks along real outputs, token-level coverage.

On the qwen2 vocabulary, for every schema of the JSONSchemaBench development split
(``../shared/data/jsonschemabench-dev/data``) and of the JSON Schema Test Suite draft2020-12
(``../shared/data/json-schema-test-suite/draft2020-12``, without ``optional/``):

1. **compile time, cold** (no disk cache; one fresh grammar per schema): our compiler and the
   lazy engine (``schema_to_regex`` + ``compile_grammar`` of the regex, or of a recursive schema's
   Lark grammar as the Generator does, + a fresh matcher's first mask) beside
   llguidance's own JSON Schema compiler on the same schema in the same process
   (``LLMatcher(tokenizer, LLMatcher.grammar_from_json_schema(schema))`` + its first
   ``compute_bitmask()``; a schema it refuses is ``is_error()``), and, on a seeded sample
   (``--automaton-sample N``), the eager automaton engine;
2. **masks along real outputs**: each valid instance serialised compactly (the instance's key
   order, or the compiler's canonical order where our regex does not match that), tokenised by the
   qwen2 tokenizer, and ``bitmask()`` timed at every position with a fresh matcher per instance,
   for our lazy engine and for llguidance's JSON grammar (until the first token it refuses);
3. **coverage at the token level**: a schema passes when every valid instance's tokens are
   accepted token by token, ending accepting (EOS allowed), and every invalid one is refused (a
   token refused or EOS not allowed at the end). Beside it the string level of
   ``benchmarks/coverage.py`` (the regex with ``re``/``regex`` fullmatch) on the same texts: every
   text on which the two disagree is a bug in the engine or in the regex dialect (our regex as
   llguidance's Rust ``regex-syntax`` reads it) and is listed with its text;
4. the same over the JSON Schema Test Suite draft2020-12 (false accepts must be 0).

Schemas run in worker processes (``--workers``); each schema has a time limit (``--timeout``,
20 s: the compiler's own time budget, a SIGALRM in the worker, and a hard kill by the parent past
three times that). Times are wall-clock on a shared machine: figures to read, nothing asserted.

``python benchmarks/grammar_bench.py [--limit N] [--seed S] [--workers W] [--automaton-sample N] [--json OUT]
[--additional-properties declared|spec]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import multiprocessing as mp
import random
import signal
import sys
import time
from collections import Counter
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Optional, Sequence

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
DEV = DATA / "jsonschemabench-dev" / "data"
JSTS = DATA / "json-schema-test-suite" / "draft2020-12"


def _load_coverage():
    """benchmarks/coverage.py as a module (by path: a ``coverage`` package may shadow the name)."""
    name = "_cs_coverage_runner"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "coverage.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


class _Alarm(Exception):
    """Raised by SIGALRM inside a worker: this schema ran past its time limit."""


def _on_alarm(signum, frame):  # noqa: ARG001
    raise _Alarm()


# ---------------------------------------------------------------------------
# the worker side: everything about one schema


class _Worker:
    """Per-process state: tokenizer, vocabulary, llguidance tokenizer (built once per process)."""

    def __init__(self, tokenizer_name: str, timeout: float, match_timeout: float = 5.0,
                 additional_properties: str = "declared") -> None:
        import torch

        torch.set_num_threads(1)
        self.cov = _load_coverage()
        from constrained_spec.grammar.backends.llguidance import greedy_encoder_for, lazy_tokenizer
        from constrained_spec.grammar.json_schema import SchemaOptions
        from constrained_spec.grammar.vocab import build_vocabulary

        self.tokenizer = self.cov.load_tokenizer(tokenizer_name)
        self.vocab = build_vocabulary(self.tokenizer)
        self.eos = self.vocab.eos_token_id
        self.encode_text = lambda s: self.tokenizer.encode(s, add_special_tokens=False)
        self.llg_tokenizer = lazy_tokenizer(self.vocab, self.encode_text)
        self.greedy = greedy_encoder_for(self.vocab)
        self.timeout = timeout
        self.match_timeout = match_timeout
        self.options = SchemaOptions(time_budget_s=timeout, additional_properties=additional_properties)
        self._automaton = None
        signal.signal(signal.SIGALRM, _on_alarm)

    # -- helpers ------------------------------------------------------------------------------
    def token_ids(self, text: str) -> tuple[list[int], bool]:
        """The tokenizer's ids of ``text``; longest-match over the vocabulary where they do not spell
        its exact bytes (the tokenizer normalises to NFC; special-token text). -> (ids, canonical)."""
        raw = text.encode("utf-8")
        ids = self.encode_text(text)
        tokens = self.vocab.tokens
        if all(i in tokens for i in ids) and b"".join(tokens[i] for i in ids) == raw:
            return ids, True
        return self.greedy(raw), False

    def automaton(self):
        if self._automaton is None:
            from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler

            self._automaton = AutomatonCompiler(self.vocab, disk_cache=False, compile_timeout=self.timeout)
        return self._automaton

    def _alarm(self, seconds: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))

    @staticmethod
    def _disarm() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    # -- one schema ---------------------------------------------------------------------------
    def run(self, case: dict, run_automaton: bool) -> dict:
        from llguidance import LLMatcher

        from constrained_spec.errors import EmptyLanguageError
        from constrained_spec.grammar.backends.llguidance import compile_grammar
        from constrained_spec.grammar.json_schema import canonical_key_orders, schema_to_regex

        cov = self.cov
        out: dict[str, Any] = {"set": case["set"], "category": case["category"], "name": case["name"],
                               "tests": len(case["tests"])}
        schema = case["schema"]

        # 1a. our compiler + lazy engine
        regex = None
        grammar = None
        t0 = time.perf_counter()
        self._alarm(self.timeout)
        try:
            try:
                compiled = schema_to_regex(schema, self.options)
                regex = compiled.regex
                out["regex_s"] = time.perf_counter() - t0
                out["regex_chars"] = len(regex)
                # as the Generator does: a recursive schema's Lark grammar where there is one
                # (nesting unbounded), else the regex
                kind, text = ("lark", compiled.lark) if compiled.lark else ("regex", regex)
                out["engine"] = kind
                try:
                    grammar = compile_grammar(kind, text, self.vocab, self.encode_text)
                    grammar.matcher().bitmask()
                    out["ours_s"] = time.perf_counter() - t0
                    out["ours"] = "ok"
                except _Alarm:
                    raise
                except Exception as e:  # noqa: BLE001 - the regex compiled in Python, not in llguidance
                    out["ours"] = "lazy-error"
                    out["lazy_error"] = f"{type(e).__name__}: {e}"[:500]
            except _Alarm:
                out["ours"] = "timeout"
            except EmptyLanguageError:
                out["ours"] = "empty"
            except Exception as e:  # noqa: BLE001 - a crash must not stop the run
                out["ours"] = "error"
                out["ours_reason"] = cov._error_reason(e)
        finally:
            self._disarm()
        out["ours_elapsed_s"] = time.perf_counter() - t0

        # 1b. llguidance's own JSON compiler
        llg = None
        t0 = time.perf_counter()
        try:
            llg = LLMatcher(self.llg_tokenizer, LLMatcher.grammar_from_json_schema(schema), log_level=0)
            if llg.is_error():
                out["llg"] = "refused"
                out["llg_error"] = llg.get_error()[:300]
                llg = None
            else:
                llg.compute_bitmask()
                out["llg_s"] = time.perf_counter() - t0
                out["llg"] = "error-after-mask" if llg.is_error() else "ok"
                if llg.is_error():
                    llg = None
        except Exception as e:  # noqa: BLE001 - grammar_from_json_schema raises on some schemas
            out["llg"] = "refused"
            out["llg_error"] = f"{type(e).__name__}: {e}"[:300]
            llg = None

        # 1c. the automaton engine on a sample
        if run_automaton and regex is not None:
            t0 = time.perf_counter()
            self._alarm(self.timeout * 1.5)
            try:
                self.automaton().compile(regex)
                out["automaton_s"] = time.perf_counter() - t0
                out["automaton"] = "ok"
            except _Alarm:
                out["automaton"] = "timeout"
            except Exception as e:  # noqa: BLE001
                out["automaton"] = f"error:{type(e).__name__}"
            finally:
                self._disarm()

        # 2-3. instances
        self._alarm(max(60.0, 3 * self.timeout))
        try:
            self._instances(case, out, regex, grammar, llg, canonical_key_orders)
        except _Alarm:
            out["instances_timeout"] = True
        finally:
            self._disarm()
        return out

    def _instances(self, case: dict, out: dict, regex: Optional[str], grammar, llg, canonical_key_orders) -> None:
        cov = self.cov
        cre = None
        if regex is not None:
            try:  # the regex package wherever it is installed: Python's re cannot be interrupted (one
                # invalid Snowplow instance backtracks for minutes in re); same syntax and semantics
                cre = cov._rx.compile(regex) if cov._rx is not None else cov._compile(regex)
            except Exception as e:  # noqa: BLE001
                out["py_regex_error"] = f"{type(e).__name__}: {e}"[:300]
        order = None
        inst: list[dict] = []
        ours_us: list[float] = []
        llg_us: list[float] = []
        diffs: list[dict] = []
        out["instances"] = inst  # filled as it goes: a time-out leaves the instances checked so far
        out["ours_mask_us"] = ours_us
        out["llg_mask_us"] = llg_us
        out["diffs"] = diffs
        for data, valid in case["tests"]:
            texts = [cov._dumps(data)]
            if isinstance(data, (dict, list)):
                if order is None:
                    order = canonical_key_orders(case["schema"])
                texts.append(cov._dumps(cov.reorder_keys(data, order)))
            texts = [t for t in dict.fromkeys(texts) if t is not None]
            empty = out.get("ours") == "empty"  # no value satisfies the schema: every instance is refused
            row: dict[str, Any] = {"valid": valid, "artefact": cov._is_artefact(data),
                                   "string": False if cre is not None or empty else None,
                                   "token": False if grammar is not None or empty else None,
                                   "llg": False if llg is not None else None}
            if not texts:
                inst.append(row)
                continue
            string_ok: list[Optional[bool]] = []
            if cre is not None:
                string_ok = [cov._fullmatch(cre, t, self.match_timeout) for t in texts]
                row["string"] = any(bool(s) for s in string_ok)
                if any(s is None for s in string_ok):
                    row["string_timeout"] = True
            ids_of = [self.token_ids(t) for t in texts]
            if any(not canon for _, canon in ids_of):
                row["noncanonical"] = True
            if grammar is not None:
                token_ok = [self._lazy_accepts(grammar, ids) for ids, _ in ids_of]
                row["token"] = any(token_ok)
                for t, s, k in zip(texts, string_ok, token_ok):
                    if s is not None and bool(s) != k:
                        # a valid value nested deeper than the regex unrolls, which the grammar takes
                        deeper = out.get("engine") == "lark" and valid and k and not s
                        diffs.append({"text": t[:400], "valid": valid, "string": bool(s), "token": k, "deeper": deeper})
            if llg is not None:
                row["llg"] = any(self._llg_accepts(llg, ids) for ids, _ in ids_of)
            if valid:  # masks along the path our regex takes (instance order, else canonical order)
                path = 0
                if string_ok and not string_ok[0]:
                    path = next((i for i, s in enumerate(string_ok) if s), 0)
                ids = ids_of[path][0]
                if grammar is not None:
                    walked, mismatch = self._walk_lazy(grammar, ids, ours_us)
                    row["lazy_walk"] = walked
                    if mismatch:
                        row["mask_mismatch"] = mismatch
                if llg is not None:
                    row["llg_walk"] = self._walk_llg(llg, ids, llg_us)
            inst.append(row)

    def _lazy_accepts(self, grammar, ids: list[int]) -> bool:
        m = grammar.matcher()
        return m.count_allowed(ids + [self.eos]) == len(ids) + 1

    def _llg_accepts(self, template, ids: list[int]) -> bool:
        m = template.deep_copy()
        if m.validate_tokens(ids) != len(ids):
            return False
        return bool(m.consume_tokens(ids)) and bool(m.is_accepting())

    def _walk_lazy(self, grammar, ids: list[int], times: list[float]) -> tuple[int, int]:
        """Time bitmask() at every position (the end included) with a fresh matcher; -> (tokens
        accepted, positions where the mask and advance() disagree on the next token or EOS)."""
        from constrained_spec.errors import GrammarError

        m = grammar.matcher()
        clock = time.perf_counter
        mismatch = 0
        for n, tid in enumerate(ids + [self.eos]):
            t0 = clock()
            mask = m.bitmask()
            times.append((clock() - t0) * 1e6)
            word = int(mask[tid >> 5]) & 0xFFFFFFFF
            bit = bool((word >> (tid & 31)) & 1)
            if tid == self.eos and n == len(ids):
                mismatch += bit != m.is_accepting()
                return n, mismatch
            try:
                m.advance(tid)
            except GrammarError:
                mismatch += bit
                return n, mismatch
            mismatch += not bit
        return len(ids), mismatch

    def _walk_llg(self, template, ids: list[int], times: list[float]) -> int:
        m = template.deep_copy()
        clock = time.perf_counter
        for n, tid in enumerate(ids):
            t0 = clock()
            m.compute_bitmask()
            times.append((clock() - t0) * 1e6)
            if not m.consume_token(tid):
                return n
        t0 = clock()
        m.compute_bitmask()
        times.append((clock() - t0) * 1e6)
        return len(ids)


def _worker_main(conn, tokenizer_name: str, timeout: float, match_timeout: float,
                 additional_properties: str = "declared") -> None:
    worker = _Worker(tokenizer_name, timeout, match_timeout, additional_properties)
    conn.send(("ready", None))
    while True:
        job = conn.recv()
        if job is None:
            return
        index, case, run_automaton = job
        try:
            result = worker.run(case, run_automaton)
        except Exception as e:  # noqa: BLE001 - report, keep the worker
            result = {"set": case["set"], "category": case["category"], "name": case["name"], "tests": len(case["tests"]),
                      "ours": "crash", "ours_reason": f"{type(e).__name__}: {e}"[:300]}
        conn.send((index, result))


# ---------------------------------------------------------------------------
# the parent side: a small pool whose workers can be killed one by one


class _Pool:
    def __init__(self, n: int, tokenizer_name: str, timeout: float, match_timeout: float,
                 additional_properties: str = "declared") -> None:
        self.ctx = mp.get_context("spawn")
        self.additional_properties = additional_properties
        self.match_timeout = match_timeout
        self.tokenizer_name = tokenizer_name
        self.timeout = timeout
        self.failed_starts = 0
        self.slots: list[dict] = [self._spawn() for _ in range(n)]

    def _spawn(self) -> dict:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker_main, args=(child, self.tokenizer_name, self.timeout, self.match_timeout,
                                                                 self.additional_properties))
        # not a daemon: the automaton engine builds in a child process of its own
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "job": None, "since": None, "ready": False}

    def run(self, jobs: list[tuple], hard_limit: float, on_result) -> None:
        pending = list(reversed(jobs))
        busy = 0
        while pending or busy:
            for slot in self.slots:
                if slot["ready"] and slot["job"] is None and pending:
                    job = pending.pop()
                    slot["conn"].send(job)
                    slot["job"], slot["since"] = job, time.monotonic()
                    busy += 1
            conns = [s["conn"] for s in self.slots]
            for conn in wait(conns, timeout=1.0):
                slot = next(s for s in self.slots if s["conn"] is conn)
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):
                    kind, payload = None, None
                if kind == "ready":
                    slot["ready"] = True
                    continue
                if kind is None:  # the worker died (e.g. out of memory)
                    busy -= self._replace(slot, on_result, "died")
                    continue
                on_result(kind, payload)
                slot["job"] = None
                busy -= 1
            now = time.monotonic()
            for slot in self.slots:
                if slot["job"] is not None and now - slot["since"] > hard_limit:
                    busy -= self._replace(slot, on_result, "killed")

    def _replace(self, slot: dict, on_result, why: str) -> int:
        """Kill a worker, report its job as ``why``, start a fresh one; -> 1 if it had a job."""
        job = slot["job"]
        if not slot["ready"]:
            self.failed_starts += 1
            if self.failed_starts > 3:
                raise RuntimeError("worker processes fail to start (see their stderr)")
        slot["proc"].kill()
        slot["proc"].join(5)
        slot["conn"].close()
        if job is not None:
            index, case, _ = job
            on_result(index, {"set": case["set"], "category": case["category"], "name": case["name"],
                              "tests": len(case["tests"]), "ours": why, "llg": why})
        fresh = self._spawn()
        slot.clear()
        slot.update(fresh)
        return 1 if job is not None else 0

    def close(self) -> None:
        for slot in self.slots:
            try:
                slot["conn"].send(None)
            except OSError:
                pass
        for slot in self.slots:
            slot["proc"].join(5)
            if slot["proc"].is_alive():
                slot["proc"].kill()


# ---------------------------------------------------------------------------
# figures


def _pct(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(math.ceil(q * len(v))) - 1))
    return v[k]


def _dist(values: Sequence[float], scale: float = 1.0) -> dict:
    return {"n": len(values), "p50": _pct(values, .5) * scale, "p90": _pct(values, .9) * scale,
            "p99": _pct(values, .99) * scale, "max": (max(values) * scale) if values else float("nan")}


def _classify(rows: list[dict], key: str) -> tuple[Optional[bool], int, int, int]:
    """(schema passes, false accepts, false rejects, artefact rejects) of one engine's verdicts
    ``key`` over a schema's instances; passes is None where the engine gave no verdict (not compiled)."""
    if any(r.get(key) is None for r in rows):
        return None, 0, 0, 0
    fa = fr = art = 0
    for r in rows:
        if r[key] == r["valid"]:
            continue
        if r[key]:
            fa += 1
        elif r["artefact"]:
            art += 1
        else:
            fr += 1
    return fa + fr + art == 0, fa, fr, art


def summarise(results: list[dict], timeout: float) -> dict:
    """All figures of one set of schemas (dev or JSTS)."""
    s: dict[str, Any] = {"schemas": len(results), "tests": sum(r["tests"] for r in results)}
    ours_ok = [r for r in results if r.get("ours") == "ok"]
    s["ours_status"] = dict(Counter(r.get("ours") for r in results))
    s["ours_errors"] = dict(Counter(r.get("ours_reason") for r in results if r.get("ours") == "error").most_common())
    s["ours_timeouts"] = sum(1 for r in results if r.get("ours") in ("timeout", "killed")
                             or (r.get("ours") == "error" and r.get("ours_reason") == "limit" and r.get("ours_elapsed_s", 0) >= 0.95 * timeout))
    s["ours_compile_ms"] = _dist([r["ours_s"] for r in ours_ok], 1e3)
    s["ours_regex_ms"] = _dist([r["regex_s"] for r in results if "regex_s" in r], 1e3)
    s["ours_all_ms"] = _dist([r["ours_elapsed_s"] for r in results if "ours_elapsed_s" in r], 1e3)
    s["llg_status"] = dict(Counter(r.get("llg") for r in results))
    s["llg_compile_ms"] = _dist([r["llg_s"] for r in results if "llg_s" in r], 1e3)
    s["llg_refused"] = sum(1 for r in results if r.get("llg") == "refused")
    auto = [r for r in results if "automaton" in r]
    if auto:
        s["automaton_status"] = dict(Counter(r["automaton"] for r in auto))
        s["automaton_compile_ms"] = _dist([r["automaton_s"] for r in auto if "automaton_s" in r], 1e3)
        s["automaton_ours_compile_ms_same_schemas"] = _dist([r["ours_s"] for r in auto if "ours_s" in r], 1e3)
    ours_us = [t for r in results for t in r.get("ours_mask_us", [])]
    llg_us = [t for r in results for t in r.get("llg_mask_us", [])]
    s["ours_mask_us"] = _dist(ours_us)
    s["llg_mask_us"] = _dist(llg_us)
    paths = [i for r in results for i in r.get("instances", []) if i["valid"] and "lazy_walk" in i]
    s["lazy_mask_vs_advance_mismatches"] = sum(i.get("mask_mismatch", 0) for i in paths)
    s["llg_paths"] = sum(1 for r in results for i in r.get("instances", []) if i["valid"] and "llg_walk" in i)
    s["noncanonical_texts"] = sum(1 for r in results for i in r.get("instances", []) if i.get("noncanonical"))
    # coverage (as benchmarks/coverage.py: a schema passes when compiled and every instance is right;
    # false accepts/rejects are counted over the schemas the engine compiled, and the unsatisfiable
    # ones whose regex is empty)
    for key, name in (("token", "lazy_token"), ("string", "string"), ("llg", "llg_json_token")):
        passing = fa = fr = art = judged = 0
        fa_cases: list = []
        for r in results:
            ok, a, b, c = _classify(r.get("instances", []), key)
            compiled = r.get("llg") == "ok" if key == "llg" else r.get("ours") == "ok"
            if key == "string":
                compiled = "regex_s" in r and "py_regex_error" not in r
            if ok is None or r.get("instances_timeout") or not (compiled or (key != "llg" and r.get("ours") == "empty")):
                continue
            judged += 1
            passing += ok and compiled
            fa += a
            fr += b
            art += c
            if a:
                fa_cases.append(r["name"])
        s[name] = {"passing": passing, "judged": judged, "false_accepts": fa, "false_rejects": fr, "artefact_rejects": art,
                   "false_accept_schemas": fa_cases[:50]}
    # disagreements between the token level and the string level
    disagree = []
    deeper = []
    for r in results:
        for d in r.get("diffs", []):
            (deeper if d.get("deeper") else disagree).append({"category": r["category"], "name": r["name"], **d})
        if r.get("diffs") and all(d.get("deeper") for d in r["diffs"]):
            continue
        if r.get("ours") == "lazy-error":
            disagree.append({"category": r["category"], "name": r["name"], "lazy_error": r.get("lazy_error")})
        tok_pass = bool(_classify(r.get("instances", []), "token")[0]) and r.get("ours") == "ok"
        str_pass = bool(_classify(r.get("instances", []), "string")[0]) and "regex_s" in r and "py_regex_error" not in r
        if tok_pass != str_pass and not r.get("diffs") and r.get("ours") != "lazy-error":
            disagree.append({"category": r["category"], "name": r["name"], "note": f"schema verdict differs: token {tok_pass}, string {str_pass}",
                             "ours": r.get("ours")})
    s["token_vs_string_disagreements"] = disagree
    s["grammar_schemas"] = sum(1 for r in results if r.get("engine") == "lark")
    s["grammar_deeper_than_regex"] = deeper
    s["instance_timeouts"] = [r["name"] for r in results if r.get("instances_timeout")]
    s["string_match_timeouts"] = sum(1 for r in results for i in r.get("instances", []) if i.get("string_timeout"))
    return s


def format_table(name: str, s: dict) -> str:
    def d(x: dict, unit: str) -> str:
        return f"p50 {x['p50']:.2f} / p90 {x['p90']:.2f} / p99 {x['p99']:.2f} / max {x['max']:.1f} {unit} (n={x['n']})"

    def m(x: dict) -> str:
        return f"p50 {x['p50']:.0f} / p99 {x['p99']:.0f} / max {x['max']:.0f} us (n={x['n']})"

    lines = [f"== {name}: {s['schemas']} schemas, {s['tests']} test instances"]
    lines.append(f"compile   ours (schema_to_regex + lazy + 1st mask): {d(s['ours_compile_ms'], 'ms')}")
    lines.append(f"          ours schema_to_regex only:                {d(s['ours_regex_ms'], 'ms')}")
    lines.append(f"          llguidance JSON (+ 1st mask):             {d(s['llg_compile_ms'], 'ms')}")
    if "automaton_compile_ms" in s:
        lines.append(f"          automaton engine (sample):                {d(s['automaton_compile_ms'], 'ms')} {s['automaton_status']}")
        lines.append(f"          ours on the same sample:                  {d(s['automaton_ours_compile_ms_same_schemas'], 'ms')}")
    lines.append(f"          ours: {s['ours_status']}; timeouts (>= limit) {s['ours_timeouts']}; "
                 f"{s.get('grammar_schemas', 0)} recursive schemas through their Lark grammar")
    if s["ours_errors"]:
        lines.append(f"          ours errors: {s['ours_errors']}")
    lines.append(f"          llguidance JSON: {s['llg_status']} (refused {s['llg_refused']})")
    lines.append(f"masks     ours lazy bitmask():          {m(s['ours_mask_us'])}")
    lines.append(f"          llguidance JSON compute_bitmask(): {m(s['llg_mask_us'])}")
    lines.append(f"          lazy mask vs advance() mismatches: {s['lazy_mask_vs_advance_mismatches']}; texts not spelt canonically: {s['noncanonical_texts']}")
    head = f"{'coverage':<34}{'passing':>8}{'judged':>8}{'f-acc':>7}{'f-rej':>7}{'artef':>7}"
    lines.append(head)
    for key, label in (("lazy_token", "lazy engine, token level"), ("string", "our regex, string level (regex)"),
                       ("llg_json_token", "llguidance JSON, token level")):
        c = s[key]
        lines.append(f"{label:<34}{c['passing']:>8}{c['judged']:>8}{c['false_accepts']:>7}{c['false_rejects']:>7}{c['artefact_rejects']:>7}")
    lines.append(f"token-level vs string-level disagreements: {len(s['token_vs_string_disagreements'])}"
                 f" (besides {len(s.get('grammar_deeper_than_regex', []))} valid texts nested deeper than the unrolled"
                 " regex, which a recursive schema's grammar accepts)")
    for x in s["token_vs_string_disagreements"][:20]:
        lines.append(f"  {json.dumps(x, ensure_ascii=False)[:400]}")
    if s["instance_timeouts"]:
        lines.append(f"schemas whose instance checks ran out of time (not judged): {s['instance_timeouts']}")
    if s["string_match_timeouts"]:
        lines.append(f"instances whose string-level match timed out (counted as not matched, as coverage.py does): {s['string_match_timeouts']}")
    return "\n".join(lines)


def _cases(path: Path, set_name: str, limit: Optional[int], seed: Optional[int]) -> list[dict]:
    cov = _load_coverage()
    cases = [{"set": set_name, "category": c.category, "name": c.name, "schema": c.schema,
              "tests": [(data, valid) for data, valid, _ in c.tests]} for c in cov.iter_cases([path])]
    if limit is not None and limit < len(cases):
        if seed is not None:
            cases = random.Random(seed).sample(cases, limit)
        else:
            cases = cases[:limit]
    return cases


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/grammar_bench.py", description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="the first N schemas of each set (a seeded sample with --seed)")
    ap.add_argument("--seed", type=int, default=None, help="sample --limit schemas, and the automaton sample, with this seed")
    ap.add_argument("--json", default=None, help="write every figure (and per-schema rows) as JSON here")
    ap.add_argument("--tokenizer", default="qwen2")
    ap.add_argument("--timeout", type=float, default=20.0, help="per-schema compile limit (s)")
    ap.add_argument("--match-timeout", type=float, default=5.0, help="string-level regex match limit per text (s)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (timings are per process)")
    ap.add_argument("--automaton-sample", type=int, default=0, help="also compile N sampled dev schemas with the automaton engine")
    ap.add_argument("--sets", default="dev,jsts", help="comma list of: dev, jsts")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--additional-properties", default="declared", choices=["declared", "spec"],
                    help="SchemaOptions.additional_properties: 'spec' also generates the additional properties a schema allows")
    args = ap.parse_args(argv)

    sets = [x.strip() for x in args.sets.split(",") if x.strip()]
    jobs_cases: list[dict] = []
    for set_name, path in (("dev", DEV), ("jsts", JSTS)):
        if set_name not in sets:
            continue
        if not path.is_dir():
            print(f"[grammar_bench] {path} is absent: set {set_name} skipped", file=sys.stderr)
            continue
        jobs_cases += _cases(path, set_name, args.limit, args.seed)
    if not jobs_cases:
        print("[grammar_bench] no schemas found", file=sys.stderr)
        return 1
    dev_idx = [i for i, c in enumerate(jobs_cases) if c["set"] == "dev"]
    auto = set(random.Random(args.seed or 0).sample(dev_idx, min(args.automaton_sample, len(dev_idx))))
    jobs = [(i, c, i in auto) for i, c in enumerate(jobs_cases)]

    results: list[Optional[dict]] = [None] * len(jobs)
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc="schemas", unit="schema", file=sys.stderr)

    def on_result(index: int, result: dict) -> None:
        results[index] = result
        if bar is not None:
            bar.update(1)

    start = time.time()
    pool = _Pool(args.workers, args.tokenizer, args.timeout, args.match_timeout, args.additional_properties)
    try:
        pool.run(jobs, hard_limit=3 * args.timeout + 120.0, on_result=on_result)
    finally:
        pool.close()
        if bar is not None:
            bar.close()
    wall = time.time() - start

    figures: dict[str, Any] = {"command": " ".join([Path(sys.argv[0]).name] + list(argv if argv is not None else sys.argv[1:])),
                               "wall_s": wall, "workers": args.workers, "tokenizer": args.tokenizer, "timeout_s": args.timeout,
                               "sets": {}}
    out_lines = []
    for set_name, label in (("dev", "JSONSchemaBench dev"), ("jsts", "JSON Schema Test Suite draft2020-12")):
        rows = [r for r in results if r is not None and r["set"] == set_name]
        if not rows:
            continue
        s = summarise(rows, args.timeout)
        figures["sets"][set_name] = s
        out_lines.append(format_table(label, s))
    out_lines.append(f"wall time {wall:.0f} s, {args.workers} worker process(es), tokenizer {args.tokenizer}")
    print("\n\n".join(out_lines))
    if args.json:
        slim = []
        for r in results:
            if r is None:
                continue
            row = {k: v for k, v in r.items() if k not in ("ours_mask_us", "llg_mask_us", "instances", "diffs")}
            rows = r.get("instances", [])
            row["valid"] = sum(1 for i in rows if i["valid"])
            for key in ("token", "string", "llg"):
                row[f"{key}_pass"] = _classify(rows, key)[0]
            slim.append(row)
        figures["schemas"] = slim
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=1, ensure_ascii=False, default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
