"""ECMA-262 patterns (as used by JSON Schema ``pattern``) -> regexes over JSON string content.

A JSON Schema ``pattern`` constrains the *decoded* string, and matches anywhere in it
(it is not anchored).  The token automaton, however, reads the *encoded* JSON text, so
every character of the pattern is translated to the way ``json.dumps(..., ensure_ascii=False)``
writes it: most characters raw, ``"`` and ``\\`` and control characters as escapes.  The
translation only ever *narrows* the language (one canonical spelling per character), which
keeps it sound.

Where ECMA and Python ``re`` (which the ``jsonschema`` validator uses) disagree, we take the
intersection of both semantics: ``\\d``/``\\w`` are ASCII, ``\\s`` is ASCII whitespace,
``\\D``/``\\W``/``\\S`` exclude the Unicode digits/word characters/spaces, ``.`` excludes all
ECMA line terminators, ``$`` only matches at the very end.

Nodes of the parsed pattern (plain tuples):

* ``("set", ranges)``          one code point out of ``ranges`` (sorted, disjoint, inclusive)
* ``("seq", [nodes])``         concatenation
* ``("alt", [nodes])``         alternation
* ``("rep", node, lo, hi)``    repetition, ``hi`` None = unbounded
* ``("bol",)`` / ``("eol",)``  anchors ``^`` / ``$``
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import re
import unicodedata
from contextvars import ContextVar
from typing import Callable, Iterator, Optional

MEMO_TEXT_CHARS = 1_000  # longer regex texts are scanned, not memoised: 8,192 of them could hold gigabytes

__all__ = [
    "PatternError",
    "parse",
    "parse_superset",
    "parse_shared",
    "GroupTable",
    "Ranges",
    "Node",
    "emit",
    "emit_set",
    "search_regex",
    "literal",
    "escape_literal",
    "node_len",
    "ANY_RANGES",
    "to_content_regex",
    "is_atom",
    "top_level_bar",
    "is_closed",
]

Ranges = tuple  # tuple[tuple[int, int], ...]
#: a node of a parsed pattern: one of the tuples in the module docstring (its fields are read by position)
Node = tuple

MAX_CP = 0x10FFFF
SURR = (0xD800, 0xDFFF)


class PatternError(Exception):
    """The pattern cannot be parsed or uses an unsupported construct."""


# ---------------------------------------------------------------------------
# code point range sets


def norm(ranges) -> Ranges:
    rs = sorted((a, b) for a, b in ranges if a <= b)
    out: list[tuple[int, int]] = []
    for a, b in rs:
        # drop surrogates
        pieces = []
        if b < SURR[0] or a > SURR[1]:
            pieces.append((a, b))
        else:
            if a < SURR[0]:
                pieces.append((a, SURR[0] - 1))
            if b > SURR[1]:
                pieces.append((SURR[1] + 1, b))
        for x, y in pieces:
            if out and x <= out[-1][1] + 1:
                if y > out[-1][1]:
                    out[-1] = (out[-1][0], y)
            else:
                out.append((x, y))
    return tuple(out)


def complement(r: Ranges) -> Ranges:
    out = []
    prev = 0
    for a, b in r:
        if a > prev:
            out.append((prev, a - 1))
        prev = b + 1
    if prev <= MAX_CP:
        out.append((prev, MAX_CP))
    return norm(out)


def union(*rs: Ranges) -> Ranges:
    return norm([x for r in rs for x in r])


def intersect(a: Ranges, b: Ranges) -> Ranges:
    """The code points in both a and b, normalised (remembered for the most recent 8,192 pairs of
    range tuples: emit_set and the lexing checks ask about the same few pairs again and again)."""
    if type(a) is tuple and type(b) is tuple:
        try:
            return _intersect_memo(a, b)
        except TypeError:  # a pair that is not hashable (a list): computed, not kept
            pass
    return _intersect(a, b)


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    """The code points in both a and b, normalised."""
    return complement(union(complement(a), complement(b)))


_intersect_memo = functools.lru_cache(maxsize=8192)(_intersect)


def subtract(a: Ranges, b: Ranges) -> Ranges:
    return intersect(a, complement(b))


def contains(r: Ranges, cp: int) -> bool:
    return any(a <= cp <= b for a, b in r)


ANY_RANGES: Ranges = norm([(0, MAX_CP)])
DIGIT = norm([(0x30, 0x39)])
WORD = norm([(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)])
SPACE = norm([(0x09, 0x0D), (0x20, 0x20)])
# ECMA line terminators
DOT = complement(norm([(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]))


def _ranges_from_pred(pred) -> Ranges:
    out = []
    start = None
    for cp in range(MAX_CP + 1):
        if SURR[0] <= cp <= SURR[1]:
            ok = False
        else:
            ok = pred(chr(cp))
        if ok and start is None:
            start = cp
        elif not ok and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, MAX_CP))
    return norm(out)


@functools.lru_cache(maxsize=8)  # three names (d, w, s); bounded all the same
def _unicode_class(name: str) -> Ranges:
    """Union of the ECMA and Python Unicode notions (used for the negated classes)."""
    if name == "d":
        return union(DIGIT, _ranges_from_pred(lambda c: unicodedata.category(c) == "Nd"))
    if name == "w":
        return union(WORD, _ranges_from_pred(lambda c: c.isalnum() or c == "_"))
    if name == "s":
        extra = [0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF] + list(range(0x2000, 0x200B))
        return union(SPACE, norm([(c, c) for c in extra]), _ranges_from_pred(lambda c: c.isspace()))
    raise KeyError(name)


def _neg_class(name: str) -> Ranges:
    return complement(_unicode_class(name))


# ---------------------------------------------------------------------------
# parser


#: where a character class ends, for :attr:`_Parser.classes` (a text the parser read to that end)
_CLASS_EXTENT = re.compile(r"\[(?:\\.|[^\]\\])*\]", re.S)
#: a run of characters that :meth:`_Parser.atom` reads as themselves (no syntax, no surrogate)
_PLAIN_RUN = re.compile(r"[^\\()\[.^$|*+?{\ud800-\udfff]+")


class _Parser:
    def __init__(self, src: str, superset: bool = False, groups: Optional["GroupTable"] = None) -> None:
        self.s = src
        self.i = 0
        self.ngroups = 0
        self.superset = superset  # see parse_superset
        #: the groups parsed so far, where groups of the same text are to be one object (see
        #: :func:`parse_shared`); None: every group its own node
        self.groups = groups
        #: class text -> its ranges, for the classes parsed so far (a long regex repeats a few classes
        #: many times; the parse of a class reads nothing past its closing ``]``)
        self.classes: dict[str, Ranges] = {}

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def eof(self) -> bool:
        return self.i >= len(self.s)

    def parse(self):
        node = self.alt()
        if not self.eof():
            raise PatternError(f"unexpected {self.peek()!r} at {self.i}")
        return node

    def alt(self):
        branches = [self.seq()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.seq())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def seq(self):
        items = []
        s = self.s
        while not self.eof() and self.peek() not in "|)":
            run = _PLAIN_RUN.match(s, self.i)
            if run is not None and run.end() - self.i > 1:
                # plain characters, each its own set, but the last (a quantifier may follow it)
                items.extend(("set", ((ord(ch), ord(ch)),)) for ch in s[self.i : run.end() - 1])
                self.i = run.end() - 1
            atom = self.atom()
            atom = self.quant(atom)
            items.append(atom)
        return ("seq", items)

    def quant(self, atom):
        while True:
            c = self.peek()
            if c in ("*", "+", "?"):
                self.i += 1
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
            elif c == "{":
                q = self._brace()
                if q is None:
                    return atom
                lo, hi = q
            else:
                return atom
            if self.peek() == "?":  # lazy: same language
                self.i += 1
            elif self.peek() == "+":  # possessive (not ECMA)
                raise PatternError("possessive quantifier")
            if atom[0] in ("bol", "eol"):
                raise PatternError("quantified anchor")
            if hi is not None and hi < lo:
                raise PatternError("bad quantifier range")
            atom = ("rep", atom, lo, hi)

    def _brace(self):
        j = self.i + 1
        s = self.s
        k = j
        while k < len(s) and s[k].isdigit():
            k += 1
        if k == j:
            if self.superset and s.startswith("{,", self.i):
                raise PatternError("'{,n}' is a repetition in some dialects and text in others")
            return None
        lo = int(s[j:k])
        if k < len(s) and s[k] == "}":
            self.i = k + 1
            return lo, lo
        if k < len(s) and s[k] == ",":
            m = k + 1
            while m < len(s) and s[m].isdigit():
                m += 1
            if m < len(s) and s[m] == "}":
                hi = int(s[k + 1 : m]) if m > k + 1 else None
                self.i = m + 1
                return lo, hi
        return None

    def atom(self):
        c = self.peek()
        if c == "(":
            start = self.i
            if self.groups is not None:
                known = self.groups.at(self.s, start)
                if known is not None:
                    self.i = start + len(known[0])
                    return known[1]
            self.i += 1
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.s.startswith("?=", self.i) or self.s.startswith("?!", self.i) or self.s.startswith(
                "?<=", self.i
            ) or self.s.startswith("?<!", self.i):
                raise PatternError("lookaround assertions are not regular")
            elif self.s.startswith("?<", self.i) or self.s.startswith("?P<", self.i):
                j = self.s.find(">", self.i)
                if j < 0:
                    raise PatternError("bad group name")
                self.i = j + 1
                self.ngroups += 1
            elif self.peek() == "?":
                raise PatternError("unsupported group syntax (?...)")
            else:
                self.ngroups += 1
            node = self.alt()
            if self.peek() != ")":
                raise PatternError("missing )")
            self.i += 1
            group = ("seq", [node])
            if self.groups is not None and self.i - start <= self.groups.room:  # its node depends on its text alone
                self.groups.add(self.s[start : self.i], group)
            return group
        if c == "[":
            extent = _CLASS_EXTENT.match(self.s, self.i)
            text = extent.group() if extent is not None else ""
            known = self.classes.get(text) if text else None
            if known is not None:
                self.i += len(text)
                return ("set", known)
            start = self.i
            ranges = self.cls()
            if text and self.s[start : self.i] == text:
                self.classes[text] = ranges
            return ("set", ranges)
        if c == ".":
            self.i += 1
            return ("set", ANY_RANGES if self.superset else DOT)
        if c == "^":
            self.i += 1
            return ("bol",)
        if c == "$":
            self.i += 1
            return ("eol",)
        if c == "\\":
            return self.escape(in_class=False)
        if c in "*+?":
            raise PatternError(f"nothing to repeat at {self.i}")
        if c == "{" and self._brace() is not None:
            raise PatternError("nothing to repeat")
        self.i += 1
        cp = ord(c)
        if 0xD800 <= cp <= 0xDFFF:
            raise PatternError("surrogate in pattern")
        return ("set", ((cp, cp),))

    def _hex(self, n: int) -> int:
        h = self.s[self.i : self.i + n]
        if len(h) != n or any(ch not in "0123456789abcdefABCDEF" for ch in h):
            raise PatternError("bad hex escape")
        self.i += n
        return int(h, 16)

    def escape(self, in_class: bool):
        """Parse an escape at self.i (pointing at the backslash)."""
        self.i += 1
        if self.eof():
            raise PatternError("trailing backslash")
        c = self.s[self.i]
        self.i += 1
        simple = {"t": 9, "n": 10, "v": 11, "f": 12, "r": 13}
        if c in simple:
            return ("set", ((simple[c], simple[c]),))
        if self.superset and c in "dwsDWS":
            return ("set", ANY_RANGES)
        if c == "d":
            return ("set", DIGIT)
        if c == "w":
            return ("set", WORD)
        if c == "s":
            return ("set", SPACE)
        if c in "DWS":
            return ("set", _neg_class(c.lower()))
        if c == "b":
            if in_class:
                return ("set", ((8, 8),))
            if self.superset:  # a zero-width assertion: read as no assertion (wider)
                return ("seq", [])
            raise PatternError("word boundary \\b is not supported")
        if c == "B" and self.superset and not in_class:
            return ("seq", [])
        if c == "B":
            raise PatternError("\\B is not supported")
        if c == "A" and not in_class:
            return ("bol",)
        if c in "zZ" and not in_class:
            return ("eol",)
        if c == "0" and not self.peek().isdigit():
            return ("set", ((0, 0),))
        if c.isdigit():
            raise PatternError("backreferences are not regular")
        if c == "k" and self.peek() == "<":
            raise PatternError("backreferences are not regular")
        if c == "x":
            v = self._hex(2)
            return ("set", ((v, v),))
        if c == "u":
            if self.peek() == "{":
                j = self.s.find("}", self.i)
                if j < 0:
                    raise PatternError("bad \\u{...}")
                try:
                    v = int(self.s[self.i + 1 : j], 16)
                except ValueError as e:
                    raise PatternError("bad \\u{...}") from e
                self.i = j + 1
            else:
                v = self._hex(4)
                if 0xD800 <= v <= 0xDBFF and self.s.startswith("\\u", self.i):
                    save = self.i
                    self.i += 2
                    try:
                        lo = self._hex(4)
                    except PatternError:
                        lo = -1
                    if 0xDC00 <= lo <= 0xDFFF:
                        v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00)
                    else:
                        self.i = save
            if 0xD800 <= v <= 0xDFFF or v > MAX_CP:
                raise PatternError("lone surrogate in pattern")
            return ("set", ((v, v),))
        if c == "U":
            v = self._hex(8)
            return ("set", ((v, v),))
        if c == "c":
            ch = self.peek()
            if ch.isalpha():
                self.i += 1
                v = ord(ch) % 32
                return ("set", ((v, v),))
            raise PatternError("bad \\c escape")
        if c in "pP":
            raise PatternError("Unicode property escapes are not supported")
        if c.isalnum():
            raise PatternError(f"unknown escape \\{c}")
        cp = ord(c)
        return ("set", ((cp, cp),))

    def cls(self) -> Ranges:
        assert self.peek() == "["
        self.i += 1
        neg = False
        if self.peek() == "^":
            neg = True
            self.i += 1
        items: list = []
        first = True
        while True:
            if self.eof():
                raise PatternError("unterminated character class")
            c = self.peek()
            if c == "]" and not first:
                self.i += 1
                break
            if c == "]" and first:
                # ECMA: [] is empty, []] ... ; Python: ']' first is literal.  Refuse.
                raise PatternError("ambiguous ']' at start of class")
            if c == "[" and self.peek(1) in ":.=":
                raise PatternError("POSIX class syntax is not supported")
            first = False
            lo = self._class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                save = self.i
                self.i += 1
                hi = self._class_atom()
                if isinstance(lo, int) and isinstance(hi, int):
                    if hi < lo:
                        raise PatternError("bad class range")
                    items.append(((lo, hi),))
                    continue
                # class escapes around '-' -> treat '-' literally (ECMA Annex B)
                self.i = save + 1
                items.append(lo if not isinstance(lo, int) else ((lo, lo),))
                items.append(((0x2D, 0x2D),))
                items.append(hi if not isinstance(hi, int) else ((hi, hi),))
                continue
            items.append(lo if not isinstance(lo, int) else ((lo, lo),))
        r = union(*items) if items else ()
        return complement(r) if neg else r

    def _class_atom(self):
        c = self.peek()
        if c == "\\":
            node = self.escape(in_class=True)
            if node[0] != "set":
                raise PatternError("anchor inside class")
            r = node[1]
            if len(r) == 1 and r[0][0] == r[0][1]:
                return r[0][0]
            return r
        if c == "[" :
            # Python warns about nested sets; treat as literal '['
            pass
        self.i += 1
        return ord(c)


def parse(pattern: str):
    """Parse an ECMA-262 pattern into the node tuples described in the module docstring
    (memoised for patterns up to MEMO_TEXT_CHARS, the most recent 4,096)."""
    return _parse_memo(pattern) if len(pattern) <= MEMO_TEXT_CHARS else _parse(pattern)


def _parse(pattern: str):
    try:
        return _Parser(pattern).parse()
    except RecursionError as e:  # pragma: no cover - absurd nesting
        raise PatternError("pattern nested too deeply") from e


_parse_memo = functools.lru_cache(maxsize=4096)(_parse)


class GroupTable:
    """The groups :func:`parse_shared` has parsed: text -> node, and the texts by their first
    :data:`KEY_CHARS` characters. A group's node depends on its text alone (the parser reads
    nothing past a group's closing ``)`` and numbers nothing), and a group text that the text at
    a ``(`` starts with *is* the group there (its parse ends where that text's parse ended), so a
    known group is not parsed again."""

    KEY_CHARS = 24
    #: the most characters of group text a table keeps, all groups together (nested groups each
    #: keep their own text, so a deeply nested pattern would otherwise cost its length times its
    #: depth); past it, new groups are parsed as usual and not remembered
    MAX_CHARS = 4_000_000

    def __init__(self) -> None:
        self.nodes: dict[str, tuple] = {}
        self.by_start: dict[str, list[str]] = {}
        self.room = self.MAX_CHARS

    def at(self, s: str, i: int) -> Optional[tuple[str, tuple]]:
        """The known group (text, node) that ``s`` has at ``i`` (a ``(``), or None."""
        for text in self.by_start.get(s[i : i + self.KEY_CHARS], ()):
            if s.startswith(text, i):
                return text, self.nodes[text]
        return None

    def add(self, text: str, node: tuple) -> None:
        """Remember a group's node (a text met before keeps its node)."""
        if text not in self.nodes:
            self.room -= len(text)
            self.nodes[text] = node
            self.by_start.setdefault(text[: self.KEY_CHARS], []).append(text)


def parse_shared(pattern: str, groups: GroupTable):
    """:func:`parse`, with the groups written alike one node object (a DAG, not a tree), here and
    in the other texts parsed with the same ``groups`` (filled as it goes), each parsed once: the
    same values, so that answers remembered by a node's identity are found again for every copy
    of a group (a large schema's regexes repeat a few member and string groups many times). Not
    memoised."""
    try:
        return _Parser(pattern, groups=groups).parse()
    except RecursionError as e:  # pragma: no cover - absurd nesting
        raise PatternError("pattern nested too deeply") from e


def parse_superset(pattern: str):
    """Parse a regex of another dialect (a ``Regex`` output type in outlines-core / Rust syntax, or
    a compiled schema's regex) for bounds on its strings' length, never for matching: where the
    dialects read a construct differently, the nodes take the wider reading or the parse refuses.
    ``.``, ``\\d``, ``\\w``, ``\\s`` and their negations stand for every code point (Rust and
    Python read the classes as Unicode ones and ``.`` as all but a newline); ``\\b`` and ``\\B``
    assert nothing; ``{,n}`` (a repetition in Python, text in ECMA) is refused, as :func:`parse`
    refuses what it does not read. Not memoised."""
    try:
        return _Parser(pattern, superset=True).parse()
    except RecursionError as e:
        raise PatternError("pattern nested too deeply") from e


# ---------------------------------------------------------------------------
# lengths


def node_len(node) -> tuple[int, Optional[int]]:
    """(min, max) number of code points matched by a node (max None = unbounded)."""
    return node_len_by(node, node_len)


def node_len_by(node, sub: Callable[[Node], tuple[int, Optional[int]]]) -> tuple[int, Optional[int]]:
    """:func:`node_len`, with ``sub`` the same for the node's parts (so a caller may memoise it)."""
    kind = node[0]
    if kind == "set":
        return (1, 1) if node[1] else (0, 0)
    if kind in ("bol", "eol"):
        return 0, 0
    hi: Optional[int]
    if kind == "seq":
        lo, hi = 0, 0
        for it in node[1]:
            a, b = sub(it)
            lo += a
            hi = None if (hi is None or b is None) else hi + b
        return lo, hi
    if kind == "alt":
        ls = [sub(b) for b in node[1]]
        lo = min(a for a, _ in ls)
        highs = [b for _, b in ls]
        hi = None if any(b is None for b in highs) else max(b for b in highs if b is not None)
        return lo, hi
    if kind == "rep":
        a, b = sub(node[1])
        lo = a * node[2]
        if node[3] is None:
            hi = None if (b is None or b > 0) else 0
        else:
            hi = None if b is None else b * node[3]
        return lo, hi
    raise ValueError(kind)


# ---------------------------------------------------------------------------
# emission over JSON string content

_META = set("\\.+*?()|[]{}^$#&-~")
_CLASS_META = set("\\[]^-&~")

_JSON_SHORT = {0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t", 0x22: '\\"', 0x5C: "\\\\"}


def _cp_text(cp: int, in_class: bool) -> str:
    ch = chr(cp)
    if cp < 0x20 or cp == 0x7F:
        return "\\x%02x" % cp
    if cp >= 0x80:
        if cp <= 0xFFFF:
            return "\\u%04x" % cp
        return "\\U%08x" % cp
    if in_class:
        return "\\" + ch if ch in _CLASS_META else ch
    return "\\" + ch if ch in _META else ch


def escape_literal(text: str) -> str:
    """Regex that matches exactly ``text`` (used for already-encoded JSON text)."""
    return "".join(_cp_text(ord(c), False) for c in text)


def json_escape_char(cp: int) -> str:
    """How json.dumps(ensure_ascii=False) spells a code point inside a string."""
    if cp in _JSON_SHORT:
        return _JSON_SHORT[cp]
    if cp < 0x20:
        return "\\u%04x" % cp
    return chr(cp)


def _literal(s: str) -> str:
    return "".join(escape_literal(json_escape_char(ord(c))) for c in s)


_literal_memo = functools.lru_cache(maxsize=8192)(_literal)


def literal(s: str) -> str:
    """Regex for the JSON-encoded content of the decoded string ``s`` (canonical spelling).
    Remembered for strings up to :data:`MEMO_TEXT_CHARS` (the most recent 8,192): every compile of
    a schema (the first, the size-cap retries, the grammars) spells the same property names."""
    return _literal_memo(s) if len(s) <= MEMO_TEXT_CHARS else _literal(s)


RAW_EXCLUDED = norm([(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)])
_RAW_UNIVERSE = complement(RAW_EXCLUDED)


def _class_text(r: Ranges) -> str:
    parts = []
    for a, b in r:
        if a == b:
            parts.append(_cp_text(a, True))
        elif b == a + 1:
            parts.append(_cp_text(a, True) + _cp_text(b, True))
        else:
            parts.append(_cp_text(a, True) + "-" + _cp_text(b, True))
    return "".join(parts)


def emit_set(r: Ranges) -> Optional[str]:
    """Regex for one code point out of ``r``, JSON-encoded.  None if r is empty."""
    if not r:
        return None
    raw = intersect(r, _RAW_UNIVERSE)
    alts: list[str] = []
    if raw:
        if len(raw) == 1 and raw[0][0] == raw[0][1]:
            alts.append(_cp_text(raw[0][0], False))
        else:
            comp = subtract(_RAW_UNIVERSE, raw)
            pos = "[" + _class_text(raw) + "]"
            # a negated class, relative to the raw universe, when shorter
            negt = "[^" + _class_text(union(comp, RAW_EXCLUDED)) + "]"
            alts.append(negt if len(negt) < len(pos) else pos)
    esc = intersect(r, RAW_EXCLUDED)
    short = []
    by_hi: dict[int, list[int]] = {0: [], 1: []}
    for a, b in esc:
        for cp in range(a, b + 1):
            if cp in (0x22, 0x5C):
                short.append(chr(cp))
            elif cp in _JSON_SHORT:
                short.append(_JSON_SHORT[cp][1])
            else:
                by_hi[cp >> 4].append(cp & 15)
    if short:
        cls = "".join(("\\" + c) if c in _CLASS_META else c for c in sorted(short))
        alts.append("\\\\" + (cls if len(short) == 1 else "[" + cls + "]"))
    for h, lows in by_hi.items():
        if not lows:
            continue
        alts.append("\\\\u00%d" % h + _hex_class(lows))
    if len(alts) == 1:
        return alts[0]
    return "(" + "|".join(alts) + ")"


def _hex_class(lows: list) -> str:
    """Class of hex digits (lower case) for the given nibble values."""
    lows = sorted(set(lows))
    if len(lows) == 1:
        return "0123456789abcdef"[lows[0]]
    runs = []
    start = prev = lows[0]
    for x in lows[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        runs.append((start, prev))
        if x is not None:
            start = prev = x
    out = ""
    for a, b in runs:
        # do not let a range cross from '9' to 'a'
        parts = [(a, b)] if (b <= 9 or a >= 10) else [(a, 9), (10, b)]
        for x, y in parts:
            cx, cy = "0123456789abcdef"[x], "0123456789abcdef"[y]
            out += cx if x == y else (cx + cy if y == x + 1 else cx + "-" + cy)
    return "[" + out + "]"


class Unsatisfiable(Exception):
    pass


def emit(node) -> Optional[str]:
    """Regex for a node whose anchors were already removed.  None = matches nothing."""
    kind = node[0]
    if kind == "set":
        return emit_set(node[1])
    if kind == "seq":
        out = []
        for it in node[1]:
            r = emit(it)
            if r is None:
                return None
            out.append(r)
        return _seq_join(out)
    if kind == "alt":
        rs = [r for r in (emit(b) for b in node[1]) if r is not None]
        if not rs:
            return None
        rs = list(dict.fromkeys(rs))
        if len(rs) == 1:
            return rs[0]
        return "(" + "|".join(rs) + ")"
    if kind == "rep":
        inner = emit(node[1])
        lo, hi = node[2], node[3]
        if inner is None:
            return "" if lo == 0 else None
        if hi == 0:
            return ""
        if inner == "":
            return ""
        g = inner if is_atom(inner) else "(" + inner + ")"
        if (lo, hi) == (0, None):
            return g + "*"
        if (lo, hi) == (1, None):
            return g + "+"
        if (lo, hi) == (0, 1):
            return g + "?"
        if lo == hi:
            return g if lo == 1 else g + "{%d}" % lo
        if hi is None:
            return g + "{%d,}" % lo
        return g + "{%d,%d}" % (lo, hi)
    if kind in ("bol", "eol"):
        raise PatternError("anchor in an unsupported position")
    raise ValueError(kind)


def _seq_join(parts: list[str]) -> str:
    parts = [p for p in parts if p != ""]
    if len(parts) == 1:
        return parts[0]
    return "".join(p if _is_single(p) else "(" + p + ")" for p in parts)


def _no_top_alt(p: str) -> bool:
    return top_level_bar(p) is False


def _memo_short_texts(scan: Callable[[str], bool]) -> Callable[[str], bool]:
    """``scan`` memoised for texts up to MEMO_TEXT_CHARS (the most recent 8,192), plain above that.

    The emitters ask the same question of the same short pieces many times; a long text is asked
    about a few times and scanning it costs what hashing it costs, while keeping it would let one
    large schema pin megabytes in the process until it is evicted."""
    memo = functools.lru_cache(maxsize=8192)(scan)

    @functools.wraps(scan)
    def scan_text(p: str) -> bool:
        if len(p) <= MEMO_TEXT_CHARS:
            return memo(p)
        kept = _LONG_ANSWERS.get()
        return scan(p) if kept is None else kept.answer(scan, p)

    return scan_text


#: the answers the text scanners keep for long texts, at most this many texts and characters (then
#: they start over)
LONG_MEMO_TEXTS = 512
LONG_MEMO_CHARS = 8_000_000


@dataclasses.dataclass
class LongAnswers:
    """The text scanners' answers for texts over MEMO_TEXT_CHARS, kept within one compile (see
    :func:`long_text_memo`): a size-capped schema compiles several times and a grammar build
    re-reads its rules, asking again about the same long regex texts. Looking one up hashes it
    once (str caches its hash) and compares equal texts with a memcmp, against two regex passes
    and a Python sum for a scan."""

    kept: dict[tuple[str, str], bool] = dataclasses.field(default_factory=dict)
    chars: int = 0

    def answer(self, scan: Callable[[str], bool], p: str) -> bool:
        """scan(p), from what was kept when this compile asked it before."""
        key = (scan.__name__, p)
        hit = self.kept.get(key)
        if hit is None:
            hit = scan(p)
            if len(p) > LONG_MEMO_CHARS:
                return hit  # scanned, not kept
            if len(self.kept) >= LONG_MEMO_TEXTS or self.chars + len(p) > LONG_MEMO_CHARS:
                self.kept.clear()
                self.chars = 0
            self.kept[key] = hit
            self.chars += len(p)
        return hit


#: the long-text answers of the compile running in this thread/context (None: not kept)
_LONG_ANSWERS: ContextVar[Optional[LongAnswers]] = ContextVar("_LONG_ANSWERS", default=None)


@contextlib.contextmanager
def long_text_memo() -> Iterator[LongAnswers]:
    """Keep the text scanners' answers for long texts until the outermost such block ends (one
    compile): nothing a request fed stays in the process after it."""
    kept = _LONG_ANSWERS.get()
    if kept is not None:
        yield kept
        return
    kept = LongAnswers()
    token = _LONG_ANSWERS.set(kept)
    try:
        yield kept
    finally:
        _LONG_ANSWERS.reset(token)


#: the characters the text scanners below act on, an escape (a backslash and the character it
#: escapes) as one token: scanning these tokens with ``re`` (C) visits what the character loop
#: that reads every character would act on, in the same order
_SCAN_TOKENS = re.compile(r"\\.|[\[\]()|]", re.S)


def _group_tokens(p: str) -> Iterator[tuple[str, int, int]]:
    """The tokens of p the text scanners below act on, in order, each with the group depth after
    it and its offset: outside character classes every ``(``, ``)``, ``|``, ``[`` (a class opens)
    and escape; inside a class only the ``]`` that closes it."""
    depth = 0
    in_cls = False
    for m in _SCAN_TOKENS.finditer(p):
        c = m.group()
        if in_cls:
            if c == "]":
                in_cls = False
                yield c, depth, m.start()
            continue
        if c == "[":
            in_cls = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        yield c, depth, m.start()


@_memo_short_texts
def top_level_bar(p: str) -> bool:
    """True if p has a ``|`` outside every group and character class."""
    if "|" not in p:
        return False
    return any(c == "|" and depth == 0 for c, depth, _ in _group_tokens(p))


@_memo_short_texts
def is_closed(p: str) -> bool:
    """True if p leaves the text scanners (:func:`is_atom`, :func:`top_level_bar`) as it found
    them: every group it opens closed, none closed that it did not open, no character class left
    open and no escape cut off at its end. The scanners then read a concatenation of such texts
    part by part (no token spans two parts; each part starts at the depth the one before it
    started at), so ``"(" + p + ")"`` is an atom without a top-level ``|``."""
    if (len(p) - len(p.rstrip("\\"))) % 2:
        return False  # an escape that a following text would complete
    bare, left_open = _outside_classes(p)
    if left_open:
        return False
    low, end = _depths(bare)
    return low >= 0 and end == 0


#: an escape (a backslash and the character it escapes)
_ESCAPE = re.compile(r"\\.", re.S)
#: a character class once escapes are gone: it ends at the first ``]``
_CLASS = re.compile(r"\[[^\]]*\]")
_NOT_PAREN = re.compile(r"[^()]+")
_PAREN_STEP = {"(": 1, ")": -1}


def _outside_classes(p: str) -> tuple[str, bool]:
    """p without its escapes and its character classes, cut at a class left open (everything after
    its ``[`` is inside it), and whether one was: the ``(`` and ``)`` left are the group tokens of
    :func:`_group_tokens`, in order. All in ``re``."""
    bare = _CLASS.sub("", _ESCAPE.sub("", p))
    cut = bare.find("[")
    return (bare, False) if cut < 0 else (bare[:cut], True)


def _depths(bare: str) -> tuple[int, int]:
    """The lowest group depth after a ``(``/``)`` of ``bare`` and the depth at its end (0, 0
    without any), by C-level iteration (no Python step per token)."""
    parens = _NOT_PAREN.sub("", bare)
    if not parens:
        return 0, 0
    depths = list(itertools.accumulate(map(_PAREN_STEP.__getitem__, parens)))
    return min(depths), depths[-1]


def _is_single(p: str) -> bool:
    """True if p can be concatenated without grouping (no top-level '|')."""
    return not top_level_bar(p)


@_memo_short_texts
def is_atom(p: str) -> bool:
    """True if a quantifier may directly follow p."""
    if len(p) == 1 and p not in _META:
        return True
    if len(p) == 2 and p[0] == "\\":
        return True
    if p.startswith("\\u") and len(p) == 6 or p.startswith("\\x") and len(p) == 4:
        return True
    if p.startswith("\\U") and len(p) == 10:
        return True
    # a single bracket class (the first "]" closes it) or a single parenthesised group
    last = len(p) - 1
    if p.startswith("[") and p.endswith("]"):
        return all(c != "]" or start == last for c, _, start in _group_tokens(p))
    if p.startswith("(") and p.endswith(")"):
        # no ")" before the last character may close the first "(": the depths in p less its last
        # character stay >= 1 (that character, a ")" or escaped or inside a class, closes nothing
        # before it; a class left open in p[:-1] hides every token after its "[")
        return _depths(_outside_classes(p[:-1])[0])[0] >= 1
    return False


# ---------------------------------------------------------------------------
# anchors and search semantics


def _strip_anchor(node, which: str):
    """Remove a leading (which='bol') or trailing ('eol') anchor that every path through
    ``node`` starts/ends with.  Returns (node_without_anchor, True) or (node, False)."""
    kind = node[0]
    if kind == which:
        return ("seq", []), True
    if kind == "seq":
        items = list(node[1])
        # skip empty-width sequences? keep simple: look at the first/last item
        if not items:
            return node, False
        idx = 0 if which == "bol" else len(items) - 1
        sub, ok = _strip_anchor(items[idx], which)
        if ok:
            items[idx] = sub
            return ("seq", items), True
        return node, False
    if kind == "alt":
        new = []
        for b in node[1]:
            sub, ok = _strip_anchor(b, which)
            if not ok:
                return node, False
            new.append(sub)
        return ("alt", new), True
    return node, False


def _has_anchor(node) -> bool:
    kind = node[0]
    if kind in ("bol", "eol"):
        return True
    if kind in ("seq", "alt"):
        return any(_has_anchor(x) for x in node[1])
    if kind == "rep":
        return _has_anchor(node[1])
    return False


def _branches(node):
    """Top-level alternatives of a pattern, looking through wrapping groups."""
    while node[0] == "seq" and len(node[1]) == 1:
        node = node[1][0]
    if node[0] == "alt":
        out = []
        for b in node[1]:
            out.extend(_branches(b))
        return out
    return [node]


def anchored_branches(node):
    """Split a parsed pattern into branches (node, start_anchored, end_anchored) without
    any remaining anchors.  Raises PatternError when an anchor sits somewhere else."""
    out = []
    for b in _branches(node):
        b2, sa = _strip_anchor(b, "bol")
        b3, ea = _strip_anchor(b2, "eol")
        # allow repeated anchors like ^^ (rare); strip again
        while True:
            b4, more = _strip_anchor(b3, "bol")
            if not more:
                break
            b3 = b4
        if _has_anchor(b3):
            raise PatternError("anchor in a position that is not supported")
        out.append((b3, sa, ea))
    return out


def to_content_regex(pattern: str, any_char: str) -> Optional[str]:
    """Regex over JSON string content for strings that *contain* a match of ``pattern``.

    ``any_char`` is the regex for one (any) encoded character, used to pad unanchored
    ends.  Returns None when no string matches.
    """
    node = parse(pattern)
    outs = []
    pad = "(" + any_char + ")*" if not is_atom(any_char) else any_char + "*"
    for b, sa, ea in anchored_branches(node):
        body = emit(b)
        if body is None:
            continue
        s = ""
        if not sa:
            s += pad
        s += body if _is_single(body) else "(" + body + ")"
        if not ea:
            s += pad
        outs.append(s)
    if not outs:
        return None
    outs = list(dict.fromkeys(outs))
    if len(outs) == 1:
        return outs[0]
    return "(" + "|".join(outs) + ")"


def search_regex(pattern: str) -> str:
    """Exported for tests: the content regex with a generic canonical character."""
    any_char = emit_set(ANY_RANGES)
    r = None if any_char is None else to_content_regex(pattern, any_char)
    if r is None:
        raise PatternError("pattern matches no string")
    return r
