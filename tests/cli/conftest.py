"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest
from tiny_models import tiny_llama


@pytest.fixture(scope="module")
def model_dirs(gpt2_tokenizer, tmp_path_factory):
    """Two tiny random Llamas (seeds 1, 2) saved with GPT-2's tokenizer: target and draft folders."""
    base = tmp_path_factory.mktemp("models")
    dirs = []
    for seed in (1, 2):
        folder = base / f"tiny{seed}"
        tiny_llama(50257, seed=seed).save_pretrained(folder)
        gpt2_tokenizer.save_pretrained(folder)
        dirs.append(str(folder))
    return dirs
