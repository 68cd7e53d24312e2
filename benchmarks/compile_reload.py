"""Cold compile against cached reload of the example schemas' automata, in two processes.

    python benchmarks/compile_reload.py                 # Qwen2 vocabulary, a fresh temporary cache
    python benchmarks/compile_reload.py --tokenizer gpt-2

The first process compiles every ``schemas/*.json`` into an empty disk cache; a second process
loads the same automata from that cache. Prints per-schema milliseconds for both. The first compile
in a process also builds the vocabulary's token byte table once (a few hundred ms for 150k tokens);
it is shown apart.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = sorted((ROOT / "schemas").glob("*.json"))


def _one_pass(cache: str, tokenizer: str) -> None:
    from transformers import AutoTokenizer

    from constrained_spec.grammar import output_spec
    from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
    from constrained_spec.grammar.vocab import build_vocabulary
    from constrained_spec.models.store.tokenizer_assets import ensure_vocab_tokenizer

    vocab = build_vocabulary(AutoTokenizer.from_pretrained(str(ensure_vocab_tokenizer(tokenizer))))
    t0 = time.perf_counter()
    AutomatonCompiler(vocab, disk_cache=False).compile('"x"')  # the per-process token table
    setup = (time.perf_counter() - t0) * 1000
    times = {}
    for path in SCHEMAS:
        regex = output_spec(json.loads(path.read_text())).regex
        t0 = time.perf_counter()
        AutomatonCompiler(vocab, cache_dir=cache).compile(regex)
        times[path.stem] = (time.perf_counter() - t0) * 1000
    print(json.dumps({"setup_ms": setup, "ms": times}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", default="qwen2", help="gpt-2, llama-spm, llama-bpe or qwen2 (default qwen2)")
    ap.add_argument("--pass-only", metavar="CACHE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.pass_only:
        _one_pass(args.pass_only, args.tokenizer)
        return 0
    with tempfile.TemporaryDirectory() as cache:
        runs = []
        for label in ("cold compile", "cached reload"):
            out = subprocess.run([sys.executable, __file__, "--tokenizer", args.tokenizer, "--pass-only", cache],
                                 check=True, capture_output=True, text=True).stdout
            runs.append((label, json.loads(out.strip().splitlines()[-1])))
    for label, r in runs:
        cells = "  ".join(f"{k} {v:.1f}" for k, v in r["ms"].items())
        print(f"{label:14s} (ms)  {cells}   [per-process token table {r['setup_ms']:.0f} ms]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
