"""Shared by the CLI tests: a subprocess run of ``constrained-spec`` (the model folders are the model_dirs fixture of tests/conftest.py)."""

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
