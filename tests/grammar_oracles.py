"""Slow, obviously-correct references for grammar masks, computed without llguidance or our automata.

:class:`LarkOracle` answers, for a Lark grammar, whether a text is a *viable prefix* (some
continuation makes it a sentence) and whether it is *complete* (a sentence). It never uses lark's
lexer: it tries every way of cutting the text into terminals (each terminal's own regex, so every
match length, not only the longest) and feeds each cut as tokens to lark's LALR(1) interactive
parser, which accepts a token exactly when the tokens so far remain a prefix of some sentence (the
correct-prefix property of LR parsing; our grammars have no unproductive rules). The text's last,
unfinished piece is checked with the ``regex`` package's partial matching against the terminals the
parser accepts there. So the language is "every concatenation of terminal strings (ignored text
allowed between them) that spells a sentence", the grammar's language independent of any lexing
policy. For grammars whose terminals never compete for the same text (or where the next character
settles which one it was), this is also the language of lark's Earley parser (the project's judge)
and of a longest-match lexer; :meth:`LarkOracle.complete` checks the first claim on every text it
is asked about.

:class:`RegexOracle` answers the same questions for a regex over a finite alphabet: by enumerating
the whole language (finite regexes) or with ``regex`` partial matching (validated separately), with
texts given as bytes (a trailing incomplete UTF-8 character is viable when some character of the
alphabet completes it).
"""

from __future__ import annotations

import itertools
import json
import re
from functools import lru_cache
from typing import Any, Callable, Optional

import regex as regex_pkg
from lark import Lark, Token


def schema_disagreements(schema: dict[str, Any], regex: Optional[str], values: list[Any],
                         accepts: Callable[[Optional[re.Pattern], Any], bool]) -> list[str]:
    """The values that ``accepts`` (the compiled ``regex``; None: the empty language) judges otherwise
    than ``jsonschema`` (draft 2020-12) on ``schema``, one line each: the JSON-Schema tests' shared
    oracle, each test bringing its own ``accepts`` (which key orders of an object count)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    rx = None if regex is None else re.compile(regex)
    out = []
    for v in values:
        acc, ok = accepts(rx, v), validator.is_valid(v)
        if acc != ok:
            text = json.dumps(v, separators=(",", ":"), ensure_ascii=False)
            out.append(f"{'accepted' if acc else 'rejected'} {text} ({'valid' if ok else 'invalid'})")
    return out


def exact_or_refused_tally(schemas: Any, compile_regex: Callable[[Any], Optional[str]],
                           wrong: Callable[[Any, Optional[str]], bool], keywords: tuple[str, ...]) -> dict[str, int]:
    """Random-schema sweeps' tally: each schema compiled exactly (``wrong`` finds no disagreement),
    refused by name (``UnsupportedKeywordError`` of one of ``keywords``, with a pointer), or wrong."""
    from constrained_spec.errors import UnsupportedKeywordError

    counts = {"exact": 0, "refused": 0, "wrong": 0}
    for schema in schemas:
        try:
            regex = compile_regex(schema)
        except UnsupportedKeywordError as e:
            assert e.keyword in keywords and e.pointer, (schema, e)
            counts["refused"] += 1
            continue
        counts["wrong" if wrong(schema, regex) else "exact"] += 1
    return counts


def in_language(grammar: str, text: str) -> bool:
    """Whether lark (Earley) parses ``text`` with ``grammar``: the language oracle of the request-level tests."""
    from lark import Lark
    from lark.exceptions import LarkError

    try:
        Lark(grammar, parser="earley").parse(text)
    except LarkError:
        return False
    return True



def byte_walk(grammar: Any, text: str) -> bool:
    """Whether llguidance's matcher for ``grammar`` (a compiled grammar) accepts ``text``, fed byte by byte."""
    m = grammar.matcher()
    for b in text.encode("utf-8"):
        if not m.accepts_prefix_bytes(bytes([b])):
            return False
        m.advance(b)
    return m.is_accepting()


def rand_pattern(rng: Any, atoms: list[str], reps: list[str], depth: int = 0) -> str:
    """A random ECMA pattern over ``atoms``: concatenations, alternations and the repetitions ``reps``
    (three levels of structure at most)."""
    k = rng.randrange(6 if depth < 3 else 2)
    if k <= 1:
        return str(rng.choice(atoms))
    if k == 2:
        return rand_pattern(rng, atoms, reps, depth + 1) + rand_pattern(rng, atoms, reps, depth + 1)
    if k == 3:
        return "(" + rand_pattern(rng, atoms, reps, depth + 1) + "|" + rand_pattern(rng, atoms, reps, depth + 1) + ")"
    if k == 4:
        return "(" + rand_pattern(rng, atoms, reps, depth + 1) + ")" + str(rng.choice(reps))
    return rand_pattern(rng, atoms, reps, depth + 1)

class LarkOracle:
    """Viable-prefix and completeness reference for a Lark grammar (start rule ``start``)."""

    def __init__(self, grammar: str) -> None:
        self.grammar = grammar
        self.lalr = Lark(grammar, parser="lalr", start="start")
        self.earley = Lark(grammar, parser="earley", start="start")
        self.patterns = {t.name: regex_pkg.compile(t.pattern.to_regexp()) for t in self.lalr.terminals}
        self.ignore = tuple(self.lalr.ignore_tokens)
        self._boundary: dict[str, list] = {"": [self.lalr.parse_interactive("")]}
        self._accepts: dict[tuple, tuple[str, ...]] = {}
        self._viable: dict[str, bool] = {}
        self._complete: dict[str, bool] = {}

    @staticmethod
    def _key(ip) -> tuple:
        return tuple(ip.parser_state.state_stack)

    def _next_terminals(self, ip) -> tuple[str, ...]:
        """Terminals the parser takes next, ignored ones included (``$END`` left out)."""
        key = self._key(ip)
        hit = self._accepts.get(key)
        if hit is None:
            hit = self._accepts[key] = tuple(sorted(ip.accepts() - {"$END"})) + self.ignore
        return hit

    def boundary(self, text: str) -> list:
        """Parsers (one per distinct LR stack) whose tokens spell exactly ``text``, by every cut."""
        hit = self._boundary.get(text)
        if hit is not None:
            return hit
        found: dict[tuple, object] = {}
        for cut in range(len(text)):
            piece = text[cut:]
            for ip in self.boundary(text[:cut]):
                for name in self._next_terminals(ip):
                    if self.patterns[name].fullmatch(piece) is None:
                        continue
                    if name in self.ignore:
                        nxt = ip
                    else:
                        nxt = ip.copy()
                        nxt.feed_token(Token(name, piece))
                    found.setdefault(self._key(nxt), nxt)
        out = self._boundary[text] = list(found.values())
        return out

    def viable(self, text: str) -> bool:
        """Whether some continuation of ``text`` is a sentence."""
        hit = self._viable.get(text)
        if hit is not None:
            return hit
        ok = bool(self.boundary(text))
        for cut in range(len(text) - 1, -1, -1):
            if ok:
                break
            tail = text[cut:]
            ok = any(self.patterns[name].fullmatch(tail, partial=True) is not None
                     for ip in self.boundary(text[:cut]) for name in self._next_terminals(ip))
        self._viable[text] = ok
        return ok

    def complete(self, text: str) -> bool:
        """Whether ``text`` is a sentence; asserts that lark's Earley parser agrees."""
        hit = self._complete.get(text)
        if hit is not None:
            return hit
        ours = any("$END" in ip.accepts() for ip in self.boundary(text))
        try:
            self.earley.parse(text)
            earley = True
        except Exception:  # noqa: BLE001 - any lark error is a rejection
            earley = False
        assert ours == earley, f"reference disagrees with lark Earley on {text!r}: all-cuts LALR {ours}, Earley {earley}"
        self._complete[text] = ours
        return ours

    def viable_bytes(self, data: bytes) -> bool:
        try:
            return self.viable(data.decode("utf-8"))
        except UnicodeDecodeError:
            return False  # these grammars are ASCII

    def complete_bytes(self, data: bytes) -> bool:
        try:
            return self.complete(data.decode("utf-8"))
        except UnicodeDecodeError:
            return False


def utf8_split(data: bytes) -> tuple[str, bytes] | None:
    """``data`` as (decoded head, incomplete trailing character's bytes), or None if not UTF-8."""
    for k in range(0, min(3, len(data)) + 1):
        head, tail = data[: len(data) - k], data[len(data) - k :]
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if not tail:
            return text, b""
        need = 2 if 0xC2 <= tail[0] <= 0xDF else 3 if 0xE0 <= tail[0] <= 0xEF else 4 if 0xF0 <= tail[0] <= 0xF4 else 0
        if need > len(tail) and all(0x80 <= b <= 0xBF for b in tail[1:]):
            return text, tail
        return None
    return None


class RegexOracle:
    """Viable-prefix and full-match reference for a regex whose strings use only ``alphabet``.

    ``max_len``: the regex's longest string (a finite language): the language is enumerated over
    the alphabet and a text is viable iff it is a prefix of one of its strings. Without it, a text
    is viable iff ``regex`` partial matching says so (see the test that validates this per regex).
    """

    def __init__(self, pattern: str, alphabet: str, max_len: int | None = None) -> None:
        self.pattern = pattern
        self.alphabet = alphabet
        self.compiled = re.compile(pattern)
        self.partial = regex_pkg.compile(pattern)
        self.prefixes: set[str] | None = None
        self.language: set[str] | None = None
        if max_len is not None:
            self.language = {w for n in range(max_len + 1) for w in map("".join, itertools.product(alphabet, repeat=n))
                             if self.compiled.fullmatch(w)}
            self.prefixes = {w[:i] for w in self.language for i in range(len(w) + 1)}
        self.viable_text = lru_cache(maxsize=None)(self._viable_text)

    def _viable_text(self, text: str) -> bool:
        if self.prefixes is not None:
            return text in self.prefixes
        return self.partial.fullmatch(text, partial=True) is not None

    def viable_bytes(self, data: bytes) -> bool:
        split = utf8_split(data)
        if split is None:
            return False
        text, tail = split
        if not tail:
            return self.viable_text(text)
        return any(c.encode().startswith(tail) and self.viable_text(text + c) for c in self.alphabet)

    def complete_bytes(self, data: bytes) -> bool:
        try:
            return self.compiled.fullmatch(data.decode("utf-8")) is not None
        except UnicodeDecodeError:
            return False


# -- known engine bugs: probes that say whether a bug still reaches the code under test --------------
STALE_MASK_REASON = ("llguidance 1.9.1: after rollback, a mask computed without one in between can be stale (the mask of the "
                     "rolled-back position); the decoder can then sample a forbidden token (GrammarError) or miss an allowed one")


def lazy_matcher_stale_mask() -> bool:
    """True while ``LazyMatcher`` shows llguidance's stale mask after rollback (minimal repro).

    Grammar ``start: item*`` / ``item: "(" item* ")"``, tokens ``(``, ``)``, ``))``: advance "(((",
    compute the mask, roll back one token, advance ")": at "(()" the mask must not allow "))"
    (it would close a bracket that is not open). The decode loop does exactly this: masks are
    computed at every drafted position, the matcher rolls back to the kept prefix and takes the
    verifier's token.
    """
    from constrained_spec.grammar.backends.llguidance import compile_grammar
    from constrained_spec.grammar.vocab import TokenVocabulary

    vocab = TokenVocabulary(tokens={0: b"(", 1: b")", 2: b"))"}, eos_token_ids=(3,), size=4)
    grammar = compile_grammar("lark", 'start: item*\nitem: "(" item* ")"\n', vocab)
    m = grammar.matcher()
    for t in (0, 0, 0):
        m.advance(t)
    m.allowed_ids()
    m.rollback(2)
    m.advance(1)
    return 2 in m.allowed_ids().tolist()
