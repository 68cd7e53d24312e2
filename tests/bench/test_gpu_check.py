"""The prepared GPU check (benchmarks/gpu_check.sh) as far as a CPU machine can check it: its syntax,
its dry run (every step named, in order, with the commands a GPU run executes), that a failing step
stops the run loudly, and its report helper's verdicts."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
STEPS = ["setup", "env", "kernels", "e2e", "distribution", "batched"]


def _report_module():
    spec = importlib.util.spec_from_file_location("gpu_check_report", ROOT / "benchmarks" / "gpu_check_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(*args: str, env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env_extra)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120, check=False)


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True).returncode == 0


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_shellcheck_is_clean():
    out = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout


@pytest.mark.parametrize("how", ["flag", "env"])
def test_dry_run_prints_every_step_in_order_and_runs_nothing(how, tmp_path):
    folder = tmp_path / "out"
    env = {"GPU_CHECK_OUT": str(folder), "PYTHON": sys.executable}
    out = run_script("--dry-run", env_extra=env) if how == "flag" else run_script(env_extra={**env, "GPU_CHECK_DRY_RUN": "1"})
    assert out.returncode == 0, out.stderr
    named = re.findall(r"^step (\d) (\w+) \(limit (\d+)s\):", out.stdout, flags=re.M)
    assert [(int(n), name) for n, name, _ in named] == list(enumerate(STEPS))
    assert all(int(limit) > 0 for _, _, limit in named)  # every step runs under a time limit
    assert not folder.exists(), "a dry run must not create the results folder"
    commands = dict(zip(STEPS, re.split(r"^step \d \w+ \(limit \d+s\):\n", out.stdout, flags=re.M)[1:]))
    assert "CONSTRAINED_SPEC_TEST_DEVICE=cuda" in commands["kernels"] and "--require-triton" in commands["kernels"]
    assert "--batches 1,8,64 --ks 1,4,8 --vocab 151936" in commands["kernels"]
    assert "TRITON_INTERPRET=1" not in out.stdout
    assert "--device cuda" in commands["e2e"] and "--workload default --prompts 8" in commands["e2e"]
    assert "target,k5+grammar+lookup,peer" in commands["e2e"] and "--temperature 0.7" in commands["e2e"]
    assert "CONSTRAINED_SPEC_TEST_DEVICE=cuda" in commands["distribution"] and "negative_controls" in commands["distribution"]
    assert "--help | grep -q -- --concurrency" in commands["batched"] and "--concurrency 1,8,32" in commands["batched"]
    assert all(str(folder) in commands[s] for s in ("env", "kernels", "e2e", "distribution", "batched"))


def test_unknown_argument_is_refused():
    out = run_script("--fast", env_extra={})
    assert out.returncode == 2 and "unknown argument --fast" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available() or shutil.which("nvidia-smi") is not None, reason="a GPU machine: step 1 would pass")
def test_a_failing_step_stops_the_run_loudly_naming_it(tmp_path):
    """Without a GPU the environment step fails: the run stops there with exit 1, says which step,
    and records it; the later steps never start."""
    folder = tmp_path / "out"
    out = run_script(env_extra={"GPU_CHECK_OUT": str(folder), "GPU_CHECK_SKIP_SETUP": "1", "PYTHON": sys.executable})
    assert out.returncode == 1
    assert "GPU CHECK FAILED at step 1 (env)" in out.stderr
    rows = [line.split("\t") for line in (folder / "steps.tsv").read_text().splitlines()[1:]]
    assert [(r[0], r[1], r[2].split()[0]) for r in rows] == [("0", "setup", "ok"), ("1", "env", "FAILED")]
    assert (folder / "1-env.log").exists() and not (folder / "2-kernels.log").exists()
    assert "step 1 (env)" in (folder / "FAILED").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU machine")
def test_environment_report_names_the_missing_gpu():
    info, problems = _report_module().environment(None)
    assert info["cuda_available"] is False and info["verify_backend_auto"] == "torch"
    assert any("no CUDA device" in p for p in problems)


def _summary(peer: bool = True, valid: float = 1.0, spec_x: float = 2.6, same=(8, 8)) -> dict:
    def entry(tps, x_target, x_peer=None, same_=None, valid_=1.0):
        return {"ok": 8, "runs": 8, "tokens_per_second_median": tps, "speedup_vs_target_median": x_target,
                "speedup_vs_peer_median": x_peer, "valid_share": valid_, "greedy_same_as_target": same_, "acceptance_rate": 0.7, "errors": []}

    out = {}
    for setting in ("greedy", "sampled-t0.7"):
        rows = {"target": entry(40.0, 1.0), "k5+grammar+lookup": entry(40.0 * spec_x, spec_x, 3.2, same if setting == "greedy" else None, valid)}
        if peer:
            rows["peer:outlines"] = entry(30.0, 0.75)
        out[setting] = rows
    return {"summary": out, "meta": {"device": "cuda:0", "gpu": "NVIDIA H200", "dtype": "torch.bfloat16"}}


def test_e2e_report_passes_a_complete_run_and_reports_the_targets():
    lines, problems = _report_module().e2e_report(_summary())
    assert problems == []
    text = "\n".join(lines)
    assert "greedy, speculative vs target-only >= 2.5x: 2.60x MET" in text
    assert "greedy, speculative vs outlines >= 3.0x: 3.20x MET" in text
    assert "sampled-t0.7, speculative vs target-only >= 2.0x: 2.60x MET" in text
    _, problems = _report_module().e2e_report(_summary(spec_x=1.5, same=(6, 8)))
    assert problems == []  # slow, or greedy texts that differ in bf16: reported, not a failure
    lines, _ = _report_module().e2e_report(_summary(spec_x=1.5, same=(6, 8)))
    assert any("MISSED" in line for line in lines) and any("6/8" in line for line in lines)


def test_e2e_report_fails_a_skipped_peer_or_an_invalid_output():
    _, problems = _report_module().e2e_report(_summary(peer=False))
    assert any("peer:outlines has no successful run" in p for p in problems)
    _, problems = _report_module().e2e_report(_summary(valid=0.875))
    assert any("valid share 0.875" in p for p in problems)
