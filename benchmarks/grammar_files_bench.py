"""Compile time and cold masks of the grammars in ``grammars/`` along their valid samples.

``python benchmarks/grammar_files_bench.py [--tokenizer qwen2]`` prints, per grammar, the compile
time (the first one also builds llguidance's tokenizer for the vocabulary) and the mask time p50 /
p99 / max at every token of every valid sample (a fresh matcher per sample: cold).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def main() -> None:
    from coverage import load_tokenizer

    from constrained_spec.grammar.backends.llguidance import compile_grammar
    from constrained_spec.grammar.vocab import build_vocabulary

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--tokenizer", default="qwen2")
    args = p.parse_args()
    tok = load_tokenizer(args.tokenizer)
    vocab = build_vocabulary(tok)

    def encode(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False)

    for grammar_path in sorted((ROOT / "grammars").glob("*.lark")):
        t0 = time.perf_counter()
        grammar = compile_grammar("lark", grammar_path.read_text(), vocab, encode)
        compile_s = time.perf_counter() - t0
        times: list[float] = []
        for sample in sorted((ROOT / "grammars" / "samples" / grammar_path.stem / "valid").glob("*.txt")):
            matcher = grammar.matcher()
            for token in encode(sample.read_text()):
                t1 = time.perf_counter()
                matcher.bitmask()
                times.append(time.perf_counter() - t1)
                matcher.advance(token)
        print(f"{grammar_path.stem}: compile {compile_s * 1000:.1f} ms; masks n={len(times)} p50 {percentile(times, .5) * 1e6:.0f} us "
              f"p99 {percentile(times, .99) * 1e6:.0f} us max {max(times) * 1e6:.0f} us")


if __name__ == "__main__":
    main()
