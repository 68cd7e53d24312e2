"""The slow compiles' speed-ups (issue 37) change no answer, and the quadratic work they removed
stays removed (counted, never timed):

- an all-optional sequence (a large object of optional members) is built without scanning its
  growing texts again at every level of the divide and conquer: the same text, and each item's
  text scanned a constant number of times (the old build scanned ~log2(n) times more);
- the greedy-lexing check visits the pairs of the maximal co-live groups only (the same pairs),
  small lexemes first (the same answer);
- the regex parser's fast paths (runs of plain characters, classes met before) build the nodes
  the plain parser builds, and raise where it raises;
- ``relaxed`` keeps unchanged parts (the same value as rebuilding them).
"""

from __future__ import annotations

import random
from typing import Optional

import lexeme_reference as ref
import pytest

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema import lexeme_check as lc
from constrained_spec.grammar.json_schema import regex_text as rt
from constrained_spec.grammar.json_schema.lexeme_lang import Lang, OverBudget
from constrained_spec.grammar.json_schema.regex_text import SeqItem, sequence

_ATOMS = ['a', '"x":1', "(a|b)", "[a-z]+", "\\(", "(x)(y)", "a|b", "[|(]", "\\\\", '"k":(true|false)', "((a))?",
          '[^"]*', "[\\]]"]
_SEPS = [",", "[ \\n\\t]{0,2},[ \\n\\t]{0,2}"]


def _items(rnd: random.Random, n: int) -> list[SeqItem]:
    out = []
    for _ in range(n):
        r = "".join(rnd.choice(_ATOMS) for _ in range(rnd.randint(1, 3)))
        if rnd.random() < 0.2:
            out.append(SeqItem("star", r, rnd.choice([None, 0, 1, 3])))
        else:
            out.append(SeqItem("opt", r))
    return out


def test_all_optional_fast_path_writes_the_scanned_text(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = []
    fast = rt._all_optional

    def both(items: list[SeqItem], sep: str, one, after) -> str:  # type: ignore[no-untyped-def]
        a = fast(items, sep, one, after)
        b = rt._all_optional_scanned(items, sep, one, after)
        assert a == b, (items, sep)
        taken.append(1)
        return a

    monkeypatch.setattr(rt, "_all_optional", both)
    rnd = random.Random(37)
    for _ in range(1_500):
        sequence(_items(rnd, rnd.randint(1, 14)), rnd.choice(_SEPS))
    assert len(taken) > 1_000  # the fast path was compared, not skipped


def test_all_optional_falls_back_to_scanning_unclosed_items(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> str:
        raise AssertionError("fast path taken for an item that is not closed")

    monkeypatch.setattr(rt, "_all_optional", refuse)
    for odd in ["a)(b", "(a", "[ab", "a\\"]:
        items = [SeqItem("opt", "x"), SeqItem("opt", odd), SeqItem("opt", "y")]
        assert sequence(items, ",") == "(" + rt._all_optional_scanned(items, ",", _one, _after) + ")?"
    with pytest.raises(AssertionError):  # the negative control: closed items do take it
        sequence([SeqItem("opt", "x"), SeqItem("opt", "y")], ",")


def _one(it: SeqItem) -> str:
    return rt.group(it.regex)


def _after(it: SeqItem) -> str:
    return "(," + rt.group(it.regex) + ")?"


def test_is_closed() -> None:
    for p in ["", "a", "(a)", "(a|b)(c)", "[)]", "\\)", "\\\\", "[\\]]", "((a)b)*"]:
        assert ecma.is_closed(p), p
    for p in ["(", ")", "a)(b", "[a", "a\\", "\\\\\\", "(a))(("]:
        assert not ecma.is_closed(p), p


def test_all_optional_scans_each_item_a_constant_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    scanned = [0]
    for name in ("is_atom", "top_level_bar", "is_closed"):
        scan = getattr(ecma, name, None)
        if scan is None:  # a tree before is_closed: what it scans is counted all the same
            continue

        def counted(p: str, scan=scan) -> bool:  # type: ignore[no-untyped-def]
            scanned[0] += len(p)
            return bool(scan(p))

        monkeypatch.setattr(ecma, name, counted)
    member = '"k%d":(\\[(a|b)(,(a|b))*\\]|[0-9]+|"[^"]*")'
    ratios = []
    for n in (16, 256):
        items = [SeqItem("opt", member % i) for i in range(n)]
        scanned[0] = 0
        out = sequence(items, ",")
        assert out.startswith("((") and out.endswith(")?")
        ratios.append(scanned[0] / sum(len(it.regex) for it in items))
    # each item: is_closed once, group() at most three times (its leaf, its tail piece, the split);
    # the old divide and conquer scanned every level's texts again (ratio 13 at 16 items, 34 at 256)
    assert ratios[1] <= 5 and ratios[1] <= ratios[0] + 0.5, ratios


# -- the greedy-lexing check over maximal co-live groups ---------------------------------------------


def test_maximal_groups() -> None:
    chain = [frozenset(f"t{j}" for j in range(i, 10)) for i in range(10)]
    assert lc._maximal(chain) == [chain[0]]
    groups = [frozenset({"a", "b"}), frozenset({"b", "c"}), frozenset({"a"}), frozenset(), frozenset({"a", "b"})]
    kept = lc._maximal(groups)
    assert sorted(sorted(g) for g in kept) == [["a", "b"], ["b", "c"]]
    pairs = {(x, y) for g in groups for x in g for y in g}
    assert {(x, y) for g in kept for x in g for y in g} == pairs


def _old_greedy_safe(terminals: dict[str, lc.Lexeme], colive: list[frozenset[str]],
                     follows: dict[str, frozenset[str]], budget: int) -> bool:
    """greedy_safe as it was: every group's pairs, in the groups' order."""
    lang = ref.TupleLang(budget)
    try:
        if any(lang.nullable(n) for n in terminals.values()):
            return False
        follow_chars = {}
        for name in terminals:
            sets = [lang.first_chars(terminals[f]) for f in follows.get(name, ())]
            follow_chars[name] = ecma.union(*sets) if sets else ()
        wide = {}
        for name, node in terminals.items():
            w = lc.relaxed(node)
            if w is None:
                return False
            wide[name] = w
        checked: set[tuple[str, str]] = set()
        for group in colive:
            for n1 in group:
                for n2 in group:
                    if (n1, n2) in checked:
                        continue
                    checked.add((n1, n2))
                    if ref.conflict(lang, wide[n1], wide[n2], follow_chars[n1]):
                        return False
    except (ref.OverBudget, RecursionError):
        return False
    return True


@pytest.mark.parametrize("budget", [40, 300, 20_000])
def test_greedy_check_over_maximal_groups_changes_no_answer(budget: int) -> None:
    pieces = ["[0-9]+", "[a-z]{1,8}", "a1b", "a", "[0-9]", "ab*", "(ab)+c?", "[a-c][0-9]{2,9}", "x|xy", "\"[^\"]*\""]
    rnd = random.Random(budget)
    answers = []
    for _ in range(60):
        names = rnd.sample(range(len(pieces)), rnd.randint(2, 5))
        nodes = {f"t{i}": lc.to_node(ecma.parse(pieces[i])) for i in names}
        terms = {k: v for k, v in nodes.items() if v is not None}
        colive = [frozenset(rnd.sample(sorted(terms), rnd.randint(1, len(terms)))) for _ in range(rnd.randint(1, 6))]
        follows = {k: frozenset(rnd.sample(sorted(terms), rnd.randint(0, len(terms)))) for k in terms}
        answers.append((lc.greedy_safe(terms, colive, follows, budget), _old_greedy_safe(terms, colive, follows, budget)))
    assert all(a == b for a, b in answers)
    assert {a for a, _ in answers} == {True, False} or budget == 40


# -- relaxed keeps what it does not change --------------------------------------------------------


def _old_relaxed(n: lc.Lexeme) -> Optional[lc.Lexeme]:
    kind = n[0]
    if kind == "set":
        return n
    if kind == "seq":
        return lc._seq([_old_relaxed(x) for x in n[1]])
    if kind == "alt":
        return lc._alt([_old_relaxed(x) for x in n[1]])
    body, lo, hi = _old_relaxed(n[1]), n[2], n[3]
    if hi is not None and hi > lc.RELAX_ABOVE:
        return lc._rep(body, min(lo, 1), None)
    return lc._rep(body, lo, hi)


def test_relaxed_equals_rebuilding() -> None:
    for p in ["abc", "a{2,9}b", "(a|b){0,3}c", "(x{7})?y", "[a-z]+(,[a-z]+){0,2}", "((ab)|c{5})*", "a?b?c?"]:
        node = lc.to_node(ecma.parse(p))
        assert node is not None
        assert lc.relaxed(node) == _old_relaxed(node), p
    unchanged = lc.to_node(ecma.parse("(ab|c)d{0,3}"))
    assert unchanged is not None and lc.relaxed(unchanged) is unchanged


# -- the parser's fast paths -----------------------------------------------------------------------


class _PlainParser(ecma._Parser):
    """The parser without its fast paths: one atom at a time, every class parsed."""

    def seq(self):  # type: ignore[no-untyped-def]
        items = []
        while not self.eof() and self.peek() not in "|)":
            items.append(self.quant(self.atom()))
        return ("seq", items)

    def atom(self):  # type: ignore[no-untyped-def]
        if self.peek() == "[":
            return ("set", self.cls())
        return super().atom()


def _parse_or_error(parser: type, text: str, superset: bool) -> tuple:
    try:
        return ("ok", parser(text, superset).parse())
    except ecma.PatternError as e:
        return ("error", str(e))


def test_parser_fast_paths_build_the_plain_parsers_nodes() -> None:
    rnd = random.Random(99)
    alphabet = list('ab"{}:,[]]()|*+?.^$\\-09x') + ["\\d", "\\]", "[^", "{2}", "{1,3}", "[a-z]", "\u00e9", "\\u0041",
                                                    "[:", "[\\]]", "[ab]", '[^"]', "abc", "\ud800"]
    valid = 0
    for _ in range(6_000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 16)))
        for superset in (False, True):
            got = _parse_or_error(ecma._Parser, text, superset)
            assert got == _parse_or_error(_PlainParser, text, superset), text
            valid += got[0] == "ok"
    assert valid > 1_000  # not only errors compared


# -- a lexeme against itself walks its derivatives alone ------------------------------------------


def _walk_outcome(walk, node: lc.Lexeme, follow: ecma.Ranges, budget: int) -> tuple:  # type: ignore[no-untyped-def]
    lang = Lang(budget)
    i = lang.node(node)
    try:
        return walk(lang, i, i, follow), lang.budget
    except OverBudget:
        return "over", lang.budget


@pytest.mark.parametrize("budget", [5, 60, 20_000])
def test_self_pair_walk_is_the_pair_walk(budget: int) -> None:
    pieces = ["[0-9]+", "[a-z]{1,8}", "a1b", "a", "ab*", "(ab)+c?", "[a-c][0-9]{2,9}", "x|xy", "\"[^\"]*\"",
              "(a|ab)(c|bcd)*", "\"k\":(true|false|[0-9]+)(,\"m\":\"[^\"]*\")?"]
    follows = [((0x30, 0x39),), ((0x61, 0x7A),), ((0x2C, 0x2C), (0x62, 0x63))]
    seen = set()
    for text in pieces:
        node = lc.relaxed(lc.to_node(ecma.parse(text)))
        for follow in follows:
            new = _walk_outcome(lc._conflict, node, follow, budget)
            assert new == _walk_outcome(lc._pair_conflict, node, follow, budget), (text, follow)  # answer and steps
            seen.add(new[0])
    assert seen >= {True, False}
    assert "over" in seen or budget == 20_000  # the budget spent at the same step too


# -- the Lark literal of a terminal: one re.sub, the characters the loop wrote ---------------------


def _old_lark_regex(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i : i + 2])
            i += 2
            continue
        if c == "/":
            out.append("\\/")
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append("\\x%02x" % ord(c))
        else:
            out.append(c)
        i += 1
    return "/" + "".join(out) + "/"


def test_lark_regex_writes_what_the_character_loop_wrote() -> None:
    from constrained_spec.grammar.json_schema.emit_lark import _lark_regex

    alphabet = ["\\", "/", "a", "\x00", "\x1f", "\x7f", "\n", "\r", " ", "\u00e9", "\u2028", "[", "\x80", "x"]
    rnd = random.Random(531)
    texts = ["", "\\", "a\\", "\\/", "/", "\\\n"] + [
        "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12))) for _ in range(20_000)]
    assert [_lark_regex(t) for t in texts] == [_old_lark_regex(t) for t in texts]


# -- the follow walk skips a walk it has done with the same follow set ------------------------------


class _Forgetful(dict):  # type: ignore[type-arg]
    """A memo that never answers: every walk is done again (the walk as it was)."""

    def get(self, key, default=None):  # type: ignore[no-untyped-def]
        return None


def _random_expr(rnd: random.Random, rules: int, depth: int) -> tuple:
    roll = rnd.random()
    if depth <= 0 or roll < 0.3:
        return ("T", f"T{rnd.randint(0, 6)}") if rnd.random() < 0.75 else ("R", f"r{rnd.randrange(rules)}")
    if roll < 0.6:
        return ("seq", [_random_expr(rnd, rules, depth - 1) for _ in range(rnd.randint(0, 4))])
    if roll < 0.85:
        return ("alt", [_random_expr(rnd, rules, depth - 1) for _ in range(rnd.randint(1, 3))])
    return ("rep", _random_expr(rnd, rules, depth - 1), rnd.randint(0, 2), rnd.choice([None, 1, 2, 3]))


def _first_sets_by_rounds(root: tuple, rules: dict[str, tuple]) -> tuple[dict, dict]:
    """The rules' FIRST sets and nullability as _Flow found them before: rounds over every rule
    until none changes."""
    from constrained_spec.grammar.json_schema import emit_lark as el

    flow = el._Flow.__new__(el._Flow)
    flow.rules = rules
    flow.first_r = {r: frozenset() for r in rules}
    flow.null_r = {r: False for r in rules}
    flow._first_of = flow._null_of = None
    changed = True
    while changed:
        changed = False
        for r, body in rules.items():
            f, n = flow.first(body), flow.nullable(body)
            if f != flow.first_r[r] or n != flow.null_r[r]:
                flow.first_r[r], flow.null_r[r] = f, n
                changed = True
    return flow.first_r, flow.null_r


def test_follow_walk_memo_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from constrained_spec.grammar.json_schema import emit_lark as el

    class _Plain(el._Flow):
        calls = 0

        def __setattr__(self, name: str, value: object) -> None:
            object.__setattr__(self, name, _Forgetful() if name == "_walked" else value)

        def walk(self, e: tuple, follow: frozenset[str]) -> None:
            _Plain.calls += 1
            super().walk(e, follow)

    rnd = random.Random(4510)
    done = 0
    for _ in range(300):
        n = rnd.randint(1, 4)
        rules = {f"r{i}": _random_expr(rnd, n, 4) for i in range(n)}
        root = _random_expr(rnd, n, 4)
        fast, plain = el._Flow(root, rules), _Plain(root, rules)
        assert (fast.first_r, fast.null_r) == _first_sets_by_rounds(root, rules)
        assert (fast.follows, fast.follow_r) == (plain.follows, plain.follow_r)
        done += len(fast._walked)  # the walks that did work
    assert done < 0.8 * _Plain.calls  # the memo skipped walks (the check compared something)


# -- the text scanners read one token walk (top_level_bar and is_atom: test_compile_speed_equiv) ----


def _old_is_closed(p: str) -> bool:
    """is_closed as its own loop read the tokens (before _group_tokens)."""
    if (len(p) - len(p.rstrip("\\"))) % 2:
        return False
    depth, in_cls = 0, False
    for m in ecma._SCAN_TOKENS.finditer(p):
        c = m.group()
        if in_cls:
            in_cls = c != "]"
        elif c in "()":
            depth += 1 if c == "(" else -1
            if depth < 0:
                return False
        else:
            in_cls = c == "["
    return depth == 0 and not in_cls


def test_is_closed_over_the_token_walk() -> None:
    pieces = ["(", ")", "[", "]", "|", "\\", "\\(", "\\]", "a", "[^]", "x|y", "()"]
    rnd = random.Random(80)
    answers = []
    for _ in range(20_000):
        p = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 9)))
        answers.append(ecma.is_closed(p))
        assert answers[-1] == _old_is_closed(p), p
    assert 0.05 < sum(answers) / len(answers) < 0.95  # both answers compared


def _old_is_atom_group(p: str) -> bool:
    """``is_atom``'s answer for a ``(...)`` text by the token walk it used before (the
    reference): no ``)`` outside classes and escapes returns to depth 0 before the last
    character."""
    depth, in_cls = 0, False
    for m in ecma._SCAN_TOKENS.finditer(p):
        c = m.group()
        if in_cls:
            in_cls = c != "]"
            continue
        if c == "[":
            in_cls = True
        elif c in "()":
            depth += 1 if c == "(" else -1
            if c == ")" and depth == 0 and m.start() != len(p) - 1:
                return False
    return True


def test_is_atom_of_a_group_over_the_token_walk() -> None:
    pieces = ["(", ")", "[", "]", "|", "\\", "\\(", "\\)", "\\]", "a", "[^]", "[)]", "x|y", "()"]
    rnd = random.Random(81)
    answers = []
    for _ in range(20_000):
        p = "(" + "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 9))) + ")"
        answers.append(ecma.is_atom.__wrapped__(p))  # type: ignore[attr-defined]
        assert answers[-1] == _old_is_atom_group(p), p
    assert 0.05 < sum(answers) / len(answers) < 0.95  # both answers compared


def _parse_outcome(parse, text: str):  # type: ignore[no-untyped-def]
    try:
        return parse(text)
    except ecma.PatternError as e:
        return ("error", str(e))


def test_parse_shared_builds_the_plain_parsers_nodes() -> None:
    """``parse_shared`` (one node per group text, known groups not parsed again, one table across
    texts) gives values equal to ``parse``'s, the same errors, and really shares repeated groups."""
    pieces = ["(a|b)", "(a|b)", "(?:x[)(]y)", "\\(", "\\)", "[^)]", "(c{2})", "(c{2)", "((a|b)+)?", "z", "|",
              "(", ")", "(?<n>q)", "\\\\", "([ab]|\\))*", "{1,2}", "*"]
    rnd = random.Random(82)
    table = ecma.GroupTable()
    outcomes = []
    for _ in range(4_000):
        text = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 10)))
        want = _parse_outcome(ecma._parse, text)
        got = _parse_outcome(lambda t: ecma.parse_shared(t, table), text)
        assert got == want, text
        outcomes.append(want[0] == "error")
    assert 0.05 < sum(outcomes) / len(outcomes) < 0.95  # texts that parse and texts that do not
    node = ecma.parse_shared("(a|b)x(a|b)", ecma.GroupTable())
    first, _, last = node[1]
    assert first is last and first == ecma.parse("(a|b)")[1][0]  # the group inside the top sequence


def test_parse_shared_comparison_can_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: a table that takes a known group by its first two characters alone (no
    ``startswith`` on the whole text) gives other nodes, and the comparison above sees it."""

    def careless(self: ecma.GroupTable, s: str, i: int):  # type: ignore[no-untyped-def]
        for text, node in self.nodes.items():
            if s.startswith(text[:2], i):
                return text, node
        return None

    monkeypatch.setattr(ecma.GroupTable, "at", careless)
    table = ecma.GroupTable()
    rnd = random.Random(83)
    pieces = ["(a|b)", "(ab)", "(a)", "x", "(a|b)+"]
    texts = ["".join(rnd.choice(pieces) for _ in range(rnd.randint(2, 6))) for _ in range(200)]
    assert any(_parse_outcome(lambda t: ecma.parse_shared(t, table), t) != _parse_outcome(ecma._parse, t) for t in texts)


def test_group_table_keeps_a_bounded_amount_of_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deeply nested pattern would make every level keep its own text (length x depth): the table
    stops remembering at MAX_CHARS, and the nodes stay parse's."""
    monkeypatch.setattr(ecma.GroupTable, "MAX_CHARS", 5_000)
    text = "(" * 200 + "a" * 1_000 + ")" * 200  # ~240,000 characters of group text over all levels
    table = ecma.GroupTable()
    assert ecma.parse_shared(text, table) == ecma._parse(text)
    assert sum(len(t) for t in table.nodes) <= 5_000 and table.nodes  # remembered some, within the cap
