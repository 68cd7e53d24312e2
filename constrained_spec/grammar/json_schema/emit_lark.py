"""Recursive schemas as a Lark grammar: one rule per recursive conjunction, the compiler's regexes as
terminals, so recursive ``$ref`` needs no unrolling.

In grammar mode the compiler (:meth:`~.compiler.Compiler.compile`) writes a *placeholder* where a
conjunction it is still compiling is met again, and keeps that conjunction's regex (with
placeholders in it) as the body of a rule. :func:`build_lark` turns those texts into a Lark
grammar: every maximal placeholder-free part of a regex becomes one terminal (its regex as the
compiler wrote it), placeholders become rule references, and the alternations, sequences and
repetitions around them become rule structure. The grammar's language is the regexes' language
with each placeholder standing for its rule, i.e. the unrolled regex's language at every depth.

It is kept only when that language is also what llguidance enforces: rules that derive no text are
pruned, and :func:`~.lexeme_check.greedy_safe` must find no place where greedy lexing would lose a
string. Otherwise :func:`build_lark` answers None and the caller keeps the bounded regex.

A placeholder is ``(\\x00<n>\\x00)``: JSON text never holds a raw NUL, so no regex the compiler
writes for a JSON value matches one, and any other character set holding NUL means a placeholder
was merged into a class (then :func:`build_lark` answers None).
"""

from __future__ import annotations

import collections
import functools
import itertools
import re
from typing import Callable, Optional, TypeVar

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.ecma_regex import Node
from constrained_spec.grammar.json_schema.lexeme_check import (
    WORK_BUDGET,
    greedy_safe_ids,
    nullable,
    nullable_by,
)
from constrained_spec.grammar.json_schema.lexeme_lang import NONE, Nodes
from constrained_spec.grammar.json_schema.lexing_points import lexing_groups
from constrained_spec.grammar.json_schema.regex_text import quantifier
from constrained_spec.grammar.regex_nesting import too_deep

__all__ = ["placeholder", "build_lark"]

#: a grammar expression: ``("T", terminal name)``, ``("R", rule name)``, ``("seq", [expressions])``,
#: ``("alt", [expressions])`` or ``("rep", expression, lo, hi)`` (its fields are read by position)
Expr = tuple

_NUL = ("set", ((0, 0),))
_EPS: Expr = ("seq", [])


def placeholder(n: int) -> str:
    """The regex text that stands for rule n."""
    return "(\x00%d\x00)" % n


def _digit(node: Node) -> Optional[str]:
    if node[0] == "set" and len(node[1]) == 1 and node[1][0][0] == node[1][0][1] and 48 <= node[1][0][0] <= 57:
        return chr(node[1][0][0])
    return None


def _has_nul_by(node: Node, sub: Callable[[Node], bool]) -> bool:
    kind = node[0]
    if kind == "set":
        return ecma.contains(node[1], 0)
    if kind in ("seq", "alt"):
        return any(sub(x) for x in node[1])
    if kind == "rep":
        return sub(node[1])
    return False


def _has_nul(node: Node) -> bool:
    return _has_nul_by(node, _has_nul)


#: the JSON punctuation a ``split`` builder cuts its terminals at (outside string literals)
_PUNCT = frozenset(map(ord, "{}[],:"))
_QUOTE = ("set", ((34, 34),))
_BACKSLASH = ("set", ((92, 92),))


def _punct(node: Node) -> bool:
    """Whether node is one character of JSON punctuation (``{}[],:``)."""
    return node[0] == "set" and len(node[1]) == 1 and node[1][0][0] == node[1][0][1] and node[1][0][0] in _PUNCT


def _has_punct_by(node: Node, sub: Callable[[Node], bool]) -> bool:
    kind = node[0]
    if kind == "set":
        return _punct(node)
    if kind in ("seq", "alt"):
        return any(sub(x) for x in node[1])
    if kind == "rep":
        return sub(node[1])
    return False


_OUTSIDE_META = set("\\.+*?()|[]{}^$#&-~/")
_CLASS_META = set("\\[]^-&~/")
_ALL = ((0, 0xD7FF), (0xE000, 0x10FFFF))


def _char(cp: int, in_class: bool) -> str:
    if cp < 0x20 or cp == 0x7F:
        return "\\x%02x" % cp
    ch = chr(cp)
    if ch in (_CLASS_META if in_class else _OUTSIDE_META):
        return "\\" + ch
    return ch


def _class(ranges: ecma.Ranges) -> str:
    parts = []
    for a, b in ranges:
        if a == b:
            parts.append(_char(a, True))
        elif b == a + 1:
            parts.append(_char(a, True) + _char(b, True))
        else:
            parts.append(_char(a, True) + "-" + _char(b, True))
    return "".join(parts)


@functools.lru_cache(maxsize=4096)
def _set_text(rs: ecma.Ranges) -> Optional[str]:
    """The regex text of one character set (the shorter of the class and its negation); None: the
    empty set. Remembered (the most recent 4,096): a grammar's texts repeat a few sets many times."""
    if not rs:
        return None
    if len(rs) == 1 and rs[0][0] == rs[0][1]:
        return _char(rs[0][0], False)
    pos = "[" + _class(rs) + "]"
    neg = "[^" + _class(ecma.subtract(_ALL, rs)) + "]"
    return neg if len(neg) < len(pos) else pos


def _regex_text(node: Node) -> Optional[str]:
    """Plain regex text (Rust ``regex`` syntax, as llguidance reads it) of a regex node; None: the
    empty language."""
    return _regex_text_by(node, _regex_text)


def _regex_text_by(node: Node, sub: Callable[[Node], Optional[str]]) -> Optional[str]:
    """:func:`_regex_text`, with ``sub`` the same question for the node's parts."""
    kind = node[0]
    if kind == "set":
        return _set_text(tuple(node[1]))
    if kind == "seq":
        out = []
        for x in node[1]:
            t = sub(x)
            if t is None:
                return None
            out.append(t)
        return "".join(out)
    if kind == "alt":
        texts = [t for t in (sub(x) for x in node[1]) if t is not None]
        if not texts:
            return None
        nonempty = list(dict.fromkeys(t for t in texts if t))
        if not nonempty:
            return ""
        body = "(" + "|".join(nonempty) + ")"
        return body + "?" if any(not t for t in texts) else body  # optional where a branch reads nothing (not: two alike)
    if kind == "rep":
        lo, hi = node[2], node[3]
        t = sub(node[1])
        if t is None:
            return "" if lo == 0 else None
        if hi == 0 or t == "":
            return ""
        g = t if node[1][0] == "set" else "(" + t + ")"
        return g + quantifier(lo, hi)
    raise _Mangled(kind)


_UNKNOWN = ("unknown",)


def _without_empty(node: Node) -> Optional[Node]:
    """A regex node for the language of ``node`` less the empty string: ``node`` itself where it
    is not nullable; None where only the empty string is left; :data:`_UNKNOWN` for shapes not
    handled. ``x{lo,hi}`` with a nullable or optional body is ``x'{1,hi}`` (x' = x less the empty
    string: empty factors can be dropped); an alternation drops it from each branch; a sequence of
    nullable items is the alternation, over the first item that reads something, of that item
    less the empty string followed by the rest as they are."""
    if not nullable(node):
        return node
    kind = node[0]
    if kind == "rep":
        if node[3] == 0:
            return None
        body = _without_empty(node[1])
        if body is None or body is _UNKNOWN or node[3] == 1:
            return body
        return ("rep", body, 1, node[3])
    if kind == "alt":
        branches = []
        for b in node[1]:
            w = _without_empty(b)
            if w is _UNKNOWN:
                return _UNKNOWN
            if w is not None:
                branches.append(w)
        return ("alt", branches) if branches else None
    if kind == "seq":
        items = list(node[1])
        branches = []
        for i, item in enumerate(items):
            w = _without_empty(item)
            if w is _UNKNOWN:
                return _UNKNOWN
            if w is not None:
                branches.append(("seq", [w] + items[i + 1 :]))
        return ("alt", branches) if branches else None
    return _UNKNOWN


_T = TypeVar("_T")


def _remembered(by: Callable[[Node, Callable[[Node], _T]], _T],
                table: dict[int, tuple[Node, _T]]) -> Callable[[Node], _T]:
    """A function answering ``by(node, itself)``, remembered in ``table`` by the node's identity (the
    node kept beside its answer, so its id is not reused). The table is the closure's: a look-up is
    one call, with no attribute read and no partial made per miss. (The function names itself, a
    cycle the garbage collector frees: :meth:`_NodeMemo.clear` empties the table at once.)"""

    def get(node: Node) -> _T:
        hit = table.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = by(node, get)
        table[id(node)] = (node, out)
        return out

    return get


class _NodeMemo:
    """Answers about parsed regex nodes, remembered by the node's identity for one
    :func:`build_lark` call: both of its passes, and the rule bodies that share one parsed text,
    ask about the same (large) nodes again."""

    def __init__(self) -> None:
        self._lexeme: dict[int, tuple[Node, int]] = {}
        #: the interned lexemes of both passes (the greedy-lexing checks read them by id)
        self.lexemes = Nodes()
        self._nul: dict[int, tuple[Node, bool]] = {}
        self._null: dict[int, tuple[Node, bool]] = {}
        self._text: dict[int, tuple[Node, Optional[str]]] = {}
        self._punct: dict[int, tuple[Node, bool]] = {}
        #: :func:`_has_nul`, remembered
        self.has_nul: Callable[[Node], bool] = _remembered(_has_nul_by, self._nul)
        #: whether a node holds a character of JSON punctuation (:data:`_PUNCT`), remembered
        self.has_punct: Callable[[Node], bool] = _remembered(_has_punct_by, self._punct)
        #: :func:`~.lexeme_check.nullable`, remembered
        self.nullable: Callable[[Node], bool] = _remembered(nullable_by, self._null)
        #: :func:`_regex_text`, remembered
        self.text: Callable[[Node], Optional[str]] = _remembered(_regex_text_by, self._text)

    def clear(self) -> None:
        """Forget every answer (the nodes they hold go with them)."""
        for table in (self._nul, self._null, self._text, self._punct, self._lexeme):
            table.clear()

    def lexeme(self, node: Node) -> int:
        """The node's id in :attr:`lexemes` (``NONE``: the empty language), remembered by the
        node's identity: :func:`~.lexeme_check.to_node`'s value, without building the tuple."""
        hit = self._lexeme.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = self.lexemes.from_regex_by(node, self.lexeme)
        self._lexeme[id(node)] = (node, out)
        return out


class _Mangled(Exception):
    """A placeholder did not survive as written (the grammar cannot be built)."""


class _Builder:
    """Regex nodes with placeholders -> grammar expressions over named terminals."""

    def __init__(self, fine: bool = False, memo: Optional[_NodeMemo] = None, split: bool = False) -> None:
        self.memo = memo if memo is not None else _NodeMemo()
        self.terminals: dict[str, str] = {}  # regex text -> terminal name
        self.nodes: dict[str, int] = {}  # terminal name -> its id in memo.lexemes
        #: cut a sequence's terminal before and after each part that may read nothing (an
        #: optional property, a starred group): ``A (B)? C`` instead of one lexeme ``AB?C``
        self.fine = fine
        #: JSON-token terminals: every part holding JSON punctuation (``{}[],:``, outside string
        #: literals) becomes grammar structure, each punctuation character a terminal of its own,
        #: so a terminal is one JSON token (a key, a string, a number, a literal) or a run of them
        #: without punctuation between
        self.split = split

    def term(self, items: list[Node]) -> Optional[Expr]:
        """The grammar expression of a placeholder-free sequence: one terminal, or in ``fine``
        mode the runs between its optional parts and each optional part (an alternation: each
        branch so)."""
        if self.fine:
            flat: list[Node] = []
            for it in items:
                flat.extend(self._flat(it) if it[0] == "seq" else [it])
            if len(flat) == 1 and flat[0][0] == "alt":  # each branch cut on its own
                branches = [self.term([b]) for b in flat[0][1]]
                kept = [b for b in branches if b is not None]
                if not kept:
                    return None
                if any(b == _EPS for b in kept):
                    return self.one_term(items)  # a branch that reads nothing: no plain way to write it here
                return ("alt", kept) if len(kept) > 1 else kept[0]
            if len(flat) > 1 and any(self.memo.nullable(x) for x in flat):
                chunks: list[list[Node]] = []  # each run of parts that read something, and each optional part
                for optional, group in itertools.groupby(flat, key=self.memo.nullable):
                    chunks.extend([[x] for x in group] if optional else [list(group)])
                parts: list[Expr] = []
                for chunk in chunks:
                    t = self.one_term(chunk)
                    if t is None:
                        return None
                    if t != _EPS:
                        parts.append(t)
                return ("seq", parts) if len(parts) != 1 else parts[0]
        return self.one_term(items)

    def one_term(self, items: list[Node]) -> Optional[Expr]:
        """One terminal for a placeholder-free sequence (``(T)?`` where it may read nothing)."""
        node = ("seq", items) if len(items) != 1 else items[0]
        if node[0] == "seq" and not node[1]:
            return _EPS
        if self.memo.nullable(node):
            # a lexeme must read something (greedy lexing of an empty lexeme is undefined):
            # ``T?`` with T the rest of the language, where that is plain to write
            inner = _without_empty(node)
            if inner is None:
                return _EPS
            if inner is not _UNKNOWN:
                t = self.one_term([inner])
                return _EPS if t is None or t == _EPS else ("rep", t, 0, 1)
        text = self.memo.text(node)
        if text is None:
            return None
        if text == "":
            return _EPS
        name = self.terminals.get(text)
        if name is None:
            name = self.terminals[text] = "T%d" % len(self.terminals)
            norm = self.memo.lexeme(node)
            if norm == NONE:
                return None
            self.nodes[name] = norm
        return ("T", name)

    def conv(self, node: Node) -> Optional[Expr]:
        """The grammar expression of a regex node (None: the empty language)."""
        if not self.memo.has_nul(node) and not (self.split and self.memo.has_punct(node)):
            return self.term([node])
        kind = node[0]
        if kind == "set":  # split: one punctuation character
            return self.one_term([node])
        if kind == "seq":
            return self._seq(list(node[1]))
        if kind == "alt":
            branches = [self.conv(b) for b in node[1]]
            kept = [b for b in branches if b is not None]
            return ("alt", kept) if kept else None
        if kind == "rep":
            body = self.conv(node[1])
            if body is None:
                return _EPS if node[2] == 0 else None
            return ("rep", body, node[2], node[3])
        raise _Mangled(kind)

    def _flat(self, node: Node) -> list[Node]:
        out: list[Node] = []
        for it in node[1]:
            out.extend(self._flat(it) if it[0] == "seq" else [it])
        return out

    def _seq(self, nested: list[Node]) -> Optional[Expr]:
        items: list[Node] = []
        for it in nested:  # a group inside a sequence is spliced into it: longer terminals
            if it[0] == "seq":
                items.extend(self._flat(it))
            else:
                items.append(it)
        parts: list[Expr] = []
        plain: list[Node] = []
        quoted = False  # split: inside a string literal (between two lone '"'), where nothing is cut
        escaped = False

        def flush() -> bool:
            if plain:
                t = self.one_term(list(plain)) if self.split else self.term(list(plain))
                plain.clear()
                if t is None:
                    return False
                parts.append(t)
            return True

        i = 0
        while i < len(items):
            it = items[i]
            if it == _NUL:
                j = i + 1
                digits = ""
                while j < len(items) and (d := _digit(items[j])) is not None:
                    digits += d
                    j += 1
                if not digits or j >= len(items) or items[j] != _NUL:
                    raise _Mangled("placeholder")
                if not flush():
                    return None
                parts.append(("R", "r%s" % digits))
                i = j + 1
                continue
            nul = self.memo.has_nul(it)
            if self.split and not nul:
                if quoted:
                    if escaped:
                        escaped = False
                    elif it == _BACKSLASH:
                        escaped = True
                    elif it == _QUOTE:
                        quoted = False
                elif it == _QUOTE:
                    quoted = True
            if nul or (self.split and not quoted and self.memo.has_punct(it)):
                if not flush():
                    return None
                sub = self.conv(it)
                if sub is None:
                    return None
                parts.append(sub)
            else:
                plain.append(it)
            i += 1
        if not flush():
            return None
        return ("seq", parts)


# -- grammar analysis ---------------------------------------------------------------------------


def _productive(e: Expr, ok: set[str]) -> bool:
    kind = e[0]
    if kind == "T":
        return True
    if kind == "R":
        return e[1] in ok
    if kind == "seq":
        return all(_productive(x, ok) for x in e[1])
    if kind == "alt":
        return any(_productive(x, ok) for x in e[1])
    return e[2] == 0 or _productive(e[1], ok)


def _productive_rules(defined: dict[str, Expr]) -> set[str]:
    """The rules that derive some text: the least fixed point of ``_productive`` from no rule, a
    rule looked at again only when a rule it names has just been found productive (the fixed point
    is unique, so the order it is reached in does not change it)."""
    users: dict[str, list[str]] = {}
    for r, e in defined.items():
        for used in _refs(e, set()):
            users.setdefault(used, []).append(r)
    ok: set[str] = set()
    todo = list(defined)
    while todo:
        r = todo.pop()
        if r in ok or not _productive(defined[r], ok):
            continue
        ok.add(r)
        todo.extend(u for u in users.get(r, ()) if u not in ok)
    return ok


def _prune(e: Expr, ok: set[str]) -> Expr:
    """e without the alternatives that derive no text (e itself must be productive)."""
    kind = e[0]
    if kind == "seq":
        return ("seq", [_prune(x, ok) for x in e[1]])
    if kind == "alt":
        return ("alt", [_prune(x, ok) for x in e[1] if _productive(x, ok)])
    if kind == "rep":
        return ("rep", _prune(e[1], ok), e[2], e[3]) if _productive(e[1], ok) else _EPS
    return e


def _refs(e: Expr, out: set[str]) -> set[str]:
    if e[0] == "R":
        out.add(e[1])
    elif e[0] in ("seq", "alt"):
        for x in e[1]:
            _refs(x, out)
    elif e[0] == "rep":
        _refs(e[1], out)
    return out


def _renamed(e: Expr, names: dict[str, str]) -> Expr:
    """e with each rule reference r renamed names[r] (where names has it)."""
    kind = e[0]
    if kind == "R":
        return ("R", names.get(e[1], e[1]))
    if kind in ("seq", "alt"):
        return (kind, [_renamed(x, names) for x in e[1]])
    if kind == "rep":
        return ("rep", _renamed(e[1], names), e[2], e[3])
    return e


def _tagged(e: Expr, used: list[str]) -> Expr:
    """e with its k-th rule reference (walk order) renamed to the token ``\\x01k\\x02`` (no
    terminal or rule name holds those characters), the rule appended to ``used``."""
    kind = e[0]
    if kind == "R":
        used.append(e[1])
        return ("R", "\x01%d\x02" % (len(used) - 1))
    if kind in ("seq", "alt"):
        return (kind, [_tagged(x, used) for x in e[1]])
    if kind == "rep":
        return ("rep", _tagged(e[1], used), e[2], e[3])
    return e


def _merged(root: Expr, rules: dict[str, Expr]) -> tuple[Expr, dict[str, Expr]]:
    """The grammar with each class of rules that are the same up to the names of the rules they use
    (the coarsest such partition, refined from one class as a DFA is minimised) written once: the
    rules of one class derive the same texts (their bodies are the same with each rule standing for
    a rule of its class), so naming one for all keeps the language.

    Each body is rendered once, its rule references written as numbered tokens (:func:`_tagged`);
    a round compares (class, that text, the classes of the references in order). Equal ones are the
    same body up to the names of the rules of one class (a refinement of comparing the bodies
    rendered with the class names: two references to one class in an alternation stay two)."""
    order = sorted(rules, key=lambda r: int(r[1:]))
    shape: dict[str, str] = {}
    used: dict[str, list[str]] = {}
    for r in order:
        used[r] = []
        shape[r] = _render(_tagged(rules[r], used[r]))
    cls = {r: 0 for r in order}
    while True:
        sigs: dict[tuple[int, str, tuple[int, ...]], int] = {}
        new = {r: sigs.setdefault((cls[r], shape[r], tuple([cls[x] for x in used[r]])), len(sigs)) for r in order}
        if len(sigs) == len(set(cls.values())):
            break
        cls = new
    first: dict[int, str] = {}
    for r in order:
        first.setdefault(cls[r], r)
    names = {r: first[cls[r]] for r in order}
    return _renamed(root, names), {r: _renamed(rules[r], names) for r in order if first[cls[r]] == r}


class _Flow:
    """FIRST sets, nullability and the terminals that may follow each terminal (the sets of
    terminals that may start at one point of a parse: :func:`~.lexing_points.lexing_groups`)."""

    def __init__(self, root: Expr, rules: dict[str, Expr]) -> None:
        self.rules = rules
        self.first_r: dict[str, frozenset[str]] = {r: frozenset() for r in rules}
        self.null_r: dict[str, bool] = {r: False for r in rules}
        #: once the rules' FIRST sets and nullability are final: each expression's, remembered by
        #: its identity (the walks below ask again about every part of every sequence they enter)
        self._first_of: Optional[dict[int, tuple[Expr, frozenset[str]]]] = None
        self._null_of: Optional[dict[int, tuple[Expr, bool]]] = None
        # the least fixed point (unique: the equations are monotone, so any order of updates from
        # the empty sets reaches it): a rule is computed again only when a rule it names changed
        users: dict[str, list[str]] = {r: [] for r in rules}
        for r, body in rules.items():
            for used in sorted(_refs(body, set())):
                users[used].append(r)
        todo = collections.deque(rules)
        queued = set(rules)
        while todo:
            r = todo.popleft()
            queued.discard(r)
            body = rules[r]
            f, n = self.first(body), self.nullable(body)
            if f != self.first_r[r] or n != self.null_r[r]:
                self.first_r[r], self.null_r[r] = f, n
                for u in users[r]:
                    if u not in queued:
                        queued.add(u)
                        todo.append(u)
        self._first_of, self._null_of = {}, {}
        self.follow_r: dict[str, frozenset[str]] = {r: frozenset() for r in rules}
        self.follows: dict[str, set[str]] = {}  # terminal -> the terminals that may follow it
        #: (id of an expression, its follow set) -> the expression, for each walk done: walking it
        #: again with the same follow set adds nothing (what a walk adds depends on those two only,
        #: the FIRST sets and nullability being final), so the rounds after the first walk only
        #: the rules whose follow sets grew
        self._walked: dict[tuple[int, frozenset[str]], Expr] = {}
        while True:
            before = dict(self.follow_r)
            self.walk(root, frozenset())
            for r, body in rules.items():
                self.walk(body, self.follow_r[r])
            if before == self.follow_r:
                break

    def nullable(self, e: Expr) -> bool:
        if e[0] == "T":
            return False
        if e[0] == "R":
            return self.null_r[e[1]]
        memo = self._null_of
        if memo is None:
            return nullable_by(e, self.nullable)
        hit = memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = nullable_by(e, self.nullable)
        memo[id(e)] = (e, out)
        return out

    def first(self, e: Expr) -> frozenset[str]:
        memo = self._first_of
        if memo is None or e[0] in ("T", "R"):
            return self._first(e)
        hit = memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._first(e)
        memo[id(e)] = (e, out)
        return out

    def _first(self, e: Expr) -> frozenset[str]:
        kind = e[0]
        if kind == "T":
            return frozenset([e[1]])
        if kind == "R":
            return self.first_r[e[1]]
        if kind == "seq":
            acc: frozenset[str] = frozenset()
            for x in e[1]:
                acc |= self.first(x)
                if not self.nullable(x):
                    break
            return acc
        if kind == "alt":
            return frozenset().union(*(self.first(x) for x in e[1]))
        return self.first(e[1])

    def walk(self, e: Expr, follow: frozenset[str]) -> None:
        key = (id(e), follow)
        if self._walked.get(key) is e:
            return
        self._walked[key] = e
        kind = e[0]
        if kind == "T":
            self.follows.setdefault(e[1], set()).update(follow)
        elif kind == "R":
            self.follow_r[e[1]] = self.follow_r[e[1]] | follow
        elif kind == "seq":
            items = e[1]
            after = follow
            for x in reversed(items):
                self.walk(x, after)
                after = self.first(x) | (after if self.nullable(x) else frozenset())
        elif kind == "alt":
            for x in e[1]:
                self.walk(x, follow)
        else:
            again = e[3] is None or e[3] > 1
            self.walk(e[1], (self.first(e[1]) | follow) if again else follow)


# -- text ---------------------------------------------------------------------------------------


#: what :func:`_lark_regex` rewrites: an escape pair (kept), ``/`` and the control characters
_LARK_ESCAPE = re.compile(r"\\[\s\S]|[/\x00-\x1f\x7f]")


def _lark_escape(m: "re.Match[str]") -> str:
    s = m.group()
    if len(s) == 2:  # an escape pair: as it is
        return s
    return "\\/" if s == "/" else "\\x%02x" % ord(s)


def _lark_regex(text: str) -> str:
    """A regex as a Lark ``/.../`` literal: ``/`` and control characters escaped (an escape pair
    ``\\c`` is kept as it is, a lone ``\\`` at the end too)."""
    return "/" + _LARK_ESCAPE.sub(_lark_escape, text) + "/"


def _render(e: Expr) -> str:
    kind = e[0]
    if kind == "T":
        return e[1]
    if kind == "R":
        return e[1]
    if kind == "seq":
        parts = [_render(x) for x in e[1] if x != _EPS]
        parts = [p for p in parts if p]
        if not parts:
            return ""
        return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"
    if kind == "alt":
        parts = [_render(x) for x in e[1]]
        nonempty = list(dict.fromkeys(p for p in parts if p))
        if not nonempty:
            return ""
        body = "(" + " | ".join(nonempty) + ")"
        return body + "?" if any(not p for p in parts) else body  # optional where a branch reads nothing (not: two alike)
    body, lo, hi = _render(e[1]), e[2], e[3]
    if not body:
        return ""
    g = "(" + body + ")"
    if hi is None and lo > 1:  # Lark has no {lo,}: lo copies, then any number
        return "(" + g + "{%d} " % lo + g + "*)"
    return g + quantifier(lo, hi)


def build_lark(root: str, rules: dict[int, Optional[str]],
               and_lexemes: Optional[dict[int, tuple[str, str]]] = None, scaled: bool = False,
               deadline: Optional[float] = None, split: bool = False, split_only: bool = False) -> Optional[str]:
    """The Lark grammar of ``root`` (a regex with placeholders) and the rule bodies ``rules``
    (rule number -> regex with placeholders); None where it cannot be built or llguidance's
    greedy lexer could lose strings of it. Terminals are as long as the regexes allow first; where
    greedy lexing could lose strings of those, the sequences are cut at their optional parts
    (``_Builder.fine``) and checked again.

    A rule in ``and_lexemes`` (number -> (regex, JSON Schema of one string), placeholder-free) is
    ``%json <schema>`` (llguidance compiles that string schema itself: a pattern and length bounds
    intersected exactly, which one regex cannot spell) instead of its body; the greedy-lexing check
    reads it as ``regex``, a superset of it with the same quotes.

    ``scaled``: the greedy-lexing check's work budget grows with the pairs of lexemes it must compare
    (:data:`PAIR_STEPS` each) too: for the grammars of large schemas (many rules, many lexemes). It
    is :data:`~.lexeme_check.WORK_BUDGET` plus :data:`SIZE_STEPS` per node of the terminals, at most
    :data:`MAX_CHECK_STEPS` (:func:`_check_budget`).
    ``deadline`` (``time.monotonic()``): past it the check raises ``CompileLimitError`` (kind ``"time"``).

    ``split``: a try with JSON-token terminals (``_Builder.split``: every punctuation character of
    ``{}[],:`` outside string literals a terminal of its own, the structure around it grammar rules),
    checked the same way, *before* those two (they are the tries after it). The callers ask for it
    where a schema's regex passed the cap and nothing else answers: there the longer terminals
    almost always fail the greedy-lexing check (a terminal ending in an optional member runs into
    the rule after it; 99 of the 108 such schemas of the two JSONSchemaBench development splits
    whose compile took over 100 ms, 2026-12-06), so trying them first spent about a quarter of the
    compile for nothing, and the masks along the bundled instances cost the same either way
    (measured on 6 of the 15 whose grammar changed). The language is the same in all three; only where
    the lexemes end differs (and, with JSON-token terminals, rules that are the same up to the names
    of the rules they use are written once: :func:`_merged`). ``split_only``: that try alone."""
    ands = and_lexemes or {}
    parsed: dict[str, ecma.Node] = {}  # both passes read the same texts: each is parsed once
    groups = ecma.GroupTable()  # the groups of every text of this grammar, each parsed once

    def parse(text: str) -> ecma.Node:
        node = parsed.get(text)
        if node is None:
            node = parsed[text] = ecma.parse_shared(text, groups)
        return node

    memo = _NodeMemo()  # both passes ask about the same parsed nodes
    try:
        if split_only:
            return _build_lark(root, rules, ands, fine=False, scaled=scaled, deadline=deadline, parse=parse, memo=memo,
                               split=True)
        if split:  # JSON-token terminals first (see the docstring)
            found = _build_lark(root, rules, ands, fine=False, scaled=scaled, deadline=deadline, parse=parse, memo=memo,
                                split=True)
            if found is not None:
                return found
        return (_build_lark(root, rules, ands, fine=False, scaled=scaled, deadline=deadline, parse=parse, memo=memo)
                or _build_lark(root, rules, ands, fine=True, scaled=scaled, deadline=deadline, parse=parse, memo=memo))
    finally:
        memo.clear()


#: ``build_lark(scaled=True)``: derivative steps the greedy-lexing check may spend per pair of lexemes
#: that may start at one point (a large schema's grammar needs about 2), on top of ``WORK_BUDGET``
PAIR_STEPS = 4
#: ``build_lark(scaled=True)``: the most derivative steps the greedy-lexing check may spend
MAX_CHECK_STEPS = 2_000_000
#: derivative steps the greedy-lexing check may spend per node of the grammar's terminals (their
#: tuple forms, :meth:`~.lexeme_lang.Nodes.size`), on top of the budgets above: a lexeme checked
#: against itself is walked whole, about 1 to 4 steps per node (an enum of 400 long strings, a
#: key language built from unanchored patterns)
SIZE_STEPS = 8


def _build_lark(root: str, rules: dict[int, Optional[str]], ands: dict[int, tuple[str, str]],
                fine: bool, scaled: bool = False, deadline: Optional[float] = None,
                parse: Callable[[str], ecma.Node] = ecma.parse, memo: Optional[_NodeMemo] = None,
                split: bool = False) -> Optional[str]:
    b = _Builder(fine, memo, split)
    and_text: dict[str, str] = {}  # name of a %json string -> its definition
    try:
        root_e = b.conv(parse(root))
        bodies: dict[str, Optional[Expr]] = {}
        for n, text in rules.items():
            if n in ands:
                wide, leaf = ands[n]
                node = b.memo.lexeme(parse(wide))
                if node == NONE:
                    return None
                name = "j%d" % n  # a rule: %json cannot define a terminal
                b.nodes[name] = node
                and_text[name] = "%json " + leaf
                bodies["r%d" % n] = ("T", name)
            elif text is not None:
                bodies["r%d" % n] = b.conv(parse(text))
    except (_Mangled, ecma.PatternError, ValueError, RecursionError):
        return None
    if root_e is None:
        return None
    defined = {r: e for r, e in bodies.items() if e is not None}
    ok = _productive_rules(defined)
    if not _productive(root_e, ok):
        return None
    root_e = _prune(root_e, ok)
    kept: dict[str, Expr] = {}
    todo = sorted(_refs(root_e, set()))
    while todo:
        r = todo.pop()
        if r in kept:
            continue
        kept[r] = _prune(defined[r], ok)
        todo.extend(sorted(x for x in _refs(kept[r], set()) if x not in kept))  # (no set of kept per rule)
    if not kept:
        return None  # nothing recursive is left: the regex says it all
    if split:
        root_e, kept = _merged(root_e, kept)
    flow = _Flow(root_e, kept)
    used = set(flow.follows)
    terminals = {name: node for name, node in b.nodes.items() if name in used}
    if any(name in used and too_deep(text) for text, name in b.terminals.items()):
        return None  # llguidance's regex parser would refuse the terminal (nesting)
    follows = {name: frozenset(f) for name, f in flow.follows.items()}
    colive = lexing_groups(root_e, kept, follows, flow.null_r, flow.first(root_e))
    if not greedy_safe_ids(terminals, b.memo.lexemes, list(colive), follows,
                           _check_budget(terminals, b.memo.lexemes, colive, scaled), deadline):
        return None
    lines = ["start: " + _render(root_e)]
    lines += [f"{r}: {_render(kept[r])}" for r in sorted(kept, key=lambda s: int(s[1:]))]
    lines += [f"{name}: {_lark_regex(text)}" for text, name in b.terminals.items() if name in used]
    lines += [f"{name}: {text}" for name, text in and_text.items() if name in used]
    if any(not line.split(":", 1)[1].strip() for line in lines):
        return None
    return "\n".join(lines) + "\n"


def _check_budget(terminals: dict[str, int], lexemes: Nodes, colive: set[frozenset[str]], scaled: bool) -> int:
    """The greedy-lexing check's step budget: :data:`~.lexeme_check.WORK_BUDGET`, plus
    :data:`PAIR_STEPS` per pair of lexemes that may start at one point where ``scaled``, plus
    :data:`SIZE_STEPS` per node of the terminals (a walk of a lexeme against itself takes a few
    steps per node: a large enum or key language is read whole, however few lexemes there are),
    at most :data:`MAX_CHECK_STEPS` in all."""
    budget = WORK_BUDGET + SIZE_STEPS * sum(lexemes.size(i) for i in terminals.values())
    if scaled:
        budget += PAIR_STEPS * sum(len(group) ** 2 for group in colive)
    return min(budget, MAX_CHECK_STEPS)
