"""The benchmark machinery on tiny random models (no real models; it measures nothing here)."""

from __future__ import annotations

import json
import sys
import textwrap
from types import SimpleNamespace

import pytest
from tiny_models import tiny_llama

from benchmarks import bench  # the runner in benchmarks/ (conftest puts the repository root on sys.path)
from constrained_spec.api import Generator


@pytest.fixture(scope="module")
def generator(gpt2_tokenizer, tmp_path_factory):
    return Generator(tiny_llama(50257, seed=1), tiny_llama(50257, seed=2), tokenizer=gpt2_tokenizer,
                     max_new_tokens=400, cache_dir=tmp_path_factory.mktemp("cache"), progress=False)


def test_bench_writes_json_and_markdown(generator, tmp_path, capsys):
    workload = [w for w in bench.load_workload_module().load_workload() if w.schema_name == "weather"][:1]
    out = tmp_path / "out"
    rc = bench.main(["--out", str(out), "--ks", "2", "--no-proposers", "--no-adaptive", "--no-peer",
                     "--no-hf-assist", "--no-sampled", "--no-progress", "--no-chart", "--max-new-tokens", "400"], generator=generator, workload=workload)
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    greedy = results["summary"]["greedy"]
    assert {"target", "k2"} <= set(greedy)
    for name in ("target", "k2"):
        e = greedy[name]
        for key in ("tokens_per_second_median", "latency_s_median", "target_forwards_per_token", "forced_share",
                    "mask_us_per_token_p50", "mask_us_per_token_p99", "compile_s_mean", "peak_rss_mb", "valid_share",
                    "speedup_vs_target_median"):
            assert key in e, key
        assert e["valid_share"] == 1.0 and e["tokens_per_second_median"] > 0
    assert greedy["k2"]["acceptance_rate"] is not None and greedy["k2"]["mean_accepted_len"] is not None
    assert greedy["k2"]["greedy_same_as_target"] == [1, 1]  # greedy speculative == greedy target-only
    assert greedy["k2"]["predicted_speedup_median"] is not None
    ratio = [r["speedup_vs_target"] for r in results["records"] if r["mode"] == "k2"]
    assert abs(greedy["k2"]["speedup_vs_target_geomean"] - ratio[0]) < 1e-9  # one prompt: the ratio itself
    recs = {r["mode"]: r for r in results["records"]}
    assert recs["k2"]["token_ids"] == recs["target"]["token_ids"]
    for r in recs.values():  # mask time comes from the loop's on_grammar_call hook: the loop's own mask_seconds
        assert r["mask_calls"] > 0 and r["mask_us_per_call_p50"] > 0
        assert r["mask_us_per_token"] == pytest.approx(r["mask_us_per_token_stats"], rel=1e-6)
    assert results["compile"]["weather"]["project_cold_s"] > 0
    assert len((out / "records.jsonl").read_text().splitlines()) == len(results["records"])
    table = (out / "table.md").read_text()
    assert "| mode |" in table and "| target |" in table and "| k2 |" in table
    assert "tok/s" in capsys.readouterr().out
    assert not (out / "chart.png").exists()  # --no-chart; the chart itself is checked below


def test_chart_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    e = {"tokens_per_second_median": 2.0, "speedup_vs_target_median": 1.0, "predicted_speedup_median": None}
    results = {"summary": {"greedy": {"target": e, "k2": dict(e, tokens_per_second_median=3.0, speedup_vs_target_median=1.5,
                                                               predicted_speedup_median=1.6)}}}
    assert bench.write_chart(results, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 1000


def test_hf_assist_reference_runs(generator):
    ids = generator.prompt_ids("A weather report:")
    rec = bench._hf_assist_record(generator, ids, max_new_tokens=12)
    assert rec["ok"] and 0 < rec["generated_tokens"] <= 12 and rec["tokens_per_second"] > 0


def test_modes_and_selection():
    names = [m.name for m in bench.build_modes((2, 4), peer=True, hf_assist=True)]
    assert names[0] == "target" and {"k2", "k4", "k4+grammar", "k4+grammar+lookup", "adaptive", "peer:outlines", "hf-assist"} <= set(names)
    assert [m.name for m in bench.build_modes((2, 4), select=["fixed"])] == ["target", "k2", "k4"]
    with pytest.raises(ValueError, match="unknown mode"):
        bench.build_modes((2,), select=["nonsense"])
    sweep = [m for m in bench.build_modes((4,), all_proposer_ks=(2, 4, 6), select=["proposers"]) if m.name != "target"]
    assert [(m.name, m.k) for m in sweep] == [("k4+grammar", 4), ("k2+grammar+lookup", 2), ("k4+grammar+lookup", 4),
                                               ("k6+grammar+lookup", 6)]
    assert all(m.proposers == bench.ALL_PROPOSERS for m in sweep[1:])


def test_predicted_speedup_formula():
    base = SimpleNamespace(target_forwards=10, verify_seconds=1.0)  # 0.1 s per target forward
    spec = SimpleNamespace(target_forwards=4, drafted_tokens=10, accepted_tokens=8, draft_forwards=8, draft_seconds=0.24, verify_seconds=0.6)
    value = bench.predicted_speedup(spec, base)
    # E[tokens/step] = 8/4 + 1 = 3; cost/step = 2 * 0.03 + 0.15 = 0.21; 3 / 0.21 * 0.1
    assert value == pytest.approx(3 / 0.21 * 0.1)


def test_predicted_e2e_speedup_formula():
    base = {"latency_s": 12.0, "wall_s": 11.0, "prefill_s": 4.0, "decode_s": 7.0}  # 1 s outside the loop
    spec = {"draft_prefill_s": 0.5, "predicted_speedup": 2.0}
    # predicted latency = 1 + 4 + 0.5 + 7 / 2 = 9.0
    assert bench.predicted_e2e_speedup(spec, base) == pytest.approx(12.0 / 9.0)
    # the draft prefilled beside the target: its seconds are hidden, 1 + 4 + 7 / 2 = 8.5
    assert bench.predicted_e2e_speedup({**spec, "prefill_overlapped": True}, base) == pytest.approx(12.0 / 8.5)
    assert bench.predicted_e2e_speedup({"predicted_speedup": 1.0}, base) == pytest.approx(1.0)  # no draft, no gain
    assert bench.predicted_e2e_speedup({}, base) is None


def test_peer_client_protocol(tmp_path):
    script = tmp_path / "fake_peer.py"
    script.write_text(textwrap.dedent("""
        import json, sys
        print(json.dumps({"ready": True, "load_s": 0.0, "versions": {"outlines": "fake"}}), flush=True)
        for line in sys.stdin:
            req = json.loads(line)
            if req["op"] == "quit":
                break
            if req["op"] == "compile":
                reply = {"ok": True, "compile_s": 0.5}
            else:
                reply = {"ok": True, "text": '{"a":1}', "token_ids": [1, 2, 3], "generated_tokens": 3, "forwards": 4,
                         "wall_s": 1.0, "prefill_s": 0.25, "decode_s": 1.0, "tokens_per_second": 3.0,
                         "peak_rss_mb": 10.0, "prompt_ids_match": req["prompt_ids"] == [5, 6]}
            print(json.dumps(reply), flush=True)
    """))
    peer = bench.PeerClient(sys.executable, "unused", timeout=30, script=script)
    assert peer.start()["ready"]
    item = SimpleNamespace(schema_name="s", schema={"type": "object", "properties": {"a": {"type": "integer"}}})
    rec = bench._peer_record(peer, item, "prompt", [5, 6], 0.0, 0, 10)
    peer.close()
    assert rec["ok"] and rec["valid"] and rec["tokens_per_second"] == 3.0 and rec["prompt_ids_match"]
    assert peer.compiled["s"]["compile_s"] == 0.5


def test_rounds_repeat_the_workload_and_pair_ratios_within_a_round(generator, tmp_path):
    workload = [w for w in bench.load_workload_module().load_workload() if w.schema_name == "weather"][:1]
    out = tmp_path / "out"
    rc = bench.main(["--out", str(out), "--ks", "2", "--no-proposers", "--no-adaptive", "--no-peer", "--no-hf-assist",
                     "--no-sampled", "--no-progress", "--no-chart", "--rounds", "2", "--max-new-tokens", "400"],
                    generator=generator, workload=workload)
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    recs = results["records"]
    assert sorted((r["mode"], r["round"]) for r in recs) == [("k2", 0), ("k2", 1), ("target", 0), ("target", 1)]
    for r in recs:
        if r["mode"] == "k2":
            base = next(b for b in recs if b["mode"] == "target" and b["round"] == r["round"])
            assert abs(r["speedup_vs_target"] - r["tokens_per_second"] / base["tokens_per_second"]) < 1e-9
    assert results["summary"]["greedy"]["k2"]["runs"] == 2


def test_zero_rounds_is_an_error_not_one_round(capsys):
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["--rounds", "0"])
    assert "--rounds: must be at least 1" in capsys.readouterr().err


# ----------------------------------------------------------------------------- held-out workload, end-to-end figures


def _subschemas(schema, parts):
    """Every subschema a JSON Pointer's path can reach (through properties, items, anyOf/oneOf)."""
    for branch in schema.get("anyOf", []) + schema.get("oneOf", []):
        yield from _subschemas(branch, parts)
    if not parts:
        yield schema
        return
    head, rest = parts[0], parts[1:]
    if head in schema.get("properties", {}):
        yield from _subschemas(schema["properties"][head], rest)
    if head.isdigit() and isinstance(schema.get("items"), dict):
        yield from _subschemas(schema["items"], rest)


def _check_expected(w) -> None:
    """Every expected value of workload entry ``w`` names a field of its schema, validates against it
    (``jsonschema``) and, where free text, is stated in the prompt."""
    import jsonschema

    for ptr, value in w.expected.items():
        parts = [p.replace("~1", "/").replace("~0", "~") for p in ptr.split("/")[1:]] if ptr else []
        subs = list(_subschemas(w.schema, parts))
        assert subs, f"{w.id}: {ptr} names no field of its schema"
        assert any(jsonschema.Draft202012Validator(s, format_checker=jsonschema.FormatChecker()).is_valid(value) for s in subs), \
            f"{w.id}: expected {ptr} = {value!r} does not validate against its field"
        if isinstance(value, str) and not any({"enum", "const", "format"} & set(s) for s in subs):
            assert value in w.prompt, f"{w.id}: {ptr} = {value!r} is not stated in the prompt"


def test_heldout_workload_integrity():
    import re

    import jsonschema

    module = bench.load_workload_module(bench.BENCH_DIR / "heldout.py")
    assert "BEFORE ANY TUNING" in module.__doc__ and "NEVER TUNE ON IT" in module.__doc__
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", module.WRITTEN) and module.WRITTEN in module.__doc__
    held = bench.load_workloads("heldout")
    default = bench.load_workloads("default")
    assert len(held) >= 12 and len({w.schema_name for w in held}) >= 8
    assert len({w.id for w in held}) == len(held)
    assert not {w.id for w in held} & {w.id for w in default}
    # no shared schema: neither by name nor by content
    assert not {w.schema_name for w in held} & {w.schema_name for w in default}
    canon = lambda s: json.dumps(s, sort_keys=True)  # noqa: E731
    assert not {canon(w.schema) for w in held} & {canon(w.schema) for w in default}
    extraction = [w for w in held if w.kind == "extraction"]
    assert len(extraction) >= 8 and all(w.expected for w in extraction)
    for w in held:
        jsonschema.validators.validator_for(w.schema).check_schema(w.schema)  # valid per its metaschema
        assert w.kind in {"extraction", "generative"}
        _check_expected(w)


def test_quality_workload_integrity():
    """The workload the schema hint is chosen on: its own prompts (none of the tuned or held-out ones),
    every prompt scored, every expected value valid for its field and, where free text, stated in the prompt."""
    import re


    module = bench.load_workload_module(bench.BENCH_DIR / "quality.py")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", module.WRITTEN) and module.WRITTEN in module.__doc__
    quality = bench.load_workloads("quality")
    others = bench.load_workloads("default") + bench.load_workloads("heldout")
    assert len(quality) >= 10 and len({w.id for w in quality}) == len(quality)
    assert not {w.id for w in quality} & {w.id for w in others} and not {w.prompt for w in quality} & {w.prompt for w in others}
    for w in quality:
        assert w.kind == "extraction" and w.expected
        _check_expected(w)


def test_field_match_and_e2e_summary_math():
    def rec(prompt, mode, latency, prefill, text=None, ok=True):
        return {"prompt": prompt, "mode": mode, "setting": "greedy", "round": 0, "workload": "w", "ok": ok,
                "latency_s": latency, "prefill_s": prefill, "text": text, "tokens_per_second": 10.0, "decode_s": 1.0,
                "generated_tokens": 10}

    records = [rec("a", "target", 10.0, 4.0, '{"x": 1.0, "y": ["s"]}'), rec("a", "k2", 5.0, 2.5, '{"x": true, "y": ["t"]}'),
               rec("b", "target", 20.0, 5.0, '{"x": 1, "y": ["s"]}'), rec("b", "k2", 25.0, 5.0, 'not json'),
               rec("c", "target", 30.0, 6.0, '{"y": ["s"], "x": 1}'), rec("c", "k2", 10.0, 1.0, '{"x": 1, "y": ["s", "u"]}')]
    records.append(dict(rec("a", "k2", 1.0, 0.5, None, ok=False), round=1))  # a failed run: no ratio, no field matched
    expected = {("w", p): {"/x": 1, "/y/0": "s"} for p in "abc"}
    bench.add_derived(records, expected)
    k2 = [r for r in records if r["mode"] == "k2" and r["round"] == 0]
    assert [r["e2e_speedup_vs_target"] for r in k2] == [2.0, 0.8, 3.0]
    assert [r["fields_matched"] for r in k2] == [0, 0, 2]  # true is not 1; "t" is not "s"; not JSON matches nothing
    assert k2[0]["fields_missed"] == ["/x", "/y/0"] and k2[0]["prefill_share"] == 0.5
    modes = [bench.Mode("target", "target"), bench.Mode("k2", "fixed", 2, ("draft",))]
    summary = bench.summarize(records, modes, ["greedy"], {})["greedy"]
    e = summary["k2"]
    assert e["e2e_speedup_vs_target_median"] == pytest.approx(2.0)
    assert e["e2e_speedup_vs_target_geomean"] == pytest.approx((2.0 * 0.8 * 3.0) ** (1 / 3))
    assert e["e2e_slower_than_target"] == 1
    assert (e["fields_matched"], e["fields_expected"]) == (2, 8) and e["field_exact_match"] == pytest.approx(0.25)
    assert e["latency_s_median"] == pytest.approx(10.0) and e["prefill_s_median"] == pytest.approx(2.5)
    t = summary["target"]
    assert t["e2e_speedup_vs_target_median"] == 1.0 and (t["fields_matched"], t["fields_expected"]) == (6, 6)
    assert t["prefill_share_median"] == pytest.approx(0.25)


def test_bench_reports_both_workloads_side_by_side(generator, tmp_path):
    default = [w for w in bench.load_workloads("default") if w.schema_name == "weather"][:1]
    held = [w for w in bench.load_workloads("heldout") if w.schema_name in ("yes_no", "single_integer")]
    assert {w.workload for w in default} == {"default"} and {w.workload for w in held} == {"heldout"}
    out = tmp_path / "out"
    rc = bench.main(["--out", str(out), "--ks", "2", "--no-proposers", "--no-adaptive", "--no-peer", "--no-hf-assist",
                     "--no-sampled", "--no-progress", "--no-chart", "--max-new-tokens", "400"],
                    generator=generator, workload=default + held)
    assert rc == 0
    results = json.loads((out / "results.json").read_text())
    by = results["summary_by_workload"]
    assert list(by) == ["default", "heldout"]
    recs = results["records"]
    assert {r["workload"] for r in recs if r["schema"] == "weather"} == {"default"}
    for name, summary in by.items():
        mine = [r for r in recs if r["workload"] == name]
        assert summary["greedy"]["target"]["runs"] == len([r for r in mine if r["mode"] == "target"])
        ratios = []
        for r in mine:
            if r["mode"] == "k2":
                base = next(b for b in mine if b["mode"] == "target" and b["prompt"] == r["prompt"])
                assert r["e2e_speedup_vs_target"] == pytest.approx(base["latency_s"] / r["latency_s"])
                ratios.append(base["latency_s"] / r["latency_s"])
        assert summary["greedy"]["k2"]["e2e_speedup_vs_target_median"] == pytest.approx(sorted(ratios)[len(ratios) // 2]
                                                                                       if len(ratios) % 2 else sum(sorted(ratios)[len(ratios) // 2 - 1:len(ratios) // 2 + 1]) / 2)
    # field exact match, recomputed here from the answers and the workload's expected values
    want = {w.id: w.expected for w in held}
    matched = 0
    for r in recs:
        if r["workload"] == "heldout" and r["mode"] == "k2":
            doc = json.loads(r["text"])
            matched += sum(1 for ptr, v in want[r["prompt"]].items()
                           if (doc if ptr == "" else doc[ptr.lstrip("/")]) == v and type(doc if ptr == "" else doc[ptr.lstrip("/")]) is type(v))
    k2 = by["heldout"]["greedy"]["k2"]
    assert (k2["fields_matched"], k2["fields_expected"]) == (matched, sum(len(v) for v in want.values()))
    assert by["default"]["greedy"]["k2"]["fields_expected"] is None  # the tuned workload states no expected values
    table = (out / "table.md").read_text()
    assert table.index("End-to-end, workload `default`") < table.index("End-to-end, workload `heldout`") < table.index("Decode detail")
    assert "× target e2e" in table and "fields exact" in table
    # --resummarize rebuilds the derived figures from the records alone
    for r in results["records"]:
        for key in ("e2e_speedup_vs_target", "fields_matched", "fields_expected", "prefill_share"):
            r.pop(key, None)
    del results["summary_by_workload"]
    (out / "results.json").write_text(json.dumps(results))
    assert bench.main(["--resummarize", str(out)]) == 0
    again = json.loads((out / "results.json").read_text())
    assert again["summary_by_workload"]["heldout"]["greedy"]["k2"]["fields_matched"] == matched
    assert all("e2e_speedup_vs_target" in r for r in again["records"])


def test_job_workload_integrity():
    """The job workload (benchmarks/job_docs.py): one schema, its own e-mails (none of the other workloads'),
    every answer field valid for the schema and, where free text, stated in the e-mail."""
    import re

    import jsonschema

    from benchmarks import job_docs

    assert "BEFORE ANY RUN" in job_docs.__doc__ and "NEVER TUNE ON IT" in job_docs.__doc__
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", job_docs.WRITTEN) and job_docs.WRITTEN in job_docs.__doc__
    docs = job_docs.load_workload()
    jsonschema.validators.validator_for(docs[0].schema).check_schema(docs[0].schema)
    assert len(docs) == 20 and len({d.id for d in docs}) == 20 and all(d.schema == docs[0].schema for d in docs)
    others = {w.prompt for name in ("default", "heldout", "quality") for w in bench.load_workloads(name)}
    assert not {d.prompt for d in docs} & others
    for d in docs:
        _check_expected(d)
        whole = {p.lstrip("/"): v for p, v in d.expected.items()} | {"summary": "s"}
        assert jsonschema.Draft202012Validator(d.schema).is_valid(whole), d.id  # the answers make a valid ticket


def test_job_judge_scores_values_and_fields():
    from benchmarks import job, job_docs

    docs = job_docs.load_workload(3)
    right = {p.lstrip("/"): v for p, v in docs[0].expected.items()} | {"summary": "s"}
    wrong = dict(right, priority="low" if right["priority"] != "low" else "high", refund_requested=int(right["refund_requested"]))
    score = job.judge([right, wrong, None], docs[:1] * 3, docs[0].schema)
    assert score == {"valid": 1, "fields": 6 + 4, "fields_total": 18}  # 1 is not false; None: no value


def test_job_scratch_cache_links_all_but_prompt_states(tmp_path):
    from benchmarks import job

    user = tmp_path / "user"
    (user / "gguf").mkdir(parents=True)
    (user / "gguf" / "m.gguf").write_text("x")
    (user / "prompt-states").mkdir()
    (user / "prompt-states" / "keep").write_text("y")
    scratch = job.scratch_cache(user, tmp_path / "scratch")
    assert (scratch / "gguf" / "m.gguf").read_text() == "x" and not (scratch / "prompt-states").exists()
    assert (user / "prompt-states" / "keep").read_text() == "y"
