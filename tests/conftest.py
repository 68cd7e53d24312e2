"""Shared test setup: the synthetic-model helpers on sys.path, one torch thread, real tokenizers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository root, last: `benchmarks.bench`, `benchmarks.coverage`
os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(1)  # tiny tensors: thread hand-off costs more than the work

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def real_tokenizer(name: str):
    """A real tokenizer from the offline cache (fetched by `python -m constrained_spec.models.store.tokenizer_assets`).

    Skips with a reason when it cannot be had, unless CONSTRAINED_SPEC_REQUIRE_ASSETS=1 (set by CI),
    where a missing tokenizer is a failure.
    """
    from transformers import AutoTokenizer

    from constrained_spec.models.store.tokenizer_assets import ensure_vocab_tokenizer

    try:
        return AutoTokenizer.from_pretrained(str(ensure_vocab_tokenizer(name)))
    except Exception as exc:  # noqa: BLE001
        if os.environ.get("CONSTRAINED_SPEC_REQUIRE_ASSETS") == "1":
            raise
        pytest.skip(f"real tokenizer {name!r} unavailable offline: {exc}")


@pytest.fixture(scope="session")
def gpt2_tokenizer():
    return real_tokenizer("gpt-2")


@pytest.fixture(scope="session")
def tiny_generator(gpt2_tokenizer, tmp_path_factory):
    """A factory of Generators over two tiny random Llamas (target seed 1, draft seed 2) and GPT-2's
    tokenizer: ``tiny_generator(draft=False, max_new_tokens=200, ...)``; the one fixture every test
    module's ``generator`` builds on. Its draft is always used (``draft_plan="always"``) unless a
    test asks otherwise: on a CPU the default plan would leave it out (``engine.draft_plan``), and
    the tests of speculative decoding would quietly test the free proposers alone. A test that asks
    for "auto" gets the plan's constants (``calibrate_plan=False``): the costs measured on tiny
    models would make its decisions the host's (``engine.plan_costs``; its own tests ask for it)."""
    from tiny_models import tiny_llama

    from constrained_spec.api import Generator

    def make(draft: bool = True, **options):
        options.setdefault("progress", False)
        options.setdefault("cache_dir", tmp_path_factory.mktemp("cache"))
        options.setdefault("draft_plan", "always")
        options.setdefault("calibrate_plan", False)
        return Generator(tiny_llama(50257, seed=1), tiny_llama(50257, seed=2) if draft else None,
                         tokenizer=gpt2_tokenizer, **options)

    return make


@pytest.fixture(scope="session", autouse=True)
def _plan_on_constants():
    """Every Generator here plans on the draft plan's constants: costs timed on tiny models under a
    shared machine's load would make "auto" decide by the clock (``engine.plan_costs``; its tests
    in ``tests/engine/test_plan_costs.py`` put the calibration back). Session-wide, so that
    Generators built by module fixtures are covered too."""
    from constrained_spec.engine.request import RequestBuilder

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RequestBuilder, "calibrate_plan", lambda self, *args, **kwargs: None)
        yield


@pytest.fixture(scope="module")
def model_dirs(gpt2_tokenizer, tmp_path_factory):
    """Two tiny random Llamas (seeds 1, 2) saved with GPT-2's tokenizer: target and draft folders (CLI tests)."""
    from tiny_models import tiny_llama

    base = tmp_path_factory.mktemp("models")
    dirs = []
    for seed in (1, 2):
        folder = base / f"tiny{seed}"
        tiny_llama(50257, seed=seed).save_pretrained(folder)
        gpt2_tokenizer.save_pretrained(folder)
        dirs.append(str(folder))
    return dirs


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test``: ``-n 2 --dist loadgroup``) a module whose tests share a
    module- or class-scoped fixture runs on one worker, so that fixture is built once: each such test
    gets ``xdist_group(<module>)`` unless it names its own group. Other tests spread one by one."""
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(d.scope in ("module", "class") for chain in defs.values() for d in chain):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def require_llamacpp() -> None:
    """Skip where llama-cpp-python is not installed; fail instead under ``CONSTRAINED_SPEC_REQUIRE_ASSETS=1``
    (``make test`` installs the binding first, so the default runtime's tests never skip there unnoticed)."""
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is not None:
        return
    if os.environ.get("CONSTRAINED_SPEC_REQUIRE_ASSETS") == "1":
        raise RuntimeError("llama-cpp-python is not installed: the llama.cpp runtime's tests cannot run (make install-llamacpp)")
    pytest.skip("llama-cpp-python is not installed (make install-llamacpp)")


@pytest.fixture(scope="session")
def tiny_ggufs(tmp_path_factory):
    """Two tiny random-weight Llama GGUF files over GPT-2's vocabulary (target seed 1, draft seed 2),
    for the llama.cpp runtime; skips where llama-cpp-python is not installed."""
    require_llamacpp()
    from tiny_gguf import write_tiny_gguf

    base = tmp_path_factory.mktemp("gguf")
    return write_tiny_gguf(base / "target.gguf", seed=1), write_tiny_gguf(base / "draft.gguf", seed=2, logit_scale=0.5)
