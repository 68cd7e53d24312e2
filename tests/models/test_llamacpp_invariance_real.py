"""Batch invariance on the real default target (Qwen2.5-Coder-1.5B Q4_K_M as stored): blocks of 2, 6 and 16 at
the positions of a held-out prompt's greedy continuation (the prompt is past the 512 cells where flash
attention's single-query path changes) give bitwise the one-token logits, alone and as a batch row.
Marker ``real_models`` (the pair is fetched from PyPI, 1.6 GB): ``pytest -m real_models``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from conftest import require_llamacpp

pytestmark = pytest.mark.real_models

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_blocks_and_rows_are_bitwise_one_token_decoding_on_the_real_target():
    require_llamacpp()
    import llamacpp_invariance as probe

    from constrained_spec.models.llamacpp.model import LlamaCppWeights, batch_invariant_build, load_llamacpp

    assert batch_invariant_build(), "llama-cpp-python without scripts/llamacpp-batch-invariant.patch"
    loaded, tokenizer = load_llamacpp("qwen2.5-coder-1.5b", progress=False, n_ctx=2048)
    weights = LlamaCppWeights(loaded.path, threads=2, n_ctx=2048)
    assert weights.batch_invariant
    base = "Extract the order as JSON: order ORD-482913 for Ada Lovelace, 12 Analytical Row, London, zip 10115, shipped. "
    prompts = [tokenizer(base * 9)["input_ids"][:560], tokenizer("Name three colours as a JSON list:")["input_ids"]]
    refs = [probe.greedy_reference(weights, p, 12) for p in prompts]
    conts = [c for c, _ in refs]
    for n in (2, 6, 16):
        alone = probe.sequence_blocks(weights, prompts[0], conts[0], n)
        assert torch.equal(alone, refs[0][1]), (n, probe.compare(refs[0][1], alone))
        as_row = probe.row_blocks(weights, prompts, conts, n)
        assert torch.equal(as_row, refs[0][1]), (n, probe.compare(refs[0][1], as_row))
