"""Shared test setup: the synthetic-model helpers on sys.path, one torch thread, real tokenizers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)  # tiny tensors: thread hand-off costs more than the work

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def real_tokenizer(name: str):
    """A real tokenizer from the offline cache (fetched by `python -m constrained_spec.models.tokenizer_assets`).

    Skips with a reason when it cannot be had, unless CONSTRAINED_SPEC_REQUIRE_ASSETS=1 (set by CI),
    where a missing tokenizer is a failure.
    """
    from transformers import AutoTokenizer

    from constrained_spec.models.tokenizer_assets import ensure_vocab_tokenizer

    try:
        return AutoTokenizer.from_pretrained(str(ensure_vocab_tokenizer(name)))
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("CONSTRAINED_SPEC_REQUIRE_ASSETS") == "1":
            raise
        pytest.skip(f"real tokenizer {name!r} unavailable offline: {exc}")


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    return real_tokenizer("gpt-2")
