"""The compile speed-ups change no answer: the regex-text scanners against the character loops
they replaced, the greedy-lexing check's caches against a check without them, and (slow) the
compiler's whole output on a slice of the project's schemas against fingerprints taken before."""

from __future__ import annotations

import random

import pytest
from lexeme_reference import reference_checked

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema import lexeme_check as lc
from constrained_spec.grammar.json_schema.lexeme_lang import Nodes

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


# -- the greedy-lexing check over hash-consed nodes against the tuple walk ------------------------

#: lexemes for random grammars: small ones, and JSON-like objects of optional members (long
#: sequences whose derivatives share their rests, nested repetitions, alternations of sequences)
_PIECES = ["[0-9]+", "[a-z]{1,8}", "a1b", "a", "[0-9]", "ab*", "(ab)+c?", "[a-c][0-9]{2,9}", "x|xy", "\"[^\"]*\"",
           '\\{("k":[0-9]+)?(,"m":"[^"]*")?(,"n":(true|false|\\[([0-9]+(,[0-9]+)*)?\\]))?\\}',
           '\\[("[a-z]*"(,"[a-z]*")*)?\\]', '(\\{"a":[0-9]{1,3}\\}|\\{"a":[0-9]+,"b":x?\\})']


def _random_grammars(rnd: random.Random, count: int) -> list[tuple[dict, list, dict]]:
    out = []
    for _ in range(count):
        names = rnd.sample(range(len(_PIECES)), rnd.randint(2, 5))
        terms = {f"t{i}": lc.to_node(ecma.parse(_PIECES[i])) for i in names}
        nodes = {k: v for k, v in terms.items() if v is not None}
        colive = [frozenset(rnd.sample(sorted(nodes), rnd.randint(1, len(nodes)))) for _ in range(rnd.randint(1, 3))]
        follows = {k: frozenset(rnd.sample(sorted(nodes), rnd.randint(0, len(nodes)))) for k in nodes}
        out.append((nodes, colive, follows))
    return out


def _checked(nodes: dict, colive: list, follows: dict, budget: int) -> tuple[bool, int]:
    table = Nodes()
    return lc._checked({k: table.node(v) for k, v in nodes.items()}, table, colive, follows, budget)


@pytest.mark.parametrize("budget", [40, 300, 20_000])
def test_interned_check_is_the_tuple_check(budget: int) -> None:
    """Answer and steps left equal the plain tuple walk's (tests/lexeme_reference.py)."""
    answers = []
    for nodes, colive, follows in _random_grammars(random.Random(budget), 80):
        got = _checked(nodes, colive, follows, budget)
        assert got == reference_checked(nodes, colive, follows, budget), (nodes, colive, follows)
        answers.append(got[0])
    assert set(answers) == {True, False} or budget == 40  # both answers occur (not vacuous)


def test_interned_check_comparison_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: a node table whose sequences are not rebuilt onto their rests (so equal values
    get different ids) spends other step counts, and the comparison above sees it."""
    monkeypatch.setattr(Nodes, "_append", lambda self, first, rest: self._cons(first, rest))
    grammars = _random_grammars(random.Random(7), 80)
    assert any(_checked(*g, 20_000) != reference_checked(*g, 20_000) for g in grammars)
