"""``generate --alignment smc --particles N`` on tiny saved model folders, and its usage errors."""

from __future__ import annotations

import json
import re

import pytest


def test_smc_prints_a_valid_sample_and_its_particles(model_dirs, tmp_path, capsys, monkeypatch):
    from constrained_spec import cli

    monkeypatch.setenv("CONSTRAINED_SPEC_CACHE", str(tmp_path))
    code = cli.main(["generate", "--regex", "(yes|no)( thanks)?", "--prompt", "Reply", "--model", model_dirs[0], "--draft", model_dirs[1],
                     "--alignment", "smc", "--particles", "3", "--temperature", "1", "--seed", "2", "--stats", "--max-new-tokens", "8"])
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    assert re.fullmatch("(yes|no)( thanks)?", out.out.strip("\n"))
    report = json.loads(out.err[out.err.rindex('{\n  "particles"'):])
    assert len(report["particles"]) == 3 and report["log_z"] <= 0


@pytest.mark.parametrize("flags,message", [
    (["--alignment", "smc"], "--temperature > 0"),
    (["--alignment", "smc", "--temperature", "1", "--particles", "0"], "--particles"),
    (["--ess-threshold", "1.5"], "--ess-threshold"),
])
def test_smc_usage_errors_before_anything_loads(capsys, flags, message):
    from constrained_spec import cli

    try:
        code = cli.main(["generate", "--regex", "a|b", "--prompt", "x", "--model", "/no/such/model", *flags])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
