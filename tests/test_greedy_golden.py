"""Greedy outputs of the 8 benchmark prompts on the default pair, token for token, against ids
recorded on 2026-12-01, before the code was split into rooms (``tests/data/greedy_golden.json``).

Marked ``real_models`` (needs the real Qwen2.5-Coder pair; ``pytest -m real_models``). To record the
file again on purpose: ``CONSTRAINED_SPEC_RECORD_GOLDEN=1 pytest -m real_models tests/test_greedy_golden.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "data" / "greedy_golden.json"
ROOT = Path(__file__).resolve().parents[1]
MAX_NEW_TOKENS = 320  # the benchmark's budget


def _workload():
    spec = importlib.util.spec_from_file_location("_cs_workload", ROOT / "benchmarks" / "workload.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.load_workload(8)


@pytest.mark.real_models
@pytest.mark.parametrize("draft_window,overlap,plan", [(0, "off", "always"), (0, "on", "always"), (256, "auto", "always"), (0, "off", "auto")],
                         ids=["whole-prompt", "whole-prompt-overlapped", "window256", "draft-plan"])
def test_greedy_outputs_match_recorded_ids(draft_window, overlap, plan):
    """Every lever that changes only the proposals or the order of work (here the draft's prompt
    window, its prefill beside the target's, and the draft plan, which on a CPU leaves the draft out
    where its prefill is not hidden) keeps them. The draft levers run with the draft always used."""
    from constrained_spec import Generator

    gen = Generator(progress=False, calibrate_plan=False)  # the plan's constants: costs measured here would make "auto" the host's
    got = {}
    for item in _workload():
        result = gen.run(item.prompt, item.schema, max_new_tokens=MAX_NEW_TOKENS, temperature=0.0, draft_window=draft_window,
                         prefill_overlap=overlap, draft_plan=plan)
        if overlap != "auto":
            assert result.stats.prefill_overlapped is (overlap == "on")
        assert result.stats.draft_skipped is (plan == "auto")  # off: not overlapped, and the measured gain is 0
        got[item.id] = result.token_ids
    if not draft_window and overlap == "off" and os.environ.get("CONSTRAINED_SPEC_RECORD_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=None) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert set(got) == set(want)
    for key in want:
        assert got[key] == want[key], f"{key}: greedy output changed"
