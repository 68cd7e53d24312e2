"""Loading a Lark grammar stays bounded: rules lark would expand into too many alternatives are
refused before lark loads them (``grammar.lark_check.check_expansion_size``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from constrained_spec.errors import GrammarError
from constrained_spec.grammar.lark_check import MAX_RULE_EXPANSIONS, check_expansion_size, check_lark_grammar

ROOT = Path(__file__).resolve().parents[2]
SHARED_GRAMMARS = ROOT.parent / "shared" / "data" / "grammars"

HOSTILE = [
    'start: ("a" | "b" | " ")~1..40\n',  # a repeated inline group: 3^40 alternatives
    "start: " + " ".join(['"a"?'] * 30) + "\n",  # 30 optionals in one rule: 2^30
    "start: " + " ".join(['["a" | "b"]'] * 20) + "\n",  # 20 optional groups of two: 3^20
    'start: (("a" | "b") ("c" | "d"))~5..45\n',  # nested groups under a repeat
    'start: ("x" ("a" | "b")~20)*\n',  # a group under * becomes a rule of its own, expanded the same way
]


@pytest.mark.parametrize("grammar", HOSTILE, ids=["repeat-group", "optionals", "maybe-groups", "nested-repeat", "under-star"])
def test_a_grammar_lark_would_expand_without_end_is_refused_at_once(grammar):
    start = time.monotonic()
    with pytest.raises(GrammarError, match="alternatives") as info:
        check_lark_grammar(grammar)
    assert time.monotonic() - start < 2.0
    assert "'start'" in str(info.value)  # names the rule


def test_the_same_language_written_with_a_named_rule_loads_and_lark_judges_it():
    """``item~1..40`` with ``item`` a rule is 40 alternatives: loaded, and it takes what the refused
    inline form would (checked by lark itself, not by the size estimate)."""
    parser = check_lark_grammar('start: item~1..40\nitem: "a" | "b" | " "\n')
    for text in ["a", "ab ba", "b" * 40]:
        parser.parse(text)
    with pytest.raises(Exception):
        parser.parse("a" * 41)


def test_a_small_product_is_loaded():
    """Below the cap nothing is refused: 2^10 alternatives load (lark takes about 0.2 s)."""
    assert 2**10 < MAX_RULE_EXPANSIONS
    check_expansion_size('start: ("a" | "b")~10\n')
    check_lark_grammar('start: ("a" | "b")~10\n').parse("ab" * 5)


def test_every_shipped_and_shared_grammar_is_below_the_cap():
    files = sorted((ROOT / "grammars").glob("*.lark"))
    if SHARED_GRAMMARS.is_dir():
        files += sorted(SHARED_GRAMMARS.rglob("*.lark"))
    assert len(files) >= 4
    for path in files:
        check_expansion_size(path.read_text(encoding="utf-8"))  # raises for a rule over the cap
