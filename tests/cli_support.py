"""Shared by the CLI tests: ``constrained-spec`` run as a subprocess or in this process (the model folders are the
model_dirs fixture of tests/conftest.py). A test that is not about the process (exit path, imports, start-up time)
runs the command in this process: a fresh one costs seconds of torch import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    """``python -m constrained_spec.cli ARGS`` from the repository root, offline, with its own cache folder."""
    env = {"CONSTRAINED_SPEC_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "constrained_spec.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300, check=False)


def main_in_process(capsys, monkeypatch, cache: Path, *args: str) -> tuple[int, str, str]:
    """``constrained-spec ARGS`` run by ``cli.main`` in this process (no second torch import), with its own
    cache folder: exit code, stdout, stderr."""
    from constrained_spec.cli import commands as cli

    monkeypatch.setenv("CONSTRAINED_SPEC_CACHE", str(cache))
    capsys.readouterr()  # what earlier code printed is not this command's
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err
