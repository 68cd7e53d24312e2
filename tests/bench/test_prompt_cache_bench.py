"""benchmarks/prompt_cache.py leaves the user's saved prompts alone: its calls get a temporary cache
folder that links to the user's models but starts with an empty store (it used to delete
``<cache>/prompt-states``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from benchmarks import prompt_cache  # conftest puts the repository root on sys.path


def _user_cache(root: Path) -> Path:
    (root / "gguf").mkdir(parents=True)
    (root / "gguf" / "target.gguf").write_bytes(b"weights")
    (root / "prompt-states" / "key").mkdir(parents=True)
    (root / "prompt-states" / "key" / "saved.state").write_bytes(b"the user's prompt")
    return root


def test_scratch_cache_links_the_models_but_not_the_saved_prompts(tmp_path):
    user = _user_cache(tmp_path / "user")
    (tmp_path / "scratch").mkdir()
    root = prompt_cache.scratch_cache(user, tmp_path / "scratch")
    assert (root / "gguf" / "target.gguf").read_bytes() == b"weights"
    assert not (root / "prompt-states").exists()
    assert root.resolve() != user.resolve()


def _cli_cache_dir(cmd: list[str]) -> Path:
    """The cache folder a ``generate`` process would use: --cache-dir, else $CONSTRAINED_SPEC_CACHE."""
    import os

    return Path(cmd[cmd.index("--cache-dir") + 1]) if "--cache-dir" in cmd else Path(os.environ["CONSTRAINED_SPEC_CACHE"])


def test_benchmark_keeps_the_users_prompt_states(tmp_path, monkeypatch):
    user = _user_cache(tmp_path / "user")
    monkeypatch.setenv("CONSTRAINED_SPEC_CACHE", str(user))  # the user's cache, as the benchmark finds it by default
    before = sorted(p.relative_to(user) for p in user.rglob("*"))
    seen: list[tuple[bool, Path, bool]] = []

    def fake_generate(cmd, **kwargs):  # stands for the ``generate`` process: reads the models, saves its prompt
        cache = _cli_cache_dir(cmd)
        store_on = cmd[cmd.index("--prompt-cache-mb") + 1] != "0"
        seen.append((store_on, cache, (cache / "prompt-states").exists()))
        assert (cache / "gguf" / "target.gguf").read_bytes() == b"weights"
        if store_on:
            (cache / "prompt-states" / "key").mkdir(parents=True, exist_ok=True)
            (cache / "prompt-states" / "key" / f"call{len(seen)}.state").write_bytes(b"new")
        stats = {"prefill_seconds": 1.0 if len(seen) > 2 else 2.0}
        return subprocess.CompletedProcess(cmd, 0, stdout="same\n", stderr="log line\n" + json.dumps(stats))

    monkeypatch.setattr(prompt_cache.subprocess, "run", fake_generate)
    out = tmp_path / "out"
    assert prompt_cache.main(["--calls", "2", "--out", str(out)]) == 0
    assert len(seen) == 4
    assert seen[0][0] and seen[0][2] is False  # the store starts empty ...
    assert (user / "prompt-states" / "key" / "saved.state").read_bytes() == b"the user's prompt"  # ... and the user's is kept
    assert sorted(p.relative_to(user) for p in user.rglob("*")) == before  # nothing written into it either
    assert all(cache.resolve() != user.resolve() for _, cache, _ in seen)
    assert not seen[0][1].exists()  # the temporary folder goes at the end
    assert (user / "gguf" / "target.gguf").read_bytes() == b"weights"  # removing it did not follow the links
    rows = json.loads((out / "prompt-cache-k8s_deployment.json").read_text())
    assert [r["same_text"] for r in rows] == [True, True]
