"""``python benchmarks/bench.py``: speed of constrained speculative decoding against its baselines.

Run from a source checkout (it reads ``workload.py``, ``heldout.py`` and ``peer_outlines.py`` beside
it and the schemas in ``schemas/``) against the installed ``constrained_spec`` package. Runs a fixed
workload (``benchmarks/workload.py``: extraction and generative prompts over the example schemas;
``benchmarks/heldout.py``, never tuned on) through these modes, interleaved - for every prompt and
setting, every mode runs before the next prompt starts, so machine drift hits all modes alike:

* ``target``            constrained decoding with the target alone (k = 0): the baseline;
* ``k{K}``              constrained speculative decoding, fixed draft length K, draft proposer only;
* ``k{K}+grammar``      ... plus grammar-forced proposals; ``k{K}+grammar+lookup`` plus prompt lookup;
* ``adaptive``          adaptive draft length (cap = the largest K), all proposers available;
* ``peer:outlines``     outlines (transformers backend, outlines-core index) on the same target
                        model, schemas and prompts, in a subprocess of its own virtual environment;
* ``hf-assist``         transformers' ``generate(assistant_model=draft)``, unconstrained greedy: a
                        tokens/s reference only (its output is not constrained JSON).

Settings: greedy, and sampled (temperature 0.7). It prints figures and writes ``results.json``,
``table.md`` and ``chart.png`` into ``--out``. It asserts nothing about time: it is a measuring
command, not a test. ``run_benchmark`` takes an already built :class:`~constrained_spec.api.Generator`
so tests can run the machinery on tiny models.

Mask time (``mask_calls``, ``mask_us_per_call_p50/p99``, ``mask_us_per_token``) is what the loop
reports through its ``DecodeHooks(on_grammar_call=...)`` hook: the seconds of every grammar call
made through the matcher by the loop or a proposer - allowed-token masks and bitmasks, forced-token
and forced-string checks, token tests (``count_allowed``, prefix checks) and advances - each call
counted once, wherever in the loop it happened. Per-state masks start cold in every run (unless
``--warm-masks``), so a run pays for building the masks of the states it visits. (Runs before this
hook timed only the automaton's mask methods - ``allowed_ids``, ``single_allowed``, ``bitmask``,
``allowed_mask`` - so they counted fewer, larger calls and less work per token; their per-call
figures are not comparable with these.) ``mask_us_per_token_stats`` is the loop's own
``stats.mask_seconds`` per token: the same calls, so equal to ``mask_us_per_token``.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import os
import platform
import queue
import resource
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Sequence

from constrained_spec.engine.stats import DecodeHooks
from constrained_spec.prompts.type_sketch import resolve_pointer

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_KS = (1, 2, 3, 4, 5, 6, 7, 8)
QUICK_KS = (2, 4)
ALL_PROPOSERS = ("draft", "grammar", "lookup")
FAMILIES = ("target", "fixed", "proposers", "adaptive", "peer", "hf-assist")
PEER_NAME = "peer:outlines"
HF_NAME = "hf-assist"

# ----------------------------------------------------------------------------- modes


@dataclass(frozen=True)
class Mode:
    """One way of decoding a request."""

    name: str
    family: str  # one of FAMILIES
    k: int = 0
    proposers: tuple[str, ...] | None = None  # None: do not pass the option
    adaptive: bool = False
    draft_plan: str | None = None  # None: the Generator's (DecodeConfig.draft_plan)

    @property
    def kind(self) -> str:
        return {"peer": "peer", "hf-assist": "hf-assist"}.get(self.family, "project")


def build_modes(
    ks: Sequence[int] = DEFAULT_KS,
    proposer_k: int | None = None,
    *,
    fixed: bool = True,
    proposers: bool = True,
    adaptive: bool = True,
    peer: bool = True,
    hf_assist: bool = True,
    select: Sequence[str] | None = None,
    all_proposer_ks: Sequence[int] = (),
) -> list[Mode]:
    """The mode list, baseline first. ``select``: family names or mode names to keep.
    ``all_proposer_ks``: more fixed k with every proposer (``k{K}+grammar+lookup``), the fixed-k
    sweep to hold adaptive k against."""
    ks = sorted({int(k) for k in ks if int(k) > 0})
    pk = proposer_k if proposer_k is not None else (4 if 4 in ks or not ks else ks[len(ks) // 2])
    modes = [Mode("target", "target", 0)]
    if fixed:
        modes += [Mode(f"k{k}", "fixed", k, ("draft",)) for k in ks]
    if proposers:
        modes += [Mode(f"k{pk}+grammar", "proposers", pk, ("draft", "grammar"))]
        modes += [Mode(f"k{k}+grammar+lookup", "proposers", k, ALL_PROPOSERS)
                  for k in sorted({pk, *(int(x) for x in all_proposer_ks if int(x) > 0)})]
    if adaptive:
        modes.append(Mode("adaptive", "adaptive", max(ks) if ks else pk, ALL_PROPOSERS, adaptive=True))
    if peer:
        modes.append(Mode(PEER_NAME, "peer"))
    if hf_assist:
        modes.append(Mode(HF_NAME, "hf-assist"))
    if select:
        wanted = {s.strip() for s in select if s.strip()}
        # named only: the free proposers without the draft model; the default mode with the draft always used
        modes += [m for m in (Mode("grammar+lookup", "proposers", pk, ("grammar", "lookup")),
                              Mode(f"k{pk}+grammar+lookup+always", "proposers", pk, ALL_PROPOSERS, draft_plan="always"))
                  if m.name in wanted]
        unknown = wanted - set(FAMILIES) - {m.name for m in modes} - {"peer"}
        if unknown:
            raise ValueError(f"unknown mode(s) {sorted(unknown)}; families: {', '.join(FAMILIES)}; modes: {', '.join(m.name for m in modes)}")
        modes = [m for m in modes if m.family in wanted or m.name in wanted or m.name == "target"]
    return modes


# ----------------------------------------------------------------------------- measuring helpers


def _rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except Exception:  # noqa: BLE001
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PeakRSS:
    """Highest resident set size seen while the block runs (sampled every 20 ms), in MiB."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_mb())
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakRSS":
        self.peak = _rss_mb()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb())


class GrammarCallTimer:
    """Per-call microseconds of one run's grammar work, from the loop's ``on_grammar_call`` hook.

    Pass :attr:`hooks` to ``Generator.run``: every grammar call the loop or a proposer makes through
    the matcher (masks, forced-token checks, token tests, advances) lands in :attr:`calls_us`.
    """

    def __init__(self) -> None:
        self.calls_us: list[float] = []
        self.hooks = DecodeHooks(on_grammar_call=self.record)

    def record(self, seconds: float) -> None:
        self.calls_us.append(seconds * 1e6)

    @property
    def total_seconds(self) -> float:
        return sum(self.calls_us) / 1e6


def cold_masks(automaton: Any) -> None:
    """Forget the automaton's lazily built per-state masks, so every run pays for the states it visits."""
    automaton.clear_state_caches()


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of the finite values, or None if there are none."""
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float | None]) -> float | None:
    return percentile([v for v in values if v is not None], 50)


def geomean(values: Sequence[float | None]) -> float | None:
    """Geometric mean of the positive finite values (the mean of ratios that treats 2x and 0.5x alike)."""
    xs = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(math.log(v) for v in xs) / len(xs)) if xs else None


# ----------------------------------------------------------------------------- workloads and answer quality

#: the named workloads of ``--workload`` (files in ``benchmarks/``): the one the defaults were tuned
#: on, and the held-out one written before any tuning (never tuned on)
WORKLOAD_FILES = {"default": "workload.py", "heldout": "heldout.py", "cfg": "cfg_workload.py", "quality": "quality.py"}


class WorkItem:
    """A workload entry tagged with the name of its workload (attributes delegate to the entry)."""

    def __init__(self, workload: str, item: Any) -> None:
        self.workload = workload
        self.item = item

    def __getattr__(self, name: str) -> Any:
        item = self.__dict__.get("item")
        if item is None:
            raise AttributeError(name)
        return getattr(item, name)


def _same_value(got: Any, want: Any) -> bool:
    """JSON equality: numbers by value (1 == 1.0), booleans never equal to numbers."""
    if isinstance(got, bool) or isinstance(want, bool):
        return type(got) is type(want) and got == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)):
        return float(got) == float(want)
    return type(got) is type(want) and got == want


def field_match(text: str | None, expected: dict[str, Any]) -> tuple[int, list[str]]:
    """(fields of ``expected`` the answer ``text`` holds exactly, the pointers it misses);
    an answer that is not JSON misses them all."""
    try:
        doc = json.loads(text) if text is not None else None
    except ValueError:
        return 0, sorted(expected)
    if text is None:
        return 0, sorted(expected)
    missed = []
    for ptr, want in expected.items():
        try:
            got = resolve_pointer(doc, ptr)
        except KeyError:
            missed.append(ptr)
            continue
        if not _same_value(got, want):
            missed.append(ptr)
    return len(expected) - len(missed), missed


def add_derived(records: list[dict[str, Any]], expected: dict[tuple[str | None, str], dict[str, Any]]) -> None:
    """Per record: the end-to-end ratio vs target-only (``e2e_speedup_vs_target``: the target-only
    request's latency / this one's, prefill included, paired within workload, prompt, setting and
    round), the prefill share of its latency, and the exact match of the fields its prompt states
    (``expected``: (workload, prompt id) -> {JSON Pointer: value})."""
    base = {(r.get("workload"), r["prompt"], r["setting"], r.get("round", 0)): r
            for r in records if r["mode"] == "target" and r.get("ok")}
    for r in records:
        b = base.get((r.get("workload"), r["prompt"], r["setting"], r.get("round", 0)))
        if r.get("ok") and b is not None and b.get("latency_s") and r.get("latency_s"):
            r["e2e_speedup_vs_target"] = 1.0 if r is b else b["latency_s"] / r["latency_s"]
        if r.get("ok") and r.get("latency_s") and r.get("prefill_s") is not None:
            r["prefill_share"] = r["prefill_s"] / r["latency_s"]
        if r.get("ok") and b is not None and r is not b and r.get("predicted_speedup"):
            r["predicted_e2e_speedup"] = predicted_e2e_speedup(r, b)
        want = expected.get((r.get("workload"), r["prompt"]))
        if want:
            got, missed = field_match(r.get("text") if r.get("ok") else None, want)
            r.update(fields_expected=len(want), fields_matched=got, fields_missed=missed)


def predicted_e2e_speedup(spec: dict[str, Any], base: dict[str, Any]) -> float | None:
    """The end-to-end ratio the cost model predicts for one request: target-only latency over
    ``outside + P_target + P_draft + D_target / s``, where ``outside`` (prompt build, compile) and
    ``P_target`` (the target's prefill) come from the target-only run of the same prompt,
    ``P_draft`` is this run's draft prefill (what ``draft_window`` controls; 0 where it ran beside the
    target's, ``prefill_overlap``: the slowdown that costs the target's prefill is not modelled), ``D_target`` the
    target-only decode time and ``s`` the decode ratio :func:`predicted_speedup` predicts from
    acceptance and forward costs. Where it matches the measured ratio, prefill and decode account
    for the request's time."""
    try:
        outside = base["latency_s"] - base["wall_s"]
        draft_prefill = 0.0 if spec.get("prefill_overlapped") else (spec.get("draft_prefill_s") or 0.0)
        predicted = (outside + base["prefill_s"] + draft_prefill
                     + base["decode_s"] / spec["predicted_speedup"])
        return base["latency_s"] / predicted if predicted > 0 else None
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def predicted_speedup(spec: Any, base: Any) -> float | None:
    """Speedup predicted from measured acceptance and per-forward costs (None where it cannot be):
    ``(E[tokens/step] / (k_model * c_draft + c_verify(k+1))) / (1 / c_target(1))`` with
    E[tokens/step] = accepted / steps + 1 over model steps (target forwards; grammar-forced
    steps cost no forward in either mode), k_model = draft forwards per step, c_draft the mean
    draft forward (with its masking and sampling), c_verify the mean verify forward of this run,
    c_target(1) the mean target forward of the target-only run of the same request. ``spec`` and
    ``base``: the :class:`~constrained_spec.engine.stats.DecodeStats` of the two runs.
    """
    steps = spec.target_forwards
    if not steps or not base.target_forwards or not spec.verify_seconds or not spec.drafted_tokens:
        return None
    e_tokens = spec.accepted_tokens / steps + 1.0
    k_model = spec.draft_forwards / steps
    c_draft = spec.draft_seconds / spec.draft_forwards if spec.draft_forwards else 0.0
    c_verify = spec.verify_seconds / steps
    c_target1 = base.verify_seconds / base.target_forwards
    cost = k_model * c_draft + c_verify
    return (e_tokens / cost) * c_target1 if cost > 0 else None


# ----------------------------------------------------------------------------- the peer


def find_peer_python(explicit: str | None = None) -> str | None:
    """The interpreter that has ``outlines``: explicit, $CONSTRAINED_SPEC_PEER_PYTHON, a .venv-peer, or ours."""
    candidates = [explicit, os.environ.get("CONSTRAINED_SPEC_PEER_PYTHON"),
                  str(REPO_ROOT / ".venv-peer" / "bin" / "python"), str(REPO_ROOT.parent / ".venv-peer" / "bin" / "python")]
    for c in candidates:
        if c and Path(c).exists():
            return c
    if importlib.util.find_spec("outlines") is not None:
        return sys.executable
    return None


class PeerError(RuntimeError):
    pass


class PeerClient:
    """Talks to ``benchmarks/peer_outlines.py`` over a JSON-lines pipe (one request at a time)."""

    def __init__(self, python: str, model_path: str, threads: int | None = None, timeout: float = 1800.0,
                 log_path: str | Path | None = None, script: str | Path | None = None, dtype: str | None = None,
                 device: str | None = None) -> None:
        self.python, self.model_path, self.threads, self.timeout, self.dtype = python, model_path, threads, timeout, dtype
        self.device = None if device in (None, "cpu") else device
        self.script = str(script or BENCH_DIR / "peer_outlines.py")
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen | None = None
        self.info: dict[str, Any] = {}
        self._lines: queue.Queue[str | None] = queue.Queue()
        self.compiled: dict[str, dict[str, Any]] = {}

    def start(self) -> dict[str, Any]:
        cmd = [self.python, self.script, "--model", self.model_path] + (["--threads", str(self.threads)] if self.threads else []) \
            + (["--dtype", self.dtype] if self.dtype else []) + (["--device", self.device] if self.device else [])
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1, env=env)
        threading.Thread(target=self._reader, daemon=True).start()
        reply = self._read(self.timeout)
        if not reply.get("ready"):
            self.close()
            raise PeerError(f"the peer did not start: {reply.get('error', reply)}")
        self.info = reply
        self.compiled = {}
        return reply

    def _reader(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _read(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise PeerError(f"the peer gave no answer within {timeout:.0f} s (killed)")
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                code = self.proc.poll() if self.proc else None
                self.proc = None
                raise PeerError(f"the peer process ended (exit status {code}); see its log")
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)

    def request(self, payload: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(payload) + "\n")
        self.proc.stdin.flush()
        return self._read(self.timeout)

    def compile(self, key: str, schema: Any) -> dict[str, Any]:
        if key not in self.compiled:
            self.compiled[key] = self.request({"op": "compile", "key": key, "schema": schema})
        return self.compiled[key]

    def generate(self, key: str, schema: Any, prompt: str, prompt_ids: list[int], max_new_tokens: int,
                 temperature: float, seed: int) -> dict[str, Any]:
        compiled = self.compile(key, schema)
        if not compiled.get("ok"):
            return compiled
        return self.request({"op": "generate", "key": key, "prompt": prompt, "prompt_ids": prompt_ids,
                             "max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed})

    def close(self) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.proc.kill()
            self.proc.wait()
        self.proc = None


# ----------------------------------------------------------------------------- running one request


@dataclass
class BenchConfig:
    ks: tuple[int, ...] = DEFAULT_KS
    max_new_tokens: int = 320
    temperatures: tuple[float, ...] = (0.0, 0.7)
    seed: int = 0
    rounds: int = 1  # the whole interleaved workload this many times; ratios pair runs of one round
    calibrate: bool = False  # measure adaptive k's forward costs before the timed runs (a warm start)
    cold_masks: bool = True
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def setting_name(temperature: float) -> str:
    return "greedy" if temperature == 0 else f"sampled-t{temperature:g}"


def mode_unavailable_reason(gen: Any, mode: Mode) -> str | None:
    if mode.kind == "project" and mode.k > 0 and "draft" in (mode.proposers or ALL_PROPOSERS) and gen.draft is None:
        return "no draft model"
    return None


def _project_record(gen: Any, item: Any, compiled: Any, mode: Mode, temperature: float, seed: int,
                    max_new_tokens: int, cold: bool) -> dict[str, Any]:
    from constrained_spec.grammar.schema_refs import validation_errors

    kwargs: dict[str, Any] = {"num_draft_tokens": mode.k, "temperature": temperature, "seed": seed,
                              "max_new_tokens": max_new_tokens}
    if mode.proposers is not None:
        kwargs["proposers"] = mode.proposers
    if mode.adaptive:
        kwargs["adaptive"] = True
    if mode.draft_plan is not None:
        kwargs["draft_plan"] = mode.draft_plan
    rec: dict[str, Any] = {"proposers": list(kwargs.get("proposers", ())) or "default", "k": mode.k, "adaptive": mode.adaptive}
    if cold and compiled.spec.kind != "lark" and getattr(gen, "grammar_engine", "automaton") == "automaton":
        cold_masks(compiled.grammar)  # the lazy engine keeps no masks between requests: always cold
    masks = GrammarCallTimer()
    with PeakRSS() as mem:
        t0 = time.perf_counter()
        try:
            result = gen.run(item.prompt, item.schema, hooks=masks.hooks, **kwargs)
            error = None
        except Exception as exc:  # noqa: BLE001 - a failed request is a figure, not a crash
            result, error = None, f"{type(exc).__name__}: {str(exc)[:300]}"
        latency = time.perf_counter() - t0
    rec.update(latency_s=latency, peak_rss_mb=mem.peak, _mask_calls=masks.calls_us, mask_calls=len(masks.calls_us),
               mask_us_per_call_p50=percentile(masks.calls_us, 50), mask_us_per_call_p99=percentile(masks.calls_us, 99))
    if result is None:
        return {**rec, "ok": False, "valid": False, "error": error}
    s = result.stats
    valid = True
    try:
        if compiled.spec.kind == "lark":
            compiled.parse_tree(result.text)  # lark judges a grammar's output
        else:
            valid = not validation_errors(item.schema, json.loads(result.text))  # retrieves no $ref
    except Exception:  # noqa: BLE001
        valid = False
    gen_tokens = s.generated_tokens
    decode_s = s.wall_seconds - s.prefill_seconds
    rec.update(
        ok=True, valid=valid, text=result.text, token_ids=list(result.token_ids), stats=s.as_dict(),
        generated_tokens=gen_tokens, tokens_per_second=s.tokens_per_second, wall_s=s.wall_seconds,
        prefill_s=s.prefill_seconds, draft_prefill_s=s.draft_prefill_seconds, prefill_overlapped=s.prefill_overlapped, draft_skipped=s.draft_skipped, decode_s=decode_s, target_forwards=s.target_forwards,
        draft_forwards=s.draft_forwards, drafted_tokens=s.drafted_tokens, accepted_tokens=s.accepted_tokens,
        forced_tokens=s.forced_tokens, steps=s.steps, acceptance_rate=s.acceptance_rate if s.drafted_tokens else None,
        mean_accepted_len=(s.accepted_tokens / s.target_forwards) if (s.target_forwards and mode.k) else None,
        target_forwards_per_token=(s.target_forwards / gen_tokens) if gen_tokens else None,
        forced_share=(s.forced_tokens / gen_tokens) if gen_tokens else None,
        mask_us_per_token=(masks.total_seconds / gen_tokens * 1e6) if gen_tokens else None,
        mask_us_per_token_stats=(s.mask_seconds / gen_tokens * 1e6) if gen_tokens else None,
        model_proposed=s.model_proposed, grammar_proposed=s.grammar_proposed, grammar_accepted=s.grammar_accepted,
        lookup_proposed=s.lookup_proposed, lookup_accepted=s.lookup_accepted,
        _stats_obj=s,
    )
    return rec


def _peer_record(peer: PeerClient, item: Any, prompt_text: str, prompt_ids: list[int], temperature: float,
                 seed: int, max_new_tokens: int) -> dict[str, Any]:
    from constrained_spec.grammar.schema_refs import validation_errors

    t0 = time.perf_counter()
    try:
        reply = peer.generate(item.schema_name, item.schema, prompt_text, prompt_ids, max_new_tokens, temperature, seed)
    except PeerError as exc:
        return {"ok": False, "valid": False, "error": str(exc), "latency_s": time.perf_counter() - t0}
    if not reply.get("ok"):
        return {"ok": False, "valid": False, "error": reply.get("error", "peer failed")}
    valid = True
    try:
        valid = not validation_errors(item.schema, json.loads(reply["text"]))  # retrieves no $ref
    except Exception:  # noqa: BLE001
        valid = False
    n = reply["generated_tokens"]
    return {
        "ok": True, "valid": valid, "text": reply["text"], "token_ids": reply["token_ids"], "generated_tokens": n,
        "tokens_per_second": reply["tokens_per_second"], "latency_s": reply["wall_s"], "wall_s": reply["wall_s"],
        "prefill_s": reply["prefill_s"], "decode_s": reply["decode_s"], "target_forwards": reply["forwards"],
        "target_forwards_per_token": reply["forwards"] / n if n else None, "peak_rss_mb": reply.get("peak_rss_mb"),
        "prompt_ids_match": reply.get("prompt_ids_match"), "stop": reply.get("stop"),
    }


def transformers_model(model: Any) -> Any | None:
    """The transformers model inside a loaded :class:`~constrained_spec.models.torch.hf.HFModel`, else None
    (no model, or another kind of :class:`~constrained_spec.models.protocol.SequenceModel`)."""
    from constrained_spec.models.torch.hf import HFModel

    return model.model if isinstance(model, HFModel) else None


def _hf_assist_record(gen: Any, prompt_ids: list[int], max_new_tokens: int) -> dict[str, Any]:
    import torch

    target, draft = transformers_model(gen.target), transformers_model(gen.draft)
    if target is None or draft is None:
        return {"ok": False, "unavailable": "needs transformers target and draft models"}
    times: dict[str, list[list[float]]] = {"target": [], "draft": []}
    handles = []
    for role, m in (("target", target), ("draft", draft)):
        handles.append(m.register_forward_pre_hook(lambda *_a, _r=role: times[_r].append([time.perf_counter(), 0.0])))
        handles.append(m.register_forward_hook(lambda *_a, _r=role: times[_r][-1].__setitem__(1, time.perf_counter())))
    eos = list(gen.vocab.eos_token_ids)
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=gen.target.device)
    pad = gen.tokenizer.pad_token_id if gen.tokenizer.pad_token_id is not None else eos[0]
    try:
        with PeakRSS() as mem, torch.inference_mode():
            t0 = time.perf_counter()
            out = target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=draft, do_sample=False,
                                  max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=pad)
            wall = time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "valid": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        for h in handles:
            h.remove()
    new = out[0, len(prompt_ids):].tolist()
    tokens = []
    for t in new:
        if t in eos:
            break
        tokens.append(t)
    tf = [b - a for a, b in times["target"] if b]
    df = [b - a for a, b in times["draft"] if b]
    # Prefill: the draft's first forward (the prompt) and the target's first one (prompt + first
    # candidates) less one typical verify forward, so that the decode time counts the same forwards
    # as the project's loop (whose prefill excludes the last prompt token).
    typical = statistics.median(tf[1:]) if len(tf) > 1 else 0.0
    prefill = (df[0] if df else 0.0) + max((tf[0] if tf else 0.0) - typical, 0.0)
    decode = max(wall - prefill, 1e-9)
    return {
        "ok": True, "valid": None, "text": gen.vocab.decode(tokens),
        "token_ids": tokens, "generated_tokens": len(tokens), "tokens_per_second": len(tokens) / decode,
        "latency_s": wall, "wall_s": wall, "prefill_s": prefill, "decode_s": decode, "target_forwards": len(tf),
        "draft_forwards": len(df), "target_forwards_per_token": len(tf) / len(tokens) if tokens else None,
        "peak_rss_mb": mem.peak,
    }


def user_message(gen: Any, item: Any, spec: Any) -> str:
    """The user message ``Generator.prompt_ids`` sends (prompt plus the schema hint), for the peer."""
    if spec is not None and spec.schema is not None:
        from constrained_spec.api import schema_hint

        return item.prompt + "\n\n" + schema_hint(spec.schema, style=gen.schema_hint_style)
    return item.prompt


def compile_cold(gen: Any, schema: Any) -> float:
    """Seconds to compile ``schema`` (a JSON Schema or a CFG) with no disk or memory cache, by the
    Generator's engine, schema -> regex included (masks excluded: they are computed as decoding
    reaches them and counted in mask time)."""
    from constrained_spec.grammar import output_spec

    t0 = time.perf_counter()
    gen.compiler.build(output_spec(schema, gen.schema_options), disk_cache=False)
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------- the benchmark


def run_benchmark(gen: Any, workload: Sequence[Any], modes: Sequence[Mode], config: BenchConfig,
                  peer: PeerClient | None = None, log: Callable[[str], None] | None = None,
                  on_record: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run every prompt x setting x mode (interleaved); returns the results document.

    ``on_record`` sees every finished run as it comes (``main`` appends them to ``records.jsonl``,
    so an interrupted run keeps what it measured)."""
    from tqdm import tqdm

    log = log or (lambda msg: print(msg, file=sys.stderr))
    unavailable: dict[str, str] = {}
    for m in modes:
        reason = mode_unavailable_reason(gen, m)
        if reason:
            unavailable[m.name] = reason
    if peer is None and any(m.kind == "peer" for m in modes):
        unavailable.setdefault(PEER_NAME, "no peer runner (--no-peer, or outlines not installed)")
    if any(m.kind == "hf-assist" for m in modes) and (transformers_model(gen.draft) is None or transformers_model(gen.target) is None):
        unavailable.setdefault(HF_NAME, "needs transformers target and draft models")

    # Compile: cold (no cache) once per schema, then the Generator's own compile for the runs.
    compile_info: dict[str, dict[str, Any]] = {}
    for item in workload:
        if item.schema_name in compile_info:
            continue
        info: dict[str, Any] = {}
        try:
            info["project_cold_s"] = compile_cold(gen, item.schema)
        except Exception as exc:  # noqa: BLE001
            info["project_error"] = f"{type(exc).__name__}: {exc}"
        t0 = time.perf_counter()
        gen.compile(item.schema)
        info["project_cached_s"] = time.perf_counter() - t0
        if peer is not None and PEER_NAME not in unavailable and any(m.kind == "peer" for m in modes):
            try:
                reply = peer.compile(item.schema_name, item.schema)
                info["peer_s"] = reply.get("compile_s")
                if not reply.get("ok"):
                    info["peer_error"] = reply.get("error")
            except PeerError as exc:
                info["peer_error"] = str(exc)
        compile_info[item.schema_name] = info

    calibrate_s = None
    if config.calibrate and any(m.adaptive for m in modes if m.name not in unavailable) and workload:
        # a warm start for adaptive k's forward costs, outside the timed runs (else learnt while decoding)
        dl = gen.draft_length
        if not dl.calibrated:
            first = gen.compile(workload[0].schema)
            t0 = time.perf_counter()
            gen.calibrate(gen.prompt_ids(workload[0].prompt, first.spec))
            calibrate_s = time.perf_counter() - t0
            log(f"[bench] adaptive k: calibrated forward costs in {calibrate_s:.1f} s (max k {dl.max_k})")

    settings = [setting_name(t) for t in config.temperatures]
    active = [m for m in modes if m.name not in unavailable]
    per_round = sum(1 for t in config.temperatures for m in active if not (m.kind == "hf-assist" and t != 0))
    records: list[dict[str, Any]] = []
    bar = tqdm(total=config.rounds * len(workload) * per_round, desc="bench", unit="run", disable=not config.progress, file=sys.stderr, dynamic_ncols=True)
    baselines: dict[tuple[str, str, int], dict[str, Any]] = {}
    for round_index, item in itertools.product(range(config.rounds), workload):
        compiled = gen.compile(item.schema)
        prompt_ids = gen.prompt_ids(item.prompt, compiled.spec)
        prompt_text = user_message(gen, item, compiled.spec)
        for pi, temperature in enumerate(config.temperatures):
            setting = setting_name(temperature)
            seed = config.seed + pi
            for mode in modes:
                if mode.name in unavailable or (mode.kind == "hf-assist" and temperature != 0):
                    continue
                bar.set_postfix_str(f"{item.id} {setting} {mode.name}")
                if mode.kind == "project":
                    rec = _project_record(gen, item, compiled, mode, temperature, seed, config.max_new_tokens, config.cold_masks)
                elif mode.kind == "peer":
                    assert peer is not None
                    rec = _peer_record(peer, item, prompt_text, prompt_ids, temperature, seed, config.max_new_tokens)
                else:
                    rec = _hf_assist_record(gen, prompt_ids, config.max_new_tokens)
                bar.update(1)
                if rec.get("unavailable"):
                    unavailable[mode.name] = rec["unavailable"]
                    log(f"[bench] {mode.name}: not available ({rec['unavailable']})")
                    continue
                rec.update(prompt=item.id, schema=item.schema_name, kind=item.kind, setting=setting, mode=mode.name,
                           family=mode.family, prompt_tokens=len(prompt_ids), round=round_index,
                           workload=getattr(item, "workload", None))
                if not rec.get("ok"):
                    log(f"[bench] {item.id} {setting} {mode.name}: FAILED {rec.get('error')}")
                key = (getattr(item, "workload", None), item.id, setting, round_index)
                if mode.name == "target" and rec.get("ok"):
                    baselines[key] = rec
                base = baselines.get(key)
                if base is not None and rec.get("ok") and mode.name != "target":
                    if temperature == 0 and mode.kind != "hf-assist":
                        same = rec["token_ids"] == base["token_ids"]
                        rec["same_as_target"] = same
                        if not same:
                            a, b = rec["token_ids"], base["token_ids"]
                            rec["first_divergence"] = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                            if mode.kind == "project":
                                log(f"[bench] GREEDY MISMATCH {item.id} {mode.name}: differs from target-only at token {rec['first_divergence']}")
                    if base.get("tokens_per_second") and rec.get("tokens_per_second"):
                        rec["speedup_vs_target"] = rec["tokens_per_second"] / base["tokens_per_second"]
                    if mode.kind == "project" and "_stats_obj" in rec and "_stats_obj" in base:
                        rec["predicted_speedup"] = predicted_speedup(rec["_stats_obj"], base["_stats_obj"])
                records.append(rec)
                if on_record is not None:
                    on_record({k: v for k, v in rec.items() if not k.startswith("_")})
    bar.close()
    for rec in records:  # pair each record with the peer's run of the same request
        rec.pop("_stats_obj", None)
        peer_rec = next((r for r in records if r["mode"] == PEER_NAME and r["prompt"] == rec["prompt"]
                         and r.get("workload") == rec.get("workload")
                         and r["setting"] == rec["setting"] and r["round"] == rec["round"] and r.get("ok")), None)
        if peer_rec and rec.get("ok") and rec.get("tokens_per_second") and rec is not peer_rec:
            rec["speedup_vs_peer"] = rec["tokens_per_second"] / peer_rec["tokens_per_second"]
    add_derived(records, {(getattr(w, "workload", None), w.id): dict(getattr(w, "expected", None) or {}) for w in workload})
    available = [m for m in modes if m.name not in unavailable]
    summary = summarize(records, available, settings, compile_info)
    by_workload = summaries_by_workload(records, available, settings, compile_info, workload)
    for rec in records:
        rec.pop("_mask_calls", None)
    meta = environment(gen, config, peer)
    meta["adaptive_calibrate_s"] = calibrate_s
    meta["adaptive_max_k"] = gen.draft_length.max_k
    return {
        "meta": meta,
        "workload": [{"id": w.id, "schema": w.schema_name, "kind": w.kind, "prompt": w.prompt,
                      "workload": getattr(w, "workload", None), "expected": getattr(w, "expected", None) or None}
                     for w in workload],
        "modes": [asdict(m) | {"available": m.name not in unavailable, "unavailable_reason": unavailable.get(m.name)} for m in modes],
        "unavailable": unavailable,
        "compile": compile_info,
        "summary": summary,
        "summary_by_workload": by_workload,
        "records": records,
    }


def summarize(records: list[dict[str, Any]], modes: Sequence[Mode], settings: Sequence[str],
              compile_info: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per setting and mode: medians over prompts, shares, ratios (paired per prompt)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    project_compile = [c["project_cold_s"] for c in compile_info.values() if c.get("project_cold_s") is not None]
    peer_compile = [c["peer_s"] for c in compile_info.values() if c.get("peer_s") is not None]
    for setting in settings:
        out[setting] = {}
        for mode in modes:
            rs = [r for r in records if r["setting"] == setting and r["mode"] == mode.name]
            if not rs:
                continue
            ok = [r for r in rs if r.get("ok")]
            tok = sum(r.get("generated_tokens", 0) for r in ok)
            drafted = sum(r.get("drafted_tokens") or 0 for r in ok)
            tf = sum(r.get("target_forwards") or 0 for r in ok)
            valid = [r.get("valid") for r in rs]
            same = [r["same_as_target"] for r in rs if "same_as_target" in r]
            calls = [c for r in ok for c in r.get("_mask_calls", [])]
            e2e = [r["e2e_speedup_vs_target"] for r in ok if r.get("e2e_speedup_vs_target")]
            scored = [r for r in rs if r.get("fields_expected")]
            entry: dict[str, Any] = {
                "runs": len(rs), "ok": len(ok),
                "tokens_per_second_median": median([r.get("tokens_per_second") for r in ok]),
                "tokens_per_second_aggregate": (tok / sum(r["decode_s"] for r in ok)) if ok and sum(r.get("decode_s", 0) for r in ok) > 0 else None,
                "latency_s_median": median([r.get("latency_s") for r in ok]),
                "latency_s_p90": percentile([r.get("latency_s") for r in ok], 90),
                "prefill_s_median": median([r.get("prefill_s") for r in ok]),
                "prefill_share_median": median([r.get("prefill_share") for r in ok]),
                "e2e_speedup_vs_target_median": median(e2e),
                "e2e_speedup_vs_target_geomean": geomean(e2e),
                "predicted_e2e_speedup_median": median([r["predicted_e2e_speedup"] for r in ok if r.get("predicted_e2e_speedup")]),
                "e2e_slower_than_target": sum(1 for x in e2e if x < 1.0) if e2e else None,
                "fields_matched": sum(r["fields_matched"] for r in scored) if scored else None,
                "fields_expected": sum(r["fields_expected"] for r in scored) if scored else None,
                "field_exact_match": (sum(r["fields_matched"] for r in scored) / sum(r["fields_expected"] for r in scored))
                if scored and sum(r["fields_expected"] for r in scored) else None,
                "generated_tokens_median": median([r.get("generated_tokens") for r in ok]),
                "target_forwards_per_token": (tf / tok) if tok else None,
                "acceptance_rate": (sum(r.get("accepted_tokens") or 0 for r in ok) / drafted) if drafted else None,
                "mean_accepted_len": (sum(r.get("accepted_tokens") or 0 for r in ok) / tf) if (tf and mode.kind == "project" and mode.k) else None,
                "forced_share": (sum(r.get("forced_tokens") or 0 for r in ok) / tok) if (tok and mode.kind == "project") else None,
                "mask_us_per_token_p50": percentile([r.get("mask_us_per_token") for r in ok if r.get("mask_us_per_token") is not None], 50),
                "mask_us_per_token_p99": percentile([r.get("mask_us_per_token") for r in ok if r.get("mask_us_per_token") is not None], 99),
                "mask_us_per_token_stats_p50": percentile([r.get("mask_us_per_token_stats") for r in ok if r.get("mask_us_per_token_stats") is not None], 50),
                "mask_us_per_call_p50": percentile(calls, 50), "mask_us_per_call_p99": percentile(calls, 99),
                "compile_s_mean": (statistics.mean(project_compile) if project_compile else None) if mode.kind == "project"
                else ((statistics.mean(peer_compile) if peer_compile else None) if mode.kind == "peer" else None),
                "peak_rss_mb": max((r.get("peak_rss_mb") or 0 for r in rs), default=None) or None,
                "valid_share": (sum(1 for v in valid if v) / len(valid)) if mode.kind != "hf-assist" else None,
                "greedy_same_as_target": (sum(same), len(same)) if same else None,
                "speedup_vs_target_median": median([r.get("speedup_vs_target") for r in ok if r.get("speedup_vs_target")]),
                "speedup_vs_target_geomean": geomean([r.get("speedup_vs_target") for r in ok if r.get("speedup_vs_target")]),
                "speedup_vs_peer_median": median([r.get("speedup_vs_peer") for r in ok if r.get("speedup_vs_peer")]),
                "predicted_speedup_median": median([r.get("predicted_speedup") for r in ok if r.get("predicted_speedup")]),
                **{f: (sum(r.get(f) or 0 for r in ok) if any(r.get(f) is not None for r in ok) else None)
                   for f in ("model_proposed", "grammar_proposed", "grammar_accepted", "lookup_proposed", "lookup_accepted")},
                "errors": [f"{r['prompt']}: {r.get('error')}" for r in rs if not r.get("ok")],
            }
            if mode.name == "target":
                entry["speedup_vs_target_median"] = entry["speedup_vs_target_geomean"] = 1.0
            out[setting][mode.name] = entry
    return out


def summaries_by_workload(records: list[dict[str, Any]], modes: Sequence[Mode], settings: Sequence[str],
                          compile_info: dict[str, dict[str, Any]], workload: Sequence[Any]) -> dict[str, Any]:
    """:func:`summarize` per workload (records and compile times of that workload's prompts only),
    keyed by workload name (``"injected"`` for entries without one), in workload order."""
    names = list(dict.fromkeys(getattr(w, "workload", None) for w in workload))
    out: dict[str, Any] = {}
    for name in names:
        schemas = {w.schema_name for w in workload if getattr(w, "workload", None) == name}
        recs = [r for r in records if r.get("workload") == name]
        out[name or "injected"] = summarize(recs, modes, settings, {k: v for k, v in compile_info.items() if k in schemas})
    return out


def _dtype_label(model: Any | None) -> str:
    """The weights' dtype of a transformers model, or ``fp16w`` / ``int8w`` where its linear layers
    are packed ("" for none)."""
    from constrained_spec.models.torch.packed_linear import PackedFp16Linear, PackedInt8Linear

    if model is None:
        return ""
    modules = list(model.modules())
    if any(isinstance(m, PackedInt8Linear) for m in modules):
        return "int8w (int8 weights packed for fbgemm, int8 activations per call)"
    if any(isinstance(m, PackedFp16Linear) for m in modules):
        return "fp16w (fp16 weights packed for fbgemm, fp32 activations)"
    return str(model.dtype)


def environment(gen: Any, config: BenchConfig, peer: PeerClient | None) -> dict[str, Any]:
    import torch

    def _name(m: Any) -> str:
        inner = transformers_model(m)
        return type(m).__name__ if inner is None else str(inner.config.name_or_path or type(inner).__name__)

    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "torch": torch.__version__, "platform": platform.platform(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "loadavg_at_end": load,
        "target": _name(gen.target), "draft": _name(gen.draft) if gen.draft is not None else None,
        "dtype": _dtype_label(transformers_model(gen.target)), "device": str(getattr(gen.target, "device", "cpu")),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "draft_dtype": _dtype_label(transformers_model(gen.draft)) if gen.draft is not None else None,
        "max_new_tokens": config.max_new_tokens, "ks": list(config.ks), "temperatures": list(config.temperatures),
        "cold_masks": config.cold_masks, "process_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peer": peer.info if peer is not None else None, **config.extra,
    }


# ----------------------------------------------------------------------------- outputs


def _f(value: Any, fmt: str = "{:.2f}", none: str = "–") -> str:
    if value is None:
        return none
    try:
        return fmt.format(value)
    except (TypeError, ValueError):
        return str(value)


def _props(e: dict[str, Any]) -> str:
    vals = [e.get("model_proposed"), e.get("grammar_proposed"), e.get("lookup_proposed")]
    return "–" if all(v is None for v in vals) or not any(vals) else "/".join(_f(v, "{:d}", "0") for v in vals)


def markdown_table(results: dict[str, Any]) -> str:
    """The tables the README can quote: one per setting, one row per mode."""
    meta = results["meta"]
    weights = f"target {meta['dtype']}, draft {meta['draft_dtype']}" if meta.get("draft_dtype") not in (None, meta["dtype"]) else meta["dtype"]
    lines = [f"Benchmark {meta['date_utc']}: target `{meta['target']}`, draft `{meta['draft']}` ({weights}), "
             f"{len(results['workload'])} prompts, max {meta['max_new_tokens']} new tokens, "
             f"{meta['torch_threads']} torch threads on {meta['cpu_count']} CPUs.", ""]
    lines += e2e_tables(results)
    if len(results.get("summary_by_workload") or {}) > 1:
        lines += ["### Decode detail, all workloads together", ""]
    header = ("| mode | tok/s p50 | × target | × target geo | × peer | pred. × | latency p50 s | target fwd/token | accept | "
              "acc. len | props m/g/l | forced | mask µs/tok p50/p99 | compile s | peak RSS GB | valid | greedy = target |")
    for setting, rows in results["summary"].items():
        lines += [f"**{setting}**", "", header, "|" + "---|" * 17]
        for name, e in rows.items():
            same = e.get("greedy_same_as_target")
            lines.append("| " + " | ".join([
                name, _f(e["tokens_per_second_median"]), _f(e["speedup_vs_target_median"], "{:.2f}×"),
                _f(e.get("speedup_vs_target_geomean"), "{:.2f}×"),
                _f(e["speedup_vs_peer_median"], "{:.2f}×"), _f(e["predicted_speedup_median"], "{:.2f}×"),
                _f(e["latency_s_median"], "{:.1f}"), _f(e["target_forwards_per_token"], "{:.3f}"),
                _f(e["acceptance_rate"], "{:.0%}"), _f(e["mean_accepted_len"]), _props(e), _f(e["forced_share"], "{:.0%}"),
                f"{_f(e['mask_us_per_token_p50'], '{:.0f}')}/{_f(e['mask_us_per_token_p99'], '{:.0f}')}",
                _f(e["compile_s_mean"]), _f((e["peak_rss_mb"] or 0) / 1024 if e["peak_rss_mb"] else None, "{:.1f}"),
                _f(e["valid_share"], "{:.0%}"), f"{same[0]}/{same[1]}" if same else "–",
            ]) + " |")
        lines.append("")
    if results["unavailable"]:
        lines.append("Not available: " + "; ".join(f"`{k}`: {v}" for k, v in results["unavailable"].items()) + ".")
        lines.append("")
    lines.append("latency: the whole request (prompt build, prefill of target and draft, decode), median over prompts; "
                 "× target e2e: median of per-prompt ratios target-only latency / this mode's latency (geo: their geometric mean; "
                 "pred. × e2e: the cost model's ratio, target-only prompt build, prefill and decode against the same prompt build and "
                 "target prefill, this mode's draft prefill and the decode time its pred. × gives; "
                 "slower: prompts where it is below 1); prefill share: prefill / latency; fields exact: fields the extraction "
                 "prompts state that the answer holds exactly (matched/expected). "
                 "tok/s: generated tokens per second of decoding (prefill excluded), median over prompts; "
                 "× target / × peer: median of per-prompt ratios; × target geo: their geometric mean (every prompt counts, not only the middle two); props m/g/l: tokens proposed by the draft model / "
                 "grammar-forced strings / prompt lookup; mask µs/tok: every grammar call through the matcher (masks, "
                 "forced-token checks, token tests, advances) per generated token, masks cold at the start of every run; pred. ×: predicted from measured acceptance and "
                 "forward costs; hf-assist is unconstrained (tokens/s reference only).")
    return "\n".join(lines) + "\n"


E2E_HEADER = ("| mode | latency p50 s | × target e2e | × target e2e geo | pred. × e2e | slower | prefill p50 s | prefill share | "
              "tok/s p50 | × target decode | fields exact | valid | greedy = target |")


def e2e_tables(results: dict[str, Any]) -> list[str]:
    """The headline: per workload and setting, end-to-end latency and its ratio vs target-only
    (prefill included) beside decode tok/s and its ratio."""
    by_workload = results.get("summary_by_workload") or {"all prompts": results["summary"]}
    counts: dict[str, int] = {}
    for w in results.get("workload", []):
        counts[w.get("workload") or "injected"] = counts.get(w.get("workload") or "injected", 0) + 1
    lines: list[str] = []
    for name, summary in by_workload.items():
        n = counts.get(name)
        lines += [f"### End-to-end, workload `{name}`" + (f" ({n} prompts)" if n else ""), ""]
        for setting, rows in summary.items():
            lines += [f"**{setting}**", "", E2E_HEADER, "|" + "---|" * 13]
            for mode, e in rows.items():
                same = e.get("greedy_same_as_target")
                fields = (f"{e['fields_matched']}/{e['fields_expected']} ({e['field_exact_match']:.0%})"
                          if e.get("fields_expected") else "–")
                lines.append("| " + " | ".join([
                    mode, _f(e.get("latency_s_median"), "{:.1f}"), _f(e.get("e2e_speedup_vs_target_median"), "{:.2f}×"),
                    _f(e.get("e2e_speedup_vs_target_geomean"), "{:.2f}×"), _f(e.get("predicted_e2e_speedup_median"), "{:.2f}×"),
                    _f(e.get("e2e_slower_than_target"), "{:d}") if mode != "target" else "–",
                    _f(e.get("prefill_s_median"), "{:.1f}"), _f(e.get("prefill_share_median"), "{:.0%}"),
                    _f(e.get("tokens_per_second_median")), _f(e.get("speedup_vs_target_median"), "{:.2f}×"),
                    fields, _f(e.get("valid_share"), "{:.0%}"), f"{same[0]}/{same[1]}" if same else "–",
                ]) + " |")
            lines.append("")
    return lines


def write_chart(results: dict[str, Any], path: Path) -> bool:
    """Bar chart of median tokens/s per mode (one group per setting) plus measured vs predicted speedup."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001
        return False
    summary = results["summary"]
    names = list(dict.fromkeys(n for rows in summary.values() for n in rows))
    if not names:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(max(10, 1.1 * len(names) + 6), 5), gridspec_kw={"width_ratios": [3, 2]})
    width = 0.8 / max(1, len(summary))
    for i, (setting, rows) in enumerate(summary.items()):
        xs = [j + i * width for j in range(len(names))]
        ys = [(rows.get(n) or {}).get("tokens_per_second_median") or 0 for n in names]
        bars = axes[0].bar(xs, ys, width, label=setting)
        for b, n in zip(bars, names):
            s = (rows.get(n) or {}).get("speedup_vs_target_median")
            if s:
                axes[0].annotate(f"{s:.2f}×", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=7)
    axes[0].set_xticks([j + width * (len(summary) - 1) / 2 for j in range(len(names))])
    axes[0].set_xticklabels(names, rotation=40, ha="right", fontsize=8)
    axes[0].set_ylabel("tokens/s (median over prompts)")
    axes[0].set_title("decode speed")
    axes[0].legend(fontsize=8)
    first = next(iter(summary.values()))
    spec = [n for n in names if n in first and first[n].get("predicted_speedup_median")]
    axes[1].bar([j - 0.2 for j in range(len(spec))], [first[n]["speedup_vs_target_median"] or 0 for n in spec], 0.4, label="measured")
    axes[1].bar([j + 0.2 for j in range(len(spec))], [first[n]["predicted_speedup_median"] or 0 for n in spec], 0.4, label="predicted")
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[1].set_xticks(range(len(spec)))
    axes[1].set_xticklabels(spec, rotation=40, ha="right", fontsize=8)
    axes[1].set_title(f"speedup vs target-only ({next(iter(summary))})")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_outputs(results: dict[str, Any], out_dir: str | Path, chart: bool = True) -> dict[str, Path]:
    """``results.json``, ``table.md`` and ``chart.png`` (if matplotlib is there) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "table.md", "chart": out / "chart.png"}
    paths["json"].write_text(json.dumps(results, indent=1, default=str))
    paths["markdown"].write_text(markdown_table(results))
    if not chart or not write_chart(results, paths["chart"]):
        paths.pop("chart")
    return paths


# ----------------------------------------------------------------------------- command line


def load_workload_module(path: str | Path | None = None) -> Any:
    """The workload module in the file ``path`` (default: ``workload.py`` beside this file)."""
    path = Path(path) if path else BENCH_DIR / "workload.py"
    if not path.exists():
        raise FileNotFoundError(f"benchmark workload {path} not found")
    spec = importlib.util.spec_from_file_location(f"bench_workload_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def load_workloads(spec: str | None, n: int | None = None) -> list[WorkItem]:
    """The entries of ``--workload``: ``default``, ``heldout``, ``both`` (default then held-out) or a
    workload .py file; the first ``n`` prompts of each, tagged with their workload's name."""
    spec = spec or "both"
    names = ["default", "heldout"] if spec == "both" else [spec]
    items: list[WorkItem] = []
    for name in names:
        path = BENCH_DIR / WORKLOAD_FILES[name] if name in WORKLOAD_FILES else Path(name)
        label = name if name in WORKLOAD_FILES else Path(name).stem
        items += [WorkItem(label, w) for w in load_workload_module(path).load_workload(n)]
    return items


def resummarize(out_dir: str | Path, workload: str | None = None) -> dict[str, Any]:
    """Recompute the derived figures and summaries of a finished run's ``results.json`` with this
    code (records are kept; summary figures this code cannot rebuild from them, such as per-call
    mask percentiles, keep their old values) and rewrite ``results.json`` and ``table.md``.
    ``workload``: the name of the run's workload, for records written before they carried one."""
    out = Path(out_dir)
    results = json.loads((out / "results.json").read_text())
    records = results["records"]
    for r in records:
        if workload and not r.get("workload"):
            r["workload"] = workload
    known: dict[tuple[str, str], dict[str, Any]] = {}
    for name in WORKLOAD_FILES:
        try:
            known.update({(name, w.id): dict(getattr(w, "expected", None) or {}) for w in load_workloads(name)})
        except FileNotFoundError:
            pass
    entries = []
    for w in results["workload"]:
        name = w.get("workload") or workload
        expected = w.get("expected") or known.get((name, w["id"])) or None
        entries.append(dict(w, workload=name, expected=expected))
    results["workload"] = entries
    add_derived(records, {(w["workload"], w["id"]): dict(w["expected"] or {}) for w in entries})
    modes = [Mode(m["name"], m["family"], m["k"], tuple(m["proposers"]) if m.get("proposers") else None, m.get("adaptive", False),
                  m.get("draft_plan"))
             for m in results["modes"] if m.get("available", True)]
    settings = list(results["summary"])
    items = [SimpleNamespace(id=w["id"], schema_name=w["schema"], workload=w["workload"]) for w in entries]

    def merged(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
        return {st: {m: {**(old.get(st, {}).get(m) or {}), **{k: v for k, v in e.items() if v is not None}}
                     for m, e in rows.items()} for st, rows in new.items()}

    results["summary"] = merged(summarize(records, modes, settings, results.get("compile", {})), results["summary"])
    by = summaries_by_workload(records, modes, settings, results.get("compile", {}), items)
    if len(by) == 1:
        by = {k: results["summary"] for k in by}
    results["summary_by_workload"] = by
    write_outputs(results, out, chart=(out / "chart.png").exists())
    return results


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from constrained_spec.cli.args import add_model_arguments

    p = argparse.ArgumentParser(prog="python benchmarks/bench.py", description=__doc__.split("\n\n")[0])
    add_model_arguments(p, allow_no_draft=False)
    p.add_argument("--out", default=None, help="output folder (default results/bench-<UTC timestamp>)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 prompts, ks 2,4, greedy only")
    p.add_argument("--prompts", type=int, default=None, help="use the first N prompts of the workload (default all)")
    p.add_argument("--ks", type=_ints, default=None, help="fixed draft lengths, e.g. 2,3,4 (default 1..8)")
    p.add_argument("--proposer-k", type=int, default=None, help="k of the proposer variants (default 4, or the middle of --ks)")
    p.add_argument("--all-proposer-ks", type=_ints, default=(), help="more k for k{K}+grammar+lookup, e.g. 2,3,4,6 (a fixed-k sweep with every proposer)")
    p.add_argument("--modes", default=None, help="comma list of families (target,fixed,proposers,adaptive,peer,hf-assist) or mode names")
    p.add_argument("--no-fixed", action="store_true", help="skip the fixed-k sweep")
    p.add_argument("--no-proposers", action="store_true", help="skip the +grammar / +grammar+lookup variants")
    p.add_argument("--no-adaptive", action="store_true", help="skip adaptive k")
    p.add_argument("--no-peer", action="store_true", help="skip the outlines peer")
    p.add_argument("--no-hf-assist", action="store_true", help="skip transformers' assisted generation")
    p.add_argument("--no-sampled", action="store_true", help="greedy only")
    p.add_argument("--temperature", type=float, default=0.7, help="temperature of the sampled setting (default 0.7)")
    p.add_argument("--max-new-tokens", type=int, default=320)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=_positive, default=1,
                   help="run the whole interleaved workload this many times (ratios pair runs of the same round; "
                        "medians and means are over every prompt x round): fewer noisy single runs per figure")
    p.add_argument("--calibrate", action="store_true",
                   help="measure adaptive k's forward costs before the timed runs (default: learnt while decoding, as in the library)")
    p.add_argument("--warm-masks", action="store_true", help="keep per-state masks across runs (default: every run starts cold)")
    p.add_argument("--peer-python", default=None, help="interpreter with outlines installed (default: $CONSTRAINED_SPEC_PEER_PYTHON or .venv-peer)")
    p.add_argument("--peer-model", default=None, help="model folder for the peer (default: the converted --model folder)")
    p.add_argument("--peer-timeout", type=float, default=1800.0, help="seconds to wait for one peer answer")
    p.add_argument("--workload", default="both",
                   help="default (benchmarks/workload.py, the one the defaults were tuned on), heldout (benchmarks/heldout.py, "
                        "never tuned on), both (the default; reported side by side) or a workload .py file")
    p.add_argument("--resummarize", default=None, metavar="DIR",
                   help="recompute the summaries and table of a finished run in DIR with this code (runs nothing); "
                        "with --workload NAME for runs whose records predate the workload tag")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads for every mode and the peer (default: torch's; on a shared machine 1 avoids oversubscription)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--schema-hint", default="full", choices=["full", "compact", "types"],
                   help="how the prompt's schema hint writes the schema (default full)")
    p.add_argument("--schema-hint-place", default="user", choices=["user", "system"],
                   help="where the prompt writes the schema hint: after the user's text (default) or first, in a system message")
    p.add_argument("--no-lookup-gate", action="store_true",
                   help="propose every prompt-lookup plan, as before the lookup gate (DecodeConfig.lookup_gate=False)")
    p.add_argument("--grammar-engine", choices=("lazy", "automaton"), default="lazy",
                   help="lazy (llguidance, the default) or automaton (the eager byte DFA): Generator(grammar_engine=...)")
    p.add_argument("--draft-window", type=int, default=0,
                   help="the draft model sees only the last N prompt tokens (0: the whole prompt; DecodeConfig.draft_window)")
    p.add_argument("--prefill-overlap", choices=("auto", "on", "off"), default="auto",
                   help="prefill the draft beside the target on a second thread (auto: where torch's threads leave cores idle; DecodeConfig.prefill_overlap)")
    p.add_argument("--draft-plan", choices=("auto", "always"), default="auto",
                   help="leave the draft model out of requests too short to repay its prefill (auto) or always use it (DecodeConfig.draft_plan)")
    p.add_argument("--prefill-split", type=int, default=0,
                   help="prefill in forwards of this many tokens (0: one forward; Generator(prefill_split=...))")
    p.add_argument("--no-chart", action="store_true", help="skip chart.png (matplotlib)")
    p.add_argument("--concurrency", default=None, metavar="C,C",
                   help="concurrent clients instead: one-at-a-time vs continuous batching at these client counts "
                        "(benchmarks/concurrency.py; its own options follow: --prompts, --max-new-tokens, --threads, --out)")
    return p


def main(argv: Sequence[str] | None = None, *, generator: Any = None, workload: Sequence[Any] | None = None) -> int:
    """``python benchmarks/bench.py ARGS``; ``generator``/``workload`` may be injected (tests)."""
    raw = list(argv) if argv is not None else sys.argv[1:]
    if any(a == "--concurrency" or a.startswith("--concurrency=") for a in raw):  # the concurrent-clients mode
        from benchmarks.concurrency import main as concurrency_main

        rest = [a for a in raw if not (a == "--concurrency" or a.startswith("--concurrency="))]
        value = next((a.split("=", 1)[1] for a in raw if a.startswith("--concurrency=")), None)
        if value is None:
            i = raw.index("--concurrency")
            value = raw[i + 1] if i + 1 < len(raw) else "1,8"
            rest = raw[:i] + raw[i + 2 :]
        return concurrency_main(["--clients", value, *rest])
    args = build_parser().parse_args(raw)
    if args.resummarize:
        results = resummarize(args.resummarize, args.workload if args.workload != "both" else None)
        print(markdown_table(results))
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ks = args.ks or (QUICK_KS if args.quick else DEFAULT_KS)
    n_prompts = args.prompts if args.prompts is not None else (2 if args.quick else None)
    temps = (0.0,) if (args.quick or args.no_sampled) else (0.0, args.temperature)
    if workload is None:
        workload = load_workloads(args.workload, n_prompts)
    elif n_prompts is not None:
        workload = list(workload)[:n_prompts]
    select = args.modes.split(",") if args.modes else None
    modes = build_modes(ks, args.proposer_k, fixed=not args.no_fixed, proposers=not args.no_proposers,
                        adaptive=not args.no_adaptive, peer=not args.no_peer, hf_assist=not args.no_hf_assist, select=select,
                        all_proposer_ks=args.all_proposer_ks)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out_dir = Path(args.out) if args.out else Path("results") / f"bench-{stamp}"
    out_dir.mkdir(parents=True, exist_ok=True)
    progress = not args.no_progress
    config = BenchConfig(ks=tuple(ks), max_new_tokens=args.max_new_tokens, temperatures=temps, seed=args.seed,
                         rounds=args.rounds, calibrate=args.calibrate, cold_masks=not args.warm_masks, progress=progress, extra={"argv": list(argv or sys.argv[1:])})

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    if generator is None:
        from constrained_spec.api import Generator

        draft = None if str(args.draft).lower() in {"none", ""} else args.draft
        # num_draft_tokens = the largest k: it is also the cap of adaptive k (its cost curve's length)
        generator = Generator(args.model, draft, cache_dir=args.cache_dir, dtype=args.dtype, draft_dtype=args.draft_dtype, device=args.device,
                              progress=progress,
                              max_new_tokens=args.max_new_tokens, num_draft_tokens=max(ks), schema_hint_style=args.schema_hint,
                              schema_hint_place=args.schema_hint_place,
                              draft_window=args.draft_window, prefill_overlap=args.prefill_overlap, draft_plan=args.draft_plan, grammar_engine=args.grammar_engine,
                              prefill_dtype=args.prefill_dtype, draft_prefill_dtype=args.draft_prefill_dtype,
                              prefill_split=args.prefill_split, lookup_gate=not args.no_lookup_gate, runtime=args.runtime)
        config.extra["load_s"] = time.perf_counter() - t0
        config.extra["prefill"] = {"dtype": args.prefill_dtype, "draft_dtype": args.draft_prefill_dtype,
                                   "split": args.prefill_split, "twin_bytes": generator.prefill_twin_bytes}
    config.extra["grammar_engine"] = getattr(generator, "grammar_engine", None)
    config.extra["schema_hint"] = generator.schema_hint_style
    config.extra["schema_hint_place"] = args.schema_hint_place
    config.extra["draft_window"] = generator.decode.draft_window
    config.extra["prefill_overlap"] = generator.decode.prefill_overlap
    config.extra["draft_plan"] = generator.decode.draft_plan
    plan_costs = getattr(getattr(generator, "builder", None), "plan_costs", None)  # measured at load (engine.plan_costs)
    config.extra["plan_costs"] = None if plan_costs is None else {**plan_costs.to_dict(), "measured": plan_costs.measured}
    config.extra["lookup_gate"] = generator.decode.lookup_gate
    _warm_up(generator)

    peer = None
    if any(m.kind == "peer" for m in modes):
        python = find_peer_python(args.peer_python)
        model_path, peer_dtype = args.peer_model, (None if args.dtype == "auto" else args.dtype)
        peer_device = str(getattr(generator.target, "device", "cpu"))  # the peer runs where the target does
        if model_path is None and isinstance(args.model, str):
            try:
                from constrained_spec.models.torch.devices import dtype_for_device
                from constrained_spec.models.torch.resolve import lookup_role, resolve_model_path

                tag = dtype_for_device(args.dtype, lookup_role(args.model, "target"), peer_device)
                r = resolve_model_path(args.model, cache_dir=args.cache_dir, dtype=tag, progress=False)
                model_path = r.path if r.kind in {"short-name", "folder"} else None
                peer_dtype = r.dtype
            except Exception as exc:  # noqa: BLE001
                print(f"[bench] peer: cannot resolve the model folder: {exc}", file=sys.stderr)
        if python is None:
            print("[bench] peer: no interpreter with outlines (see benchmarks/README.md); skipped", file=sys.stderr)
        elif model_path is None:
            print("[bench] peer: needs a transformers model folder (--peer-model); skipped", file=sys.stderr)
        else:
            peer = PeerClient(python, model_path, threads=_torch_threads(), timeout=args.peer_timeout,
                              log_path=out_dir / "peer.log", dtype=peer_dtype, device=peer_device)
            try:
                info = peer.start()
                print(f"[bench] peer ready: outlines {info.get('versions', {}).get('outlines')} via {python} "
                      f"(load {info.get('load_s', 0):.1f} s)", file=sys.stderr)
            except PeerError as exc:
                print(f"[bench] peer: {exc}; skipped", file=sys.stderr)
                peer = None
    jsonl = out_dir / "records.jsonl"

    def save(rec: dict[str, Any]) -> None:
        with open(jsonl, "a") as fh:
            fh.write(json.dumps(rec, default=str) + "\n")

    try:
        results = run_benchmark(generator, workload, modes, config, peer=peer, on_record=save)
    finally:
        if peer is not None:
            peer.close()
    results["meta"]["total_s"] = time.perf_counter() - t0
    paths = write_outputs(results, out_dir, chart=not args.no_chart)
    print(markdown_table(results))
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    bad = [f"{s}/{m}" for s, rows in results["summary"].items() for m, e in rows.items()
           if e.get("valid_share") is not None and e["valid_share"] < 1.0 and not m.startswith("peer")]
    mism = [f"{s}/{m}" for s, rows in results["summary"].items() for m, e in rows.items()
            if e.get("greedy_same_as_target") and e["greedy_same_as_target"][0] < e["greedy_same_as_target"][1] and not m.startswith("peer")]
    if bad:
        print(f"[bench] WARNING: outputs that do not validate in {', '.join(bad)}", file=sys.stderr)
    if mism:
        print(f"[bench] WARNING: greedy outputs differ from target-only in {', '.join(mism)}", file=sys.stderr)
    return 0


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _warm_up(gen: Any) -> None:
    """One short forward per model, so one-time initialisation is not charged to the first run."""
    ids = list(range(1, 9))
    for m in (gen.target, gen.draft):
        if m is None:
            continue
        try:
            m.reset()
            m.extend(ids)
            m.reset()
        except Exception:  # noqa: BLE001
            pass


if __name__ == "__main__":
    sys.exit(main())
