"""Print how many strings the byte automaton gets wrong against ``re.fullmatch``, for the fixed
construction and for the naive single outlines-core build (the pre-fix behaviour), over the
enumerated regexes of tests/grammar/test_regex_language.py, grammars/*.regex and random phone numbers.

    python benchmarks/regex_language.py
"""

from __future__ import annotations

import itertools
import random
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_regex_language import ENUMERATED, compiled  # noqa: E402


def naive(pattern: str):
    """The pre-fix table: one build behind the start sentinel, outlines-core's finals."""
    from outlines_core import Index, Vocabulary

    index = Index("\\x00(?:" + pattern + ")", Vocabulary(256, {bytes([b]): [b] for b in range(256)}))
    transitions, finals = index.get_transitions(), index.get_final_states()
    start = transitions[index.get_initial_state()][0]

    def accepts(text: str) -> bool:
        state = start
        for byte in text.encode():
            state = transitions.get(state, {}).get(byte)
            if state is None:
                return False
        return state in finals

    return accepts


def main() -> None:
    total_strings = wrong_fixed = wrong_naive = 0
    cases = [(rx, [("".join(c)) for n in range(m + 1) for c in itertools.product(alpha, repeat=n)]) for rx, alpha, m in ENUMERATED]
    rng = random.Random(7)
    phone = (ROOT / "grammars/phone_number.regex").read_text().strip()
    cases.append((phone, ["".join(rng.choice("0123456789 -()+") if rng.random() < 0.2 else rng.choice("0123456789")
                                  for _ in range(rng.randrange(6, 18))) for _ in range(20_000)]))
    print(f"{'regex':52s} {'strings':>8s} {'in language':>12s} {'wrong now':>10s} {'wrong naive':>12s}")
    for pattern, texts in cases:
        automaton, old, py = compiled(pattern), naive(pattern), re.compile(pattern)
        member = np.array([py.fullmatch(t) is not None for t in texts])
        now = np.array([(s := automaton.walk_bytes(0, t.encode())) is not None and automaton.is_final(s) for t in texts])
        before = np.array([old(t) for t in texts])
        total_strings += len(texts)
        wrong_fixed += int((now != member).sum())
        wrong_naive += int((before != member).sum())
        print(f"{pattern[:52]:52s} {len(texts):8d} {int(member.sum()):12d} {int((now != member).sum()):10d} {int((before != member).sum()):12d}")
    print(f"{len(cases)} regexes, {total_strings} strings: {wrong_fixed} wrong now, {wrong_naive} wrong with the naive build")


if __name__ == "__main__":
    main()
