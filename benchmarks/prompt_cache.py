"""The CLI's wait with and without prefilled prompts kept on disk (``generate --prompt-cache-mb``).

``python benchmarks/prompt_cache.py`` runs ``constrained-spec generate`` once per held-out prompt of a
schema, each call its own process as a user runs it, with the schema hint placed first
(``--schema-hint-place system``, so calls with one schema share their first tokens), on the llama.cpp
runtime, first with the store on (empty at the start: the calls get a temporary cache folder, given
to them as ``--cache-dir``, whose entries link to the model cache's (``--models-from``, default the user's
cache folder) except ``prompt-states``; the first call fills its own store, the next ones restore the
shared prefix; the user's saved prompts are never read, emptied or written, and the temporary folder
goes at the end), then with
``--prompt-cache-mb 0``, interleaved call by call so both see
the same host load. It prints per call: the prompt's prefill seconds (``--stats``), the process's wall
seconds, and whether the two outputs are the same text (they must be: the restored cache is bitwise
the computed one). Writes nothing to git; ``--out`` (default ``results/prompt-cache``) gets the
figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from heldout import PROMPTS, SCHEMA_DIR  # noqa: E402

from constrained_spec.paths import cache_root  # noqa: E402

STATES = "prompt-states"


def scratch_cache(models_from: Path, into: Path) -> Path:
    """A cache folder under ``into`` whose entries link to ``models_from``'s (models, tokenizers, automata),
    all but its saved prompts: the benchmark's store starts empty without touching the user's."""
    root = into / "cache"
    root.mkdir()
    for entry in sorted(models_from.iterdir()):
        if entry.name != STATES:
            (root / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    return root


def run_cli(prompt: str, schema: Path, cache_mb: int, cache_dir: Path, args: argparse.Namespace) -> dict:
    """One ``generate`` call in its own process, on the cache folder ``cache_dir``; its text, prefill
    seconds and wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "constrained_spec.cli", "generate", "--schema", str(schema), "--prompt", prompt,
           "--runtime", "llamacpp", "--schema-hint-place", "system", "--prompt-cache-mb", str(cache_mb), "--stats",
           "--cache-dir", str(cache_dir),
           "--max-new-tokens", str(args.max_new_tokens), "--draft", args.draft]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"generate failed ({done.returncode}): {done.stderr[-2000:]}")
    stats = json.loads(done.stderr[done.stderr.index("{"):])
    return {"text": done.stdout.strip(), "prefill_s": stats["prefill_seconds"], "wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schema", default="k8s_deployment", help="a held-out schema name (default k8s_deployment: the longest hint)")
    p.add_argument("--calls", type=int, default=3, help="calls (prompts of that schema, repeated as needed; default 3)")
    p.add_argument("--max-new-tokens", type=int, default=16, help="tokens per call (default 16: the wait is mostly the prompt's)")
    p.add_argument("--draft", default="none", help="draft model (default none: the prefill is the target's)")
    p.add_argument("--out", default=str(ROOT / "results" / "prompt-cache"))
    p.add_argument("--models-from", default=None,
                   help="the cache folder the models are read from (default: $CONSTRAINED_SPEC_CACHE or the user cache dir); "
                        "its saved prompts are left alone, the calls keep theirs in a temporary folder")
    args = p.parse_args(argv)
    prompts = [q.prompt for q in PROMPTS if q.schema_name == args.schema] or [q.prompt for q in PROMPTS][:1]
    prompts = [prompts[i % len(prompts)] + ("" if i < len(prompts) else f" (request {i + 1})") for i in range(args.calls)]
    schema = SCHEMA_DIR / f"{args.schema}.json"
    rows = []
    with tempfile.TemporaryDirectory(prefix="prompt-cache-bench-") as scratch:
        cache = scratch_cache(cache_root(args.models_from), Path(scratch))  # its store starts empty; the user's stays as it is
        for i, prompt in enumerate(prompts):
            on = run_cli(prompt, schema, 512, cache, args)
            off = run_cli(prompt, schema, 0, cache, args)
            row = {"call": i + 1, "store_prefill_s": on["prefill_s"], "plain_prefill_s": off["prefill_s"], "store_wall_s": on["wall_s"],
                   "plain_wall_s": off["wall_s"], "same_text": on["text"] == off["text"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"prompt-cache-{args.schema}.json").write_text(json.dumps(rows, indent=2))
    warm = rows[1:]
    if warm:
        ratio = sum(r["plain_prefill_s"] for r in warm) / max(1e-9, sum(r["store_prefill_s"] for r in warm))
        print(f"calls 2-{len(rows)}: prefill {ratio:.2f}x faster with the store; "
              f"wall {sum(r['plain_wall_s'] for r in warm) / len(warm):.1f} s -> {sum(r['store_wall_s'] for r in warm) / len(warm):.1f} s; "
              f"same text {sum(r['same_text'] for r in rows)}/{len(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
