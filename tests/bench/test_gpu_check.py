"""The prepared GPU check (benchmarks/gpu_check.sh) as far as a CPU machine can check it: its syntax,
its dry run (every step named, in order, with the commands a GPU run executes), that without a GPU
it stops in seconds before installing anything, that a failing step is recorded while the steps that
do not need it still run, that the budget skips what would not fit, and its report helper's verdicts."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
STEPS = ["gpu", "setup", "env", "verify_us", "models", "e2e", "distribution", "batched", "kernel_tests"]


def _report_module():
    spec = importlib.util.spec_from_file_location("gpu_check_report", ROOT / "benchmarks" / "gpu_check_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(*args: str, env_extra: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env_extra)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout, check=False)


def _stub(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def _rows(folder: Path) -> list[tuple[str, str, str]]:
    lines = (folder / "steps.tsv").read_text().splitlines()[1:]
    return [(r[1], r[2].split()[0], r[2]) for r in (line.split("\t") for line in lines)]


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
    assert "nvidia-smi" in commands["gpu"] and "torch.cuda.is_available()" in commands["gpu"]
    assert "make install-test" in commands["setup"] and "pypi.org" in commands["setup"]  # installs only after the GPU is found
    assert "--require-triton" in commands["verify_us"] and "--batches 1,8,64 --ks 1,4,8 --vocab 151936" in commands["verify_us"]
    assert "TRITON_INTERPRET=1" not in out.stdout
    assert "fetch-models" in commands["models"]
    assert "--device cuda" in commands["e2e"] and "--workload default --prompts 8" in commands["e2e"]
    assert "target,k5+grammar+lookup,k5+grammar+lookup+always" in commands["e2e"] and "--temperature 0.7" in commands["e2e"]
    assert "CONSTRAINED_SPEC_TEST_DEVICE=cuda" in commands["distribution"] and "negative_controls" in commands["distribution"]
    assert "--clients 1,8,32" in commands["batched"] and "--device cuda" in commands["batched"]
    assert "CONSTRAINED_SPEC_TEST_DEVICE=cuda" in commands["kernel_tests"] and "test_kernels.py" in commands["kernel_tests"]
    assert all(str(folder) in commands[s] for s in ("env", "verify_us", "e2e", "distribution", "batched", "kernel_tests"))


def test_unknown_argument_is_refused():
    out = run_script("--fast", env_extra={})
    assert out.returncode == 2 and "unknown argument --fast" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available() or shutil.which("nvidia-smi") is not None, reason="a GPU machine: step 0 would pass")
def test_without_a_gpu_it_stops_in_seconds_before_any_setup(tmp_path):
    """No GPU: step 0 fails, the run stops there with exit 1 and says so, and no later step (the
    install, the model fetch) ever starts."""
    folder = tmp_path / "out"
    start = time.monotonic()
    out = run_script(env_extra={"GPU_CHECK_OUT": str(folder), "PYTHON": sys.executable}, timeout=60)
    took = time.monotonic() - start
    assert out.returncode == 1
    assert took < 20, f"the GPU check took {took:.1f}s to find there is no GPU"
    assert "GPU CHECK FAILED at step 0 (gpu)" in out.stderr and "no GPU" in out.stderr
    assert [(name, status) for name, status, _ in _rows(folder)] == [("gpu", "FAILED")]
    assert (folder / "0-gpu.log").exists() and not (folder / "1-setup.log").exists()
    assert "step 0 (gpu)" in (folder / "FAILED").read_text()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU machine: torch sees CUDA")
def test_a_gpu_that_torch_cannot_see_stops_the_run(tmp_path):
    """nvidia-smi lists a GPU (a stub here) but this torch sees no CUDA (a CPU build): the run still
    stops at step 0, in the seconds torch takes to import."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "nvidia-smi", 'case "$1" in -L) echo "GPU 0: Stub GPU (UUID: GPU-0)";; *) echo "Stub GPU, 0, 80 GiB";; esac')
    folder = tmp_path / "out"
    start = time.monotonic()
    out = run_script(env_extra={"GPU_CHECK_OUT": str(folder), "PYTHON": sys.executable,
                                "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, timeout=120)
    assert out.returncode == 1 and time.monotonic() - start < 60
    assert "torch.cuda.is_available() is False" in out.stderr
    assert [(name, status) for name, status, _ in _rows(folder)] == [("gpu", "FAILED")]


def _stub_machine(tmp_path: Path, python_body: str) -> dict[str, str]:
    """A PATH with a stub nvidia-smi that lists a GPU and a stub Python that runs nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _stub(bin_dir, "nvidia-smi", 'case "$1" in -L) echo "GPU 0: Stub GPU (UUID: GPU-0)";; *) echo "Stub GPU, 0, 80 GiB";; esac')
    python = _stub(bin_dir, "stub-python", python_body)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHON": str(python)}


def test_a_failing_step_is_recorded_and_the_independent_steps_still_run(tmp_path):
    """The model fetch fails (no PyPI, say): end to end and batched, which need the models, are
    skipped; every other step runs; the run ends with exit 1 naming what did not pass."""
    env = _stub_machine(tmp_path, 'for a in "$@"; do [[ "$a" == fetch-models ]] && { echo "no network" >&2; exit 1; }; done; exit 0')
    folder = tmp_path / "out"
    out = run_script(env_extra={**env, "GPU_CHECK_OUT": str(folder)}, timeout=60)
    assert out.returncode == 1
    rows = {name: status for name, status, _ in _rows(folder)}
    assert list(rows) == STEPS
    assert rows["models"] == "FAILED"
    assert rows["e2e"] == "SKIPPED" and rows["batched"] == "SKIPPED"
    assert all(rows[s] == "ok" for s in ("gpu", "setup", "env", "verify_us", "distribution", "kernel_tests"))
    assert "GPU CHECK INCOMPLETE" in out.stderr and "4 (models)" in out.stderr
    assert not (folder / "5-e2e.log").exists() and (folder / "6-distribution.log").exists()


def test_the_budget_skips_what_would_not_fit(tmp_path):
    """With no budget left after the GPU step, every later step is recorded as skipped, none runs."""
    env = _stub_machine(tmp_path, "exit 0")
    folder = tmp_path / "out"
    out = run_script(env_extra={**env, "GPU_CHECK_OUT": str(folder), "GPU_CHECK_BUDGET_S": "10"}, timeout=60)
    assert out.returncode == 1
    rows = _rows(folder)
    assert rows[0][:2] == ("gpu", "ok")
    assert [(name, status) for name, status, _ in rows[1:]] == [(s, "SKIPPED") for s in STEPS[1:]]
    assert all("budget" in full for _, _, full in rows[1:])


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU machine")
def test_environment_report_names_the_missing_gpu():
    info, problems = _report_module().environment(None)
    assert info["cuda_available"] is False and info["verify_backend_auto"] == "torch"
    assert any("no CUDA device" in p for p in problems)


def _summary(peer: bool = True, valid: float = 1.0, spec_x: float = 2.6, same=(8, 8), forced: bool = True) -> dict:
    def entry(tps, x_target, x_peer=None, same_=None, valid_=1.0):
        return {"ok": 8, "runs": 8, "tokens_per_second_median": tps, "speedup_vs_target_median": x_target,
                "speedup_vs_peer_median": x_peer, "valid_share": valid_, "greedy_same_as_target": same_, "acceptance_rate": 0.7, "errors": []}

    out = {}
    for setting in ("greedy", "sampled-t0.7"):
        rows = {"target": entry(40.0, 1.0), "k5+grammar+lookup": entry(40.0 * spec_x, spec_x, 3.2, same if setting == "greedy" else None, valid)}
        if forced:
            rows["k5+grammar+lookup+always"] = entry(40.0 * 2.0, 2.0, None, same if setting == "greedy" else None)
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


def test_e2e_report_fails_a_missing_mode_or_an_invalid_output():
    _, problems = _report_module().e2e_report(_summary(peer=False))
    assert problems == []  # the peer is reported when it ran, not required
    _, problems = _report_module().e2e_report(_summary(forced=False))
    assert any("k5+grammar+lookup+always has no successful run" in p for p in problems)
    _, problems = _report_module().e2e_report(_summary(valid=0.875))
    assert any("valid share 0.875" in p for p in problems)
