"""The greedy-lexing check compares every set of terminals llguidance's lexer may try at one point
of a parse (``lexing_points.lexing_groups``), including the union where alternatives share a
prefix (``A r0 B | A r1 C``: after ``A`` both ``r0``'s and ``r1``'s terminals). Before 2026-12-06
it compared the terminals of one grammar place at a time and passed grammars whose strings greedy
lexing lost (``{"r":"pa"}`` lost to the terminal ``"purple"``; the JSONSchemaBench schema
``Github_easy---o37786`` refused its own valid instances).

Oracle: ``re.fullmatch`` of the rules expanded into one regex, against llguidance walking the built
grammar byte by byte. Negative control: the same tests with the groups of one place at a time
(the older check) find the lost strings.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Optional, Union

import pytest
from grammar_oracles import byte_walk

from constrained_spec.errors import CompileLimitError
from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.json_schema import emit_lark, schema_to_regex
from constrained_spec.grammar.json_schema.emit_lark import build_lark, placeholder
from constrained_spec.grammar.json_schema.lexing_points import lexing_groups
from constrained_spec.grammar.vocab import TokenVocabulary

BYTES = TokenVocabulary(tokens={i: bytes([i]) for i in range(256)}, eos_token_ids=(256,), size=257)


def _place_groups(root, rules, follows, rule_null=None, start=None):  # noqa: ARG001
    """The older check's groups (the negative control): the terminals that may start at one place of
    the grammar, each place on its own (FIRST of what is there, and what follows where it may read
    nothing)."""
    flow = emit_lark._Flow(root, rules)
    groups: set[frozenset[str]] = set()

    def walk(e, follow: frozenset[str]) -> None:
        start = flow.first(e) | (follow if flow.nullable(e) else frozenset())
        if start:
            groups.add(start)
        if e[0] == "seq":
            after = follow
            for x in reversed(e[1]):
                walk(x, after)
                after = flow.first(x) | (after if flow.nullable(x) else frozenset())
        elif e[0] == "alt":
            for x in e[1]:
                walk(x, follow)
        elif e[0] == "rep":
            walk(e[1], (flow.first(e[1]) | follow) if e[3] is None or e[3] > 1 else follow)

    walk(root, frozenset())
    for r, body in rules.items():
        walk(body, flow.follow_r[r])
    return groups


def _expanded(text: str, rules: dict[int, str]) -> str:
    """``text`` with every placeholder replaced by its rule's (expanded) body: one regex."""
    return re.sub("\x00([0-9]+)\x00", lambda m: "(" + _expanded(rules[int(m.group(1))], rules) + ")", text)


def _disagreements(root: str, rules: dict[int, str], texts: list[str], split: bool = False) -> Optional[list[str]]:
    """None where no grammar is built; else the texts llguidance judges otherwise than ``re``."""
    lark = build_lark(root, rules, split=split, split_only=split)
    if lark is None:
        return None
    grammar = compile_grammar("lark", lark, BYTES)
    whole = re.compile(_expanded(root, rules))
    return [t for t in texts if byte_walk(grammar, t) != bool(whole.fullmatch(t))]


P0, P1, P2 = placeholder(0), placeholder(1), placeholder(2)
SHARED_PREFIX_ROOT = r'(\{"r":' + P0 + r'\}|\{"r":' + P1 + r',"q":1\})'
SHARED_PREFIX_RULES = {0: '"(' + P2 + ')?"', 1: '"purple"', 2: "[a-z]+"}
SHARED_PREFIX_TEXTS = ['{"r":"pa"}', '{"r":"pu"}', '{"r":"purple"}', '{"r":"zz"}', '{"r":""}', '{"r":"purple","q":1}',
                       '{"r":"p"}', '{"r":"purple","q":2}', '{"r":pa}']


@pytest.mark.parametrize("split", [False, True], ids=["long-terminals", "json-token-terminals"])
def test_alternatives_sharing_a_prefix_lose_no_string(split):
    found = _disagreements(SHARED_PREFIX_ROOT, SHARED_PREFIX_RULES, SHARED_PREFIX_TEXTS, split)
    assert found is None or found == []  # refused (greedy lexing would lose strings), or exact


@pytest.mark.parametrize("split", [False, True], ids=["long-terminals", "json-token-terminals"])
def test_negative_control_groups_of_one_place_pass_a_grammar_that_loses_strings(monkeypatch, split):
    monkeypatch.setattr(emit_lark, "lexing_groups", _place_groups)
    found = _disagreements(SHARED_PREFIX_ROOT, SHARED_PREFIX_RULES, SHARED_PREFIX_TEXTS, split)
    assert found is not None and '{"r":"pa"}' in found


def test_groups_hold_the_union_after_a_shared_prefix():
    """After ``A`` the lexer may try ``r0``'s and ``r1``'s first terminals together."""
    root = ("alt", [("seq", [("T", "A"), ("R", "r0"), ("T", "B")]), ("seq", [("T", "A"), ("R", "r1"), ("T", "C")])])
    rules = {"r0": ("seq", [("T", "Q"), ("rep", ("T", "X"), 0, 1), ("T", "Q")]), "r1": ("T", "P")}
    flow = emit_lark._Flow(root, rules)
    groups = lexing_groups(root, rules, {}, flow.null_r, flow.first(root))
    assert frozenset({"Q", "P"}) in groups
    assert frozenset({"A"}) in groups and frozenset({"X", "Q"}) in groups
    assert not any("B" in g and "Q" in g for g in groups)  # B only after r0's closing Q: never beside a Q


def test_coarse_groups_past_the_work_bound(monkeypatch):
    """Past ``MAX_WORK`` the groups are every terminal's follow set (coarser, still holding the union)."""
    from constrained_spec.grammar.json_schema import lexing_points

    monkeypatch.setattr(lexing_points, "MAX_WORK", 0)
    root = ("alt", [("seq", [("T", "A"), ("R", "r0")]), ("seq", [("T", "A"), ("R", "r1")])])
    rules = {"r0": ("T", "Q"), "r1": ("T", "P")}
    flow = emit_lark._Flow(root, rules)
    groups = lexing_groups(root, rules, {"A": frozenset({"Q", "P"})}, flow.null_r, flow.first(root))
    assert frozenset({"Q", "P"}) in groups and frozenset({"A"}) in groups


def test_building_the_automaton_is_bounded_too(monkeypatch):
    """The edges count towards ``MAX_WORK`` as they are written (n optional parts in a row have
    about n * n of them): past it the coarser groups answer before the determinisation starts."""
    from constrained_spec.grammar.json_schema import lexing_points

    shared = ("alt", [("seq", [("T", "A"), ("R", "r0"), ("T", "B")]), ("seq", [("T", "A"), ("R", "r1"), ("T", "C")])])
    root = ("seq", [("rep", ("T", "T%d" % i), 0, 1) for i in range(60)] + [shared])
    rules = {"r0": ("seq", [("T", "Q"), ("rep", ("T", "X"), 0, 1), ("T", "Q")]), "r1": ("T", "P")}
    flow = emit_lark._Flow(root, rules)
    follows = {name: frozenset(f) for name, f in flow.follows.items()}
    fine = lexing_groups(root, rules, follows, flow.null_r, flow.first(root))
    monkeypatch.setattr(lexing_points, "MAX_WORK", 500)  # fewer than the optional run's edges
    monkeypatch.setattr(lexing_points._Automaton, "groups", lambda self: pytest.fail("determinised past the bound"))
    coarse = lexing_groups(root, rules, follows, flow.null_r, flow.first(root))
    assert not any({"B", "Q"} <= g for g in fine) and any({"B", "Q"} <= g for g in coarse)
    assert coarse != fine and all(any(g <= c for c in coarse) for g in fine)  # coarser, holding every group


# -- random grammars ----------------------------------------------------------------------------

Ast = Union[str, tuple]
ATOMS = ['"', '"p"', '"pu"', '"purple"', "[a-z]+", "[a-z]", "p", "x", "1", r"\}", ",", r'\{"r":', r'"q":']


def _rand_ast(rng: random.Random, refs: list[int], depth: int = 0) -> Ast:
    k = rng.randrange(7 if depth < 3 else 3)
    if k == 0 and refs:
        return ("ref", rng.choice(refs))
    if k <= 2:
        return rng.choice(ATOMS)
    if k == 3:
        return ("seq", [_rand_ast(rng, refs, depth + 1) for _ in range(rng.randint(2, 3))])
    if k == 4:  # alternatives sharing a prefix, then a rule: the case the check once missed
        head = rng.choice(ATOMS)
        return ("alt", [("seq", [head, ("ref", rng.choice(refs)) if refs else _rand_ast(rng, refs, depth + 1),
                                 _rand_ast(rng, refs, depth + 1)]) for _ in range(2)])
    if k == 5:
        return ("alt", [_rand_ast(rng, refs, depth + 1) for _ in range(2)])
    return ("opt", _rand_ast(rng, refs, depth + 1))


def _text(a: Ast) -> str:
    if isinstance(a, str):
        return a
    if a[0] == "ref":
        return placeholder(a[1])
    if a[0] == "seq":
        return "".join(_text(x) for x in a[1])
    if a[0] == "alt":
        return "(" + "|".join(_text(x) for x in a[1]) + ")"
    return "(" + _text(a[1]) + ")?"


def _sample(a: Ast, rules: dict[int, Ast], rng: random.Random) -> str:
    """A random string of ``a``'s language (the atoms written out by hand)."""
    if isinstance(a, str):
        if a == "[a-z]+":
            return "".join(rng.choice("pux") for _ in range(rng.randint(1, 3)))
        if a == "[a-z]":
            return rng.choice("pux")
        return a.replace("\\", "")
    if a[0] == "ref":
        return _sample(rules[a[1]], rules, rng)
    if a[0] == "seq":
        return "".join(_sample(x, rules, rng) for x in a[1])
    if a[0] == "alt":
        return _sample(rng.choice(a[1]), rules, rng)
    return _sample(a[1], rules, rng) if rng.random() < 0.6 else ""


def _sweep(n: int, seed: int) -> tuple[int, list[str]]:
    """(grammars built, disagreements) over ``n`` random grammars of 1-3 rules (a DAG, each rule
    used somewhere), with sampled texts and their one-character edits as candidates."""
    rng = random.Random(seed)
    built, wrong = 0, []
    for _ in range(n):
        count = rng.randint(1, 3)
        asts: dict[int, Ast] = {}
        for r in reversed(range(count)):
            asts[r] = _rand_ast(rng, list(range(r + 1, count)))
        root = _rand_ast(rng, list(range(count)))
        texts: set[str] = set()
        for _ in range(30):
            t = _sample(root, asts, rng)
            texts.add(t)
            if t:
                i = rng.randrange(len(t))
                texts.add(t[:i] + t[i + 1:])
                texts.add(t[:i] + rng.choice('"pux1,}') + t[i:])
        rules = {r: _text(a) for r, a in asts.items()}
        for split in (False, True):
            found = _disagreements(_text(root), rules, sorted(texts), split)
            if found is not None:
                built += 1
                wrong += [f"{_text(root)!r} {rules!r}: {t!r}" for t in found]
    return built, wrong


def test_two_alike_branches_are_not_optional():
    """``(a|a)`` in a terminal was written ``(a)?`` (found by the sweep below: the alternation's
    duplicate texts were counted as branches that read nothing), accepting ``b`` alone."""
    for split in (False, True):
        assert _disagreements("(a|a)" + P0, {0: "b"}, ["ab", "b", "aab", "a"], split) == []


def test_random_grammars_lose_no_string():
    built, wrong = _sweep(300, seed=3)
    assert built >= 200, built  # the sweep is about grammars that were built
    assert wrong == [], wrong[:5]


def test_negative_control_random_sweep_finds_lost_strings_with_groups_of_one_place(monkeypatch):
    monkeypatch.setattr(emit_lark, "lexing_groups", _place_groups)
    _, wrong = _sweep(300, seed=3)
    assert wrong, "the older grouping should lose strings somewhere in the sweep"


# -- the development split's schemas that showed it -----------------------------------------------

DEV = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _dev_case(name: str) -> dict:
    matches = sorted(DEV.glob(f"jsonschemabench-dev*/data/{name}.json"))
    if not matches:
        pytest.skip(f"{name} is not in ../shared/data (the JSONSchemaBench development splits)")
    return json.loads(matches[0].read_text())


def test_o37786_accepts_its_valid_instances_and_refuses_the_rest():
    """Its grammar lost ``{"ref":"primary"}`` to the terminal ``"purple"`` (both valid instances refused)."""
    case = _dev_case("Github_easy---o37786")
    compiled = schema_to_regex(case["schema"])
    assert compiled.lark is not None
    grammar = compile_grammar("lark", compiled.lark, BYTES)
    for test in case["tests"]:
        text = json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False)
        assert byte_walk(grammar, text) == test["valid"], (test["valid"], text[:80])
    assert byte_walk(grammar, '{"abc":{"ref":"pa"}}') and not byte_walk(grammar, '{"abc":{"ref":"red"}}')


def test_a_recursive_schema_whose_long_terminals_fail_gets_json_token_terminals():
    """o13135's grammar fails the check with longer terminals; the JSON-token try keeps its recursion
    whole (before, its regex unrolled to ``max_recursion_depth`` was all it had)."""
    case = _dev_case("Github_medium---o13135")
    compiled = schema_to_regex(case["schema"])
    assert compiled.lark is not None
    grammar = compile_grammar("lark", compiled.lark, BYTES)
    for test in case["tests"]:
        if test["valid"]:
            assert byte_walk(grammar, json.dumps(test["data"], separators=(",", ":"), ensure_ascii=False))


def test_too_many_pairs_answer_unsure_before_any_is_compared(monkeypatch):
    """The greedy-lexing check counts its pairs before comparing any: past ``MAX_PAIRS`` it answers
    False (unsure) at once. A 1,000-property all-optional object took 16 s to refuse (2026-12-06);
    the same schema is refused by the same name now, without the comparisons."""
    from constrained_spec.grammar.json_schema import lexeme_check

    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(300)},
              "additionalProperties": False}
    monkeypatch.setattr(lexeme_check, "MAX_PAIRS", 100)
    monkeypatch.setattr(lexeme_check, "_conflict", lambda *a: pytest.fail("a pair compared past the bound"))
    with pytest.raises(CompileLimitError, match="none could be built exactly"):
        schema_to_regex(schema)
