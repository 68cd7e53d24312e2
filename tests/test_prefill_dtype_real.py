"""The bf16 prefill lever on the real pair: greedy speculative output equals greedy target-only output
when both prefill through the bf16 twins, on the 8 tuned and the 13 held-out benchmark prompts.

Marked ``real_models`` (``pytest -m real_models tests/test_prefill_dtype_real.py``); about 20 minutes
on 2 CPU cores. The oracle is the target-only run of the same model (bf16 prefill + fp16w decode),
token for token; the default mode's output must equal it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_NEW_TOKENS = 320  # the benchmark's budget


def _workload(file: str, n: int | None):
    spec = importlib.util.spec_from_file_location(f"_cs_{file}", ROOT / "benchmarks" / f"{file}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module.load_workload(n)


@pytest.fixture(scope="module")
def generator():
    from constrained_spec import Generator

    return Generator(progress=False, prefill_dtype="bf16")


@pytest.mark.real_models
@pytest.mark.parametrize("file,n", [("workload", 8), ("heldout", None)], ids=["tuned8", "heldout13"])
def test_bf16_prefill_keeps_greedy_identity(generator, file, n):
    assert generator.prefill_twin_bytes > 0
    for item in _workload(file, n):
        base = generator.run(item.prompt, item.schema, max_new_tokens=MAX_NEW_TOKENS, temperature=0.0,
                             num_draft_tokens=0, proposers=())
        spec = generator.run(item.prompt, item.schema, max_new_tokens=MAX_NEW_TOKENS, temperature=0.0)
        assert spec.token_ids == base.token_ids, f"{item.id}: speculative output parted from target-only"
