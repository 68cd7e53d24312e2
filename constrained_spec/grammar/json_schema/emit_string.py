"""Emitter of strings: lengths, ``pattern``/``format`` (ECMA patterns as content regexes, with
lengths folded in), intersections of patterns, and strings other than a finite set."""

from __future__ import annotations

import functools
import json
from typing import Any, Literal, Optional, Union

from constrained_spec.grammar import ecma_regex as ecma
from constrained_spec.grammar.json_schema.base import CompilerBase
from constrained_spec.grammar.json_schema.content_dfa import Dfa, DfaTooLarge, to_node
from constrained_spec.grammar.json_schema.emit_lark import placeholder
from constrained_spec.grammar.json_schema.ir import EMPTY, Flat
from constrained_spec.grammar.json_schema.length_cut import Inexact, cut
from constrained_spec.grammar.json_schema.negation import (
    Recipe,
    negation_keyword,
    own_strings_dfa,
    recipe_dfa,
    remembered_failure,
)
from constrained_spec.grammar.json_schema.regex_ops import deriv, finite_strings, grow, nullable_node, shrink, trim_unanchored
from constrained_spec.grammar.json_schema.regex_text import alt, group, rep

__all__ = ["StringEmitter", "LENGTH_CUT_CHARS"]

#: longest regex an exact length cut of one pattern may take (past it, the cut counts as inexact)
LENGTH_CUT_CHARS = 8_000

#: a node of a trie of words: next character -> node; the key ``""`` marks the end of a word
Trie = dict[str, "Trie"]
#: a ``pattern`` or ``format`` of a string: (ECMA pattern, JSON pointer, keyword), as ``Flat.patterns``
Pattern = tuple[str, str, str]


@functools.lru_cache(maxsize=4096)
def _other_chars_text(universe: ecma.Ranges, kids: str) -> Optional[str]:
    """The regex of one character of ``universe`` other than the characters of ``kids``
    (:func:`~constrained_spec.grammar.ecma_regex.emit_set`; None: none left). Remembered (the most
    recent 4,096): the tries of many property names ask about the same few letters again and again."""
    return ecma.emit_set(ecma.subtract(universe, ecma.norm([(ord(k), ord(k)) for k in kids])))


#: the characters :meth:`StringEmitter.content_excluding` writes flat in one run of a trie: a run
#: of n nested takes about 6 characters of grouping per character, flat its prefixes again (about
#: n * n / 2): at 6 the two are about the same size, and the run nests one group deep, not 6
CHAIN_CHARS = 6
#: the shortest run it writes flat (a shorter one nests as before)
CHAIN_MIN_CHARS = 6


def _chain(node: Trie) -> list[tuple[str, Trie]]:
    """The run of trie nodes from ``node`` that end no word and have one child each (at most
    :data:`CHAIN_CHARS`): (child character, the node it leads to) per node."""
    run: list[tuple[str, Trie]] = []
    while len(run) < CHAIN_CHARS and "" not in node and len(node) == 1:
        k, node = next(iter(node.items()))
        run.append((k, node))
    return run


@functools.lru_cache(maxsize=256)
def _dfa_strings(patterns: tuple[str, ...], lo: int, hi: Optional[int], minus_words: tuple[str, ...],
                 minus: tuple[Recipe, ...]) -> Optional[str]:
    """The content regex :meth:`StringEmitter.strings_by_dfa` builds, remembered by the recipes of
    what it subtracts (the most recent 256; None: no string)."""
    node = to_node(own_strings_dfa(lo, hi, list(patterns), list(minus_words), [recipe_dfa(m) for m in minus]))
    return None if node is None else ecma.emit(node)


class StringEmitter(CompilerBase):
    """Strings: lengths, patterns and formats, excluded constants."""

    def compile_string(self, flat: Flat) -> Optional[str]:
        """The regex of the strings (quotes included) of flat."""
        lo, hi = flat.min_len, flat.max_len
        if hi is not None and hi < lo:
            return EMPTY
        excluded = [(c, [v for v in vals if isinstance(v, str)]) for c, vals in flat.excluded]
        excluded = [(c, vals) for c, vals in excluded if vals]
        pats = flat.patterns
        words = sorted({v for _, vals in excluded for v in vals})
        if flat.str_not or (excluded and (pats or lo > 0 or hi is not None)):
            kw, ptr = negation_keyword(flat.str_not[0][0].ptr if flat.str_not else excluded[0][0].ptr)
            by_dfa = self.strings_by_dfa([p for p, _, _ in pats], lo, hi, words, [d for _, d in flat.str_not], ptr, kw)
            if by_dfa is not False:
                return by_dfa
            f2 = flat.copy()  # recorded as unenforced: the strings without the negation
            f2.str_not, f2.excluded = [], []
            return self.compile_string(f2)
        if excluded:
            if pats:
                self.unsupported("not", excluded[0][0].ptr, "excluding constants from patterned strings is not supported")
            else:
                strs: set[str] = set()
                for _, vals in excluded:
                    strs |= {v for v in vals if isinstance(v, str)}
                body = self.content_excluding(sorted(strs), lo, hi)
                return None if body is None else '"' + body + '"'
        if not pats:
            return '"' + rep(self.str_char, lo, hi) + '"'
        mark = len(self.length_narrowed)
        out = self._patterned(pats, lo, hi)
        if len(self.length_narrowed) > mark and self.grammar_mode:
            wide = self._patterned(pats, 0, None)
            if wide is not None and len(pats) == 1:
                leaf: dict[str, Any] = {"type": "string", "pattern": pats[0][0], "minLength": lo}
                if hi is not None:
                    leaf["maxLength"] = hi
                return self.exact_string_rule(out, wide, leaf)
        return out

    def strings_by_dfa(self, patterns: list[str], lo: int, hi: Optional[int], minus_words: list[str],
                       minus: list[Dfa], ptr: str, keyword: str) -> Union[str, None, Literal[False]]:
        """The regex (quotes included) of the strings lo..hi long that match every pattern and are
        none of ``minus_words`` nor in any ``minus`` language, through a bounded DFA over decoded
        code points (:mod:`.content_dfa`; spelled canonically); None where there is none. Past the
        DFA's bounds ``keyword`` is refused at ``ptr`` (or recorded, and then this answers False)."""
        keys = tuple(d.key for d in minus)
        if all(keys):
            try:
                args = (tuple(patterns), lo, hi, tuple(sorted(set(minus_words))), keys)
                body = remembered_failure(("strings", args), _dfa_strings, *args)
            except DfaTooLarge as e:
                self.unsupported(keyword, ptr, f"the string language needs a DFA past its bounds ({e})")
                return False
            except ecma.PatternError as e:
                self.refuse(keyword, ptr, str(e))
        else:
            try:
                node = to_node(own_strings_dfa(lo, hi, patterns, minus_words, minus))
            except DfaTooLarge as e:
                self.unsupported(keyword, ptr, f"the string language needs a DFA past its bounds ({e})")
                return False
            except ecma.PatternError as e:
                self.refuse(keyword, ptr, str(e))
            body = None if node is None else ecma.emit(node)
        return EMPTY if body is None else self.check_size('"' + body + '"')

    def exact_string_rule(self, narrow: Optional[str], wide: str, leaf: dict[str, Any]) -> str:
        """Grammar mode: a placeholder for a rule that reads one string of the schema ``leaf``
        (llguidance's own ``%json`` string: pattern and length bounds intersected exactly)."""
        n = len(self.rule_of)
        self.rule_of[("exact-string", n)] = n
        self.rule_bodies[n] = narrow
        self.and_lexemes[n] = (wide, json.dumps(leaf, ensure_ascii=True, sort_keys=True))
        return placeholder(n)

    def _patterned(self, pats: list[Pattern], lo: int, hi: Optional[int]) -> Optional[str]:
        """The regex (quotes included) of the strings lo..hi long that match every pattern."""
        if len(pats) > 1:
            body = self.intersect_patterns(pats, lo, hi)
            if body is not False:
                return EMPTY if body is None else '"' + body + '"'
            kws = [k for _, _, k in pats]
            kw = "pattern" if "pattern" in kws else "format"
            by_dfa = self.strings_by_dfa([p for p, _, _ in pats], lo, hi, [], [], pats[1][1], kw)
            if by_dfa is not False:
                return by_dfa
            self.unsupported(kw, pats[1][1], "several patterns/formats on one string need a regex intersection")
            pats = pats[:1]
        p, ptr, kw = pats[0]
        try:
            body = self.pattern_content(p, lo, hi, ptr)
        except ecma.PatternError as e:
            self.refuse(kw, ptr, str(e))
        if body is None:
            return EMPTY
        return '"' + body + '"'

    def intersect_patterns(self, pats: list[Pattern], lo: int, hi: Optional[int]) -> Union[str, None, Literal[False]]:
        """Content regex for strings matching all patterns, where all but one of them
        only fix a finite set of prefixes (``^(https?|file)://``) or are a finite set of
        whole strings.  Returns False when not possible, None when empty."""
        finite: list[tuple[Optional[str], list[str], str]] = []  # (kind "whole"/"prefix", words, pattern)
        others: list[Pattern] = []
        for p, ptr, kw in pats:
            try:
                brs = ecma.anchored_branches(ecma.parse(p))
            except ecma.PatternError:
                return False
            words: list[str] = []
            is_finite = True
            kind: Optional[str] = None
            for b, sa, ea in brs:
                ws = finite_strings(b, 32)
                if ws is None or not sa:
                    is_finite = False
                    break
                k = "whole" if ea else "prefix"
                if kind not in (None, k):
                    is_finite = False
                    break
                kind = k
                words += ws
            if not is_finite:
                others.append((p, ptr, kw))
            else:
                finite.append((kind, words, p))
        if len(others) > 1 or not finite:
            return False
        if others:
            onode = ecma.parse(others[0][0])
            anyrep = ("rep", ("set", ecma.ANY_RANGES), 0, None)
            alts = []
            for b, sa, ea in ecma.anchored_branches(onode):
                alts.append(("seq", ([] if sa else [anyrep]) + [b] + ([] if ea else [anyrep])))
            base = alts[0] if len(alts) == 1 else ("alt", alts)
        else:
            base = ("seq", [("rep", ("set", ecma.ANY_RANGES), 0, None)])
        # intersect the finite constraints one after the other
        outs: list[tuple[str, ecma.Node]] = [("", base)]
        for kind, words, _p in finite:
            new: list[tuple[str, ecma.Node]] = []
            for prefix, node in outs:
                for w in dict.fromkeys(words):
                    d: Optional[ecma.Node] = node
                    for ch in w:
                        if d is None:
                            break
                        d = deriv(d, ord(ch))
                    if d is None:
                        continue
                    if kind == "whole":
                        if nullable_node(d):
                            new.append((prefix + w, ("seq", [])))
                    else:
                        new.append((prefix + w, d))
            outs = new
            if len(outs) > 64:
                return False
        res: list[Optional[str]] = []
        for prefix, node in outs:
            full = ("seq", [("seq", [("set", ((ord(c), ord(c)),)) for c in prefix]), node])
            shaped = self.constrain_length(full, lo, hi, pats[0][1])
            if shaped is None:
                continue
            r = ecma.emit(shaped)
            if r is not None:
                res.append(r)
        return alt(res)

    def pattern_content(self, pattern: str, lo: int, hi: Optional[int], ptr: str) -> Optional[str]:
        """String content (no quotes) matching the ECMA pattern (search semantics), lo..hi long."""
        node = ecma.parse(pattern)
        anyrep = ("rep", ("set", ecma.ANY_RANGES), 0, None)
        outs: list[Optional[str]] = []
        for b, sa, ea in ecma.anchored_branches(node):
            b = trim_unanchored(b, sa, ea)
            if b is None:
                # the pattern matches the empty string somewhere: every string qualifies
                b, sa, ea = ("seq", []), True, False
            if not sa and not ea and hi is not None:
                bmin, bmax = ecma.node_len(b)
                if bmax is not None and bmin >= lo and 0 <= hi - bmax <= 12:
                    # the match may sit anywhere: enumerate the prefix length
                    room = hi - bmax
                    for i in range(room + 1):
                        seq = ("seq", [("rep", anyrep[1], i, i), b, ("rep", anyrep[1], 0, room - i)])
                        r = ecma.emit(seq)
                        if r is not None:
                            outs.append(r)
                    continue
            items = ([] if sa else [anyrep]) + [b] + ([] if ea else [anyrep])
            shaped = self.constrain_length(("seq", items), lo, hi, ptr)
            if shaped is None:
                continue
            r = ecma.emit(shaped)
            if r is not None:
                outs.append(r)
        return alt(outs)

    def constrain_length(self, seq: ecma.Node, lo: int, hi: Optional[int], ptr: str) -> Optional[ecma.Node]:
        """Restrict a pattern node so that every match has lo <= length <= hi.

        Exact where :func:`~.length_cut.cut` can write the window into the pattern within its
        budget (and the result stays under :data:`LENGTH_CUT_CHARS`). Otherwise the old sound
        shaping: upper bounds shrink the node (a sub-language), lower bounds raise the counts of
        fixed-width repetitions; that is a narrowing, so it is recorded in ``length_narrowed``
        (the caller gives the grammar an exact lexeme, pattern ``&`` length, where it can) and
        raises (or records) 'minLength'/'maxLength' where not even that is possible."""
        mn, mx = ecma.node_len(seq)
        if mn >= lo and (hi is None or (mx is not None and mx <= hi)):
            return seq
        if hi is not None and mn > hi:
            return None
        if mx is not None and mx < lo:
            return None
        try:
            exact = cut(seq, lo, hi)
            if exact is not None and len(ecma.emit(exact) or "") > LENGTH_CUT_CHARS:
                raise Inexact()
            return exact
        except Inexact:
            self.length_narrowed.append(ptr or "#")
        node = seq
        if hi is not None and (mx is None or mx > hi):
            shrunk = shrink(node, hi)
            if shrunk is None:
                return None
            node = shrunk
        mn, mx = ecma.node_len(node)
        if mn < lo:
            grown = grow(node, lo)
            if grown is None:
                self.unsupported("minLength", ptr, "pattern and minLength cannot be combined exactly")
                return seq
            node = grown
            mn, mx = ecma.node_len(node)
            if mn < lo:
                self.unsupported("minLength", ptr, "pattern and minLength cannot be combined exactly")
        if hi is not None and (mx is None or mx > hi):
            self.unsupported("maxLength", ptr, "pattern and maxLength cannot be combined exactly")
        return node

    def content_excluding(self, words: list[str], lo: int, hi: Optional[int],
                          ranges: Optional[ecma.Ranges] = None) -> Optional[str]:
        """Canonical string content not equal to any of ``words`` (lengths in [lo, hi]),
        made of characters in ``ranges`` (all characters by default)."""
        universe = ecma.ANY_RANGES if ranges is None else ranges
        c = self.canon_char if ranges is None else ecma.emit_set(ranges)
        if c is None:
            raise ValueError("content_excluding needs a non-empty set of characters")
        words = [w for w in words if all(ecma.contains(universe, ord(ch)) for ch in w)]
        trie: Trie = {}
        for w in words:
            node = trie
            for ch in w:
                node = node.setdefault(ch, {})
            node[""] = {}
        if hi is not None and hi < 64 or lo > 0:
            # length limits and exclusions together: enumerate by trie depth is complex;
            # only allow when no excluded word fits the length window
            if not any(lo <= len(w) and (hi is None or len(w) <= hi) for w in words):
                return rep(c, lo, hi)
            self.unsupported("not", "", "excluding strings together with length bounds is not supported")
            return rep(c, lo, hi)

        def build(node: Trie, depth: int) -> Optional[str]:
            # strings that, from this trie node on, are not a word
            self.tick()
            chain = _chain(node)
            if len(chain) >= CHAIN_MIN_CHARS:
                return build_chain(chain, depth)
            alts = []
            kids = [k for k in node if k != ""]
            o = _other_chars_text(universe, "".join(sorted(kids)))
            if o is not None:
                alts.append(group(o) + group(c) + "*")
            for k in kids:
                sub = build(node[k], depth + 1)
                if sub is None:
                    continue
                alts.append(ecma.literal(k) + group(sub) if sub else ecma.literal(k))
            body = "|".join(alts)
            if "" in node:
                # the word ends here: need at least one more character
                return "(" + body + ")" if alts else None
            return "(" + body + ")?" if alts else ""

        def build_chain(chain: list[tuple[str, Trie]], depth: int) -> Optional[str]:
            # a run of nodes that end no word and have one child each, written flat: each place
            # where a string may leave the run (a prefix of it, then another character or the end)
            # is one branch, so the groups nest once per run instead of once per character
            # (``regex_nesting``: a long property name nested past the regex parser's limit)
            alts = []
            text = ""
            for k, _ in chain:
                o = _other_chars_text(universe, k)
                away = None if o is None else group(o) + group(c) + "*"
                if not text:
                    if away is not None:
                        alts.append(away)
                else:
                    alts.append(ecma.literal(text) + ("(" + away + ")?" if away is not None else ""))
                text += k
            sub = build(chain[-1][1], depth + len(chain))
            if sub is not None:
                alts.append(ecma.literal(text) + group(sub) if sub else ecma.literal(text))
            return "(" + "|".join(alts) + ")?" if alts else ""

        r = build(trie, 0)
        return r
