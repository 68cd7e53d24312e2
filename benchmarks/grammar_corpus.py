"""Public Lark grammars (``../shared/data/grammars``) through lark and through the lazy engine (llguidance).

For every ``.lark`` file under the data folder (lark's own grammars and examples, SynCode's and
outlines' grammars):

* does ``lark`` load it (Earley, its ``start`` rule, or its first rule where it has none; relative
  ``%import .file.rule`` resolved from the file's folder)?
* does :func:`constrained_spec.grammar.backends.llguidance.compile_grammar` compile it, and if not, what does the
  :class:`GrammarError` say?  Where the only refusal is a rule or terminal priority (``rule.2:``),
  a variant with the priorities removed is tried as well: priorities never change the language
  lark's Earley parser accepts (they only pick among parses; the test checks lark's verdicts agree).
* samples: outlines' ``cfg_samples`` (as the files are, and without their final newline) and a few
  hand-written JSON, arithmetic and SQL texts (:data:`HAND_SAMPLES`). Every sample is tried on every
  grammar that both engines load: lark decides whether it belongs to the language. A real
  tokenizer's encoding of the sample is fed token by token to the lazy matcher; it must accept the
  texts lark accepts (every token allowed, accepting at the end) and refuse the others.
* mutations (a character deleted, inserted or replaced; seeded) of the samples lark accepts: where
  lark rejects one, the matcher must reject it too, and where the grammar is LALR (lark's LALR parser
  accepts every sample its Earley parser accepts) no later than lark's LALR interactive parser knows
  the text is dead (:func:`lalr_error_byte`: where lark's error starts, moved past what is still a
  prefix of a token it could take there): the refused token must start at or before that byte;
  failing at the end (not accepting) counts as position len(text).
* every disagreement is classified by :meth:`Corpus.classify` into one of :data:`REASONS`, checked on
  the text itself, or "unexplained".

``python benchmarks/grammar_corpus.py [--data DIR] [--tokenizers gpt-2,qwen2,llama-spm]`` prints per
grammar: loads in lark, compiles in llguidance (or the refusal), samples passing, the totals, the
disagreements with lark, and the mask time p50/p99 (µs) along the accepted samples' token paths on
the qwen2 vocabulary (cold: a fresh matcher per sample). ``tests/grammar/test_external_grammars.py``
asserts on the same machinery.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import lark
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from constrained_spec.errors import GrammarError
from constrained_spec.grammar.backends.llguidance import LazyGrammar, compile_grammar
from constrained_spec.grammar.vocab import TokenVocabulary

__all__ = [
    "DATA", "HAND_SAMPLES", "CorpusGrammar", "Sample", "Disagreement", "Walk", "discover", "load_samples", "spell",
    "walk", "lark_verdict", "REASONS", "mutations", "Corpus", "main",
]

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "grammars"

#: hand-written samples of the three languages that matter most for generation, each checked by lark
#: (the test asserts each is accepted by at least one grammar of the corpus)
HAND_SAMPLES: dict[str, list[str]] = {
    "json": [
        '{"name": "Ada", "tags": ["x", "y"], "n": -1.5e3, "ok": true, "none": null}',
        '[1, 2, [3, {}], {"a": [], "b": {"c": false}}]',
        '{\n  "quote": "say \\"hi\\"",\n  "uni": "caf\\u00e9 \u00e9t\u00e9"\n}',
    ],
    "arithmetic": [
        "-(3 + 4.5) * 2 / 7",
        "1 - -2",
        "((1)) * (2 + 3) - 4 / 5",
        "(12 + 3) * 4 - 5 / 6",
    ],
    "sql": [
        "SELECT name, age FROM users WHERE age > 30 ORDER BY name LIMIT 10;",
        "select city, count(*) from people group by city having count(*) > 1",
        "SELECT u.id AS uid FROM users u JOIN orders o ON u.id = o.user_id WHERE o.total >= 10.5 UNION ALL SELECT id FROM admins",
    ],
}

_PRIORITY = re.compile(r"^([?!]?\w+)\.-?\d+(\s*:)", re.M)
_RULE = re.compile(r"^[ \t]*[?!]?(_?[a-z][_a-z0-9]*)[ \t]*(?:\{[^}]*\})?[ \t]*(?:\.-?\d+)?[ \t]*:", re.M)  # rules are lower case
_TERMINAL = re.compile(r"^[ \t]*(_?[A-Z][_A-Z0-9]*)[ \t]*(?:\.-?\d+)?[ \t]*:", re.M)
#: characters mutations insert, besides the sample's own
_MUTATION_EXTRA = '{}[]",:0123456789 +-*/().;\n\\\'aeXZ_'


@dataclass
class CorpusGrammar:
    """One grammar file (or its priority-free variant): what lark and llguidance make of it."""

    key: str  # path under the data folder, plus " (priorities removed)" for a variant
    path: Path
    lark_text: str  # the file as it is: what lark judges by
    llg_text: str  # what llguidance is given (a variant's text; ``start: <rule>`` added where the file has no start rule)
    start: str
    library: bool = False  # terminals only (common.lark): imported by grammars, not a grammar itself
    earley: Any = None
    lark_error: str | None = None
    lalr_parser: Any = None  # lark's LALR parser, where the grammar loads as LALR
    lalr_usable: bool = False  # LALR parser accepts every sample Earley accepts: its error positions are a bound
    llg_error: str | None = None
    compiled: dict[str, LazyGrammar] = field(default_factory=dict)  # tokenizer name -> grammar

    @property
    def loads(self) -> bool:
        return self.earley is not None

    @property
    def both(self) -> bool:
        return self.earley is not None and self.llg_error is None


@dataclass(frozen=True)
class Sample:
    name: str  # e.g. "outlines/json/simple_fruit.json.test", "hand/sql/1", "...#m3 (insert '}' at 17)"
    text: str


#: the known ways llguidance's language differs from lark's; every disagreement is checked to be one
#: of them (:meth:`Corpus.classify`), anything else is "unexplained"
REASONS = {
    "trailing-ignore": "once nothing can extend the text, llguidance allows no more %ignore text where lark does: "
                       "with `start: \"a\"` and `%ignore \" \"`, lark accepts 'a ' and the matcher refuses the space",
    "newline-in-string": "llguidance's built-in common.ESCAPED_STRING admits a raw newline, lark's (/\".*?(?<!\\\\)(\\\\\\\\)*?\"/, "
                         "no DOTALL) does not: outlines/json.lark accepts '\"a\\nb\"' in llguidance, lark rejects it",
}


@dataclass(frozen=True)
class Disagreement:
    grammar: str
    sample: str
    kind: str  # "refuses valid", "accepts invalid", "rejects late"
    tokenizer: str
    reason: str  # a key of REASONS, or "unexplained"
    detail: str = field(default="", compare=False)


@dataclass(frozen=True)
class Walk:
    accepted: bool
    fail_byte: int | None  # start byte of the refused token, or len(text) where the end is not accepting
    tokens: int  # tokens fed before the refusal (all of them when none is refused)


def _rule_names(text: str) -> list[str]:
    return _RULE.findall(text)


def discover(data: Path = DATA) -> list[CorpusGrammar]:
    """Every ``.lark`` file under ``data``, loaded by lark (not yet compiled by llguidance)."""
    out = []
    for path in sorted(data.rglob("*.lark")):
        text = path.read_text(encoding="utf-8")
        rules = _rule_names(text)
        key = path.relative_to(data).as_posix()
        if not rules:  # a library of terminals: lark must load a grammar that imports them all
            g = CorpusGrammar(key, path, text, text, "", library=True)
            names = _TERMINAL.findall(text)
            probe = f"start: {names[0]}\n%import {path.stem} ({', '.join(names)})\n" if names else text
            try:
                lark.Lark(probe, import_paths=[path.parent])
            except Exception as exc:  # noqa: BLE001
                g.lark_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            out.append(g)
            continue
        start = next((r for r in ("start", "file_input") if r in rules), rules[0])  # python grammars start at file_input
        llg_text = text if start == "start" else f"start: {start}\n{text}"
        g = CorpusGrammar(key, path, text, llg_text, start)
        _load_lark(g)
        out.append(g)
    return out


def _load_lark(g: CorpusGrammar) -> None:
    try:
        g.earley = lark.Lark(g.lark_text, start=g.start, import_paths=[g.path.parent], ambiguity="forest")  # recognise only: no tree
    except Exception as exc:  # noqa: BLE001 - lark raises plain exceptions for some grammars (regexes)
        g.lark_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        return
    try:
        g.lalr_parser = lark.Lark(g.lark_text, start=g.start, parser="lalr", import_paths=[g.path.parent])
    except Exception:  # noqa: BLE001 - conflicts: not LALR
        g.lalr_parser = None


def priority_variant(g: CorpusGrammar) -> CorpusGrammar:
    """``g`` with every ``name.N:`` priority removed (llguidance 1.9 refuses priorities); judged by the original."""
    v = CorpusGrammar(g.key + " (priorities removed)", g.path, g.lark_text, _PRIORITY.sub(r"\1\2", g.llg_text), g.start)
    v.earley, v.lark_error, v.lalr_parser = g.earley, g.lark_error, g.lalr_parser
    return v


def compile_all(grammars: list[CorpusGrammar], tokenizers: dict[str, tuple[Any, TokenVocabulary]]) -> list[CorpusGrammar]:
    """Compile every lark-loadable grammar for every tokenizer; adds priority-free variants. Returns all."""
    out = []
    for g in grammars:
        if g.library:
            out.append(g)
            continue
        _compile(g, tokenizers)
        out.append(g)
        if g.llg_error and "priority not supported" in g.llg_error:
            v = priority_variant(g)
            _compile(v, tokenizers)
            out.append(v)
    return out


def _compile(g: CorpusGrammar, tokenizers: dict[str, tuple[Any, TokenVocabulary]]) -> None:
    for name, (tok, vocab) in tokenizers.items():
        try:
            g.compiled[name] = compile_grammar("lark", g.llg_text, vocab, encode=_encoder(tok))
        except GrammarError as exc:
            g.llg_error = str(exc)
            g.compiled.clear()
            return


def _encoder(tok: Any) -> Callable[[str], list[int]]:
    return lambda s: tok.encode(s, add_special_tokens=False)


def load_samples(data: Path = DATA) -> list[Sample]:
    """outlines' sample files (as they are and without the final newline) and :data:`HAND_SAMPLES`."""
    out = []
    for path in sorted((data / "outlines" / "cfg_samples").rglob("*.test")):
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(data).as_posix()
        out.append(Sample(name, text))
        if text.endswith("\n"):
            out.append(Sample(name + " (no final newline)", text[:-1]))
    for family, texts in HAND_SAMPLES.items():
        out.extend(Sample(f"hand/{family}/{i}", t) for i, t in enumerate(texts))
    return out


def spell(tok: Any, vocab: TokenVocabulary, text: str) -> list[int] | None:
    """The tokenizer's ids for exactly ``text`` (checked against the vocabulary's bytes), or None.

    SentencePiece tokenizers put a space before the text: those encode ``"\\n" + text`` and drop the
    leading tokens that spell the prefix.
    """
    data = text.encode("utf-8")

    def spelled(ids: list[int]) -> bytes | None:
        parts = [vocab.tokens.get(i) for i in ids]
        return None if any(p is None for p in parts) else b"".join(parts)  # type: ignore[arg-type]

    ids = tok.encode(text, add_special_tokens=False)
    if spelled(ids) == data:
        return list(ids)
    ids = tok.encode("\n" + text, add_special_tokens=False)
    head = b""
    for k, i in enumerate(ids):
        head += vocab.tokens.get(i, b"\0")
        if head in (b"\n", b" \n"):
            return list(ids[k + 1:]) if spelled(ids[k + 1:]) == data else None
        if len(head) >= 2:
            break
    return None


def walk(grammar: LazyGrammar, ids: list[int]) -> Walk:
    """Feed ``ids`` to a fresh matcher one by one: accepted, or where it refused."""
    m = grammar.matcher()
    allowed = m.count_allowed(ids)
    pos = 0
    for k, token in enumerate(ids):
        try:
            m.advance(token)
        except GrammarError:
            if allowed != k:
                raise RuntimeError(f"count_allowed said {allowed} tokens, advance refused token {k}") from None
            return Walk(False, pos, k)
        pos += len(grammar.vocab.tokens[token])
    if allowed != len(ids):
        raise RuntimeError(f"count_allowed said {allowed} of {len(ids)} tokens, advance took them all")
    ok = m.is_accepting()
    return Walk(ok, None if ok else pos, len(ids))


def lark_verdict(g: CorpusGrammar, text: str) -> tuple[bool, int | None]:
    """(lark's Earley parser accepts ``text``, byte by which the LALR interactive parser knows it fails, or None)."""
    try:
        g.earley.parse(text)
        return True, None
    except (UnexpectedInput, LarkError):
        pass
    if not g.lalr_usable:
        return False, None
    return False, lalr_error_byte(g.lalr_parser, text)


def lalr_error_byte(parser: Any, text: str, relex: int = 4) -> int | None:
    """The byte by which lark's LALR interactive parser knows ``text`` is not in the language (None if it accepts).

    lark reports where the token it could not lex, or could not accept, *starts*; the text is dead
    only where nothing that could be lexed there can go on: ``start + k`` with ``k`` the longest
    stretch that is still a prefix of a match of a terminal the parser could take there (or an ignored
    one). The greedy lexer may also have cut a token short that a longer match would have carried past
    the error (``[1.]``: ``1`` then ``.``, where ``1.5`` is one number), so the starts of the last
    ``relex`` tokens count too, with every terminal. The end of the text where more was due: ``len``.
    """
    ip = parser.parse_interactive(text)
    starts: list[int] = []
    try:
        for token in ip.iter_parse():  # yields each token before the parser takes it
            starts.append(token.start_pos)
        ip.feed_eof()
    except UnexpectedCharacters as exc:
        at, names = exc.pos_in_stream, exc.allowed
    except UnexpectedToken as exc:
        if exc.token.type == "$END" or exc.token.start_pos is None:
            return len(text.encode("utf-8"))
        at, names = exc.token.start_pos, exc.expected
    except UnexpectedEOF:
        return len(text.encode("utf-8"))
    else:
        return None
    i = at + _viable_length(parser, names, text, at)
    for start in [s for s in starts if s < at][-relex:]:
        i = max(i, start + _viable_length(parser, None, text, start))
    return len(text[:i].encode("utf-8"))


_PATTERNS: dict[tuple[int, str], Any] = {}


def _viable_length(parser: Any, names: Iterable[str] | None, text: str, start: int) -> int:
    """Longest ``k`` such that ``text[start:start+k]`` is a prefix of a match of one of the terminals ``names``."""
    import regex  # partial matching: is this string a prefix of some match?

    wanted = set(names or (t.name for t in parser.terminals)) | set(parser.ignore_tokens)
    best = 0
    for term in parser.terminals:
        if term.name not in wanted:
            continue
        key = (id(parser), term.name)
        rx = _PATTERNS.get(key)
        if rx is None:
            flags = "".join(sorted(term.pattern.flags))
            body = term.pattern.to_regexp()
            rx = _PATTERNS[key] = regex.compile(f"(?{flags}:{body})" if flags else body)
        lo, hi = best, len(text) - start  # invariant: a prefix of length lo is viable (0 trivially)
        if hi <= lo or rx.fullmatch(text, start, start + lo + 1, partial=True) is None:
            continue
        lo += 1
        while lo < hi:  # viability is monotone: a prefix of a viable prefix is viable
            mid = (lo + hi + 1) // 2
            if rx.fullmatch(text, start, start + mid, partial=True) is not None:
                lo = mid
            else:
                hi = mid - 1
        best = lo
    return best


def mutations(sample: Sample, n: int, seed: int = 0) -> list[Sample]:
    """``n`` distinct one-character mutations of ``sample`` (delete, insert or replace), seeded."""
    rng = random.Random(f"{seed}:{sample.name}")
    text = sample.text
    alphabet = sorted(set(text) | set(_MUTATION_EXTRA))
    seen = {text}
    out = []
    for _ in range(n * 4):
        if len(out) == n:
            break
        op = rng.choice(("delete", "insert", "replace"))
        if op == "insert":
            i, c = rng.randrange(len(text) + 1), rng.choice(alphabet)
            new, what = text[:i] + c + text[i:], f"insert {c!r} at {i}"
        elif not text:
            continue
        elif op == "delete":
            i = rng.randrange(len(text))
            new, what = text[:i] + text[i + 1:], f"delete {text[i]!r} at {i}"
        else:
            i, c = rng.randrange(len(text)), rng.choice(alphabet)
            new, what = text[:i] + c + text[i + 1:], f"replace {text[i]!r} at {i} by {c!r}"
        if new in seen:
            continue
        seen.add(new)
        out.append(Sample(f"{sample.name}#m{len(out)} ({what})", new))
    return out


@dataclass
class GrammarResult:
    grammar: CorpusGrammar
    samples_accepted: int = 0  # samples lark accepts
    samples_passing: int = 0  # ... that every tokenizer's matcher accepts token by token
    negatives: int = 0  # samples and mutations lark rejects
    negatives_passing: int = 0  # ... that every matcher rejects (in time, where LALR)
    lalr_bounded: int = 0  # negatives with an LALR error position
    early_bounds: int = 0  # ... that lies before the end of the text (the matcher must refuse a token there)
    mask_us: list[float] = field(default_factory=list)


class Corpus:
    """The whole check: grammars, samples, every tokenizer; collects disagreements with lark."""

    def __init__(self, tokenizers: dict[str, tuple[Any, TokenVocabulary]], data: Path = DATA, mutations_per_sample: int = 10,
                 big_sample_chars: int = 2000, seed: int = 0) -> None:
        self.tokenizers = tokenizers
        self.grammars = compile_all(discover(data), tokenizers)
        self.samples = load_samples(data)
        self.mutations_per_sample = mutations_per_sample
        self.big_sample_chars = big_sample_chars  # samples longer than this get a quarter of the mutations
        self.seed = seed
        self.disagreements: list[Disagreement] = []
        self.unspellable: list[tuple[str, str]] = []  # (tokenizer, sample) that a tokenizer cannot spell exactly
        self.results: dict[str, GrammarResult] = {}
        self.variant_mismatches: list[tuple[str, str]] = []  # (grammar, sample) where a variant's lark verdict differs

    def run(self, time_masks: str | None = None) -> "Corpus":
        for g in self.grammars:
            if g.both:
                self.results[g.key] = self.run_grammar(g, time_masks)
        return self

    def run_grammar(self, g: CorpusGrammar, time_masks: str | None = None) -> GrammarResult:
        """Check every sample and mutation of ``g`` (which both engines load) on every tokenizer."""
        res = GrammarResult(g)
        verdicts = [(s, lark_verdict(g, s.text)[0]) for s in self.samples]
        positives = [s for s, ok in verdicts if ok]
        # LALR positions bound the matcher only where LALR accepts every sample Earley accepts
        g.lalr_usable = g.lalr_parser is not None and all(_lalr_accepts(g.lalr_parser, s.text) for s in positives)
        negatives = [s for s, ok in verdicts if not ok]
        names = {s.name for s in positives}
        for s in list(positives):  # mutations of the samples (not of mutations; of a file once, without its final newline)
            if s.name + " (no final newline)" in names:
                continue
            n = self.mutations_per_sample if len(s.text) <= self.big_sample_chars else max(1, self.mutations_per_sample // 4)
            for m in mutations(s, n, self.seed):
                ok, _ = lark_verdict(g, m.text)
                (positives if ok else negatives).append(m)
        if g.lark_text != g.llg_text and g.key.endswith("(priorities removed)"):
            self._check_variant(g, positives, negatives)
        for s in positives:
            res.samples_accepted += 1
            res.samples_passing += self._check_positive(g, s, res, time_masks)
        for s in negatives:
            res.negatives += 1
            _, bound = lark_verdict(g, s.text)
            res.lalr_bounded += bound is not None
            res.early_bounds += bound is not None and bound < len(s.text.encode("utf-8"))
            res.negatives_passing += self._check_negative(g, s, bound)
        return res

    def _check_variant(self, g: CorpusGrammar, positives: list[Sample], negatives: list[Sample]) -> None:
        stripped = lark.Lark(_PRIORITY.sub(r"\1\2", g.lark_text), start=g.start, import_paths=[g.path.parent], ambiguity="forest")
        for s, expected in [(s, True) for s in positives] + [(s, False) for s in negatives]:
            try:
                stripped.parse(s.text)
                ok = True
            except LarkError:
                ok = False
            if ok != expected:
                self.variant_mismatches.append((g.key, s.name))

    def _ids(self, name: str, s: Sample) -> list[int] | None:
        tok, vocab = self.tokenizers[name]
        ids = spell(tok, vocab, s.text)
        if ids is None:
            self.unspellable.append((name, s.name))
        return ids

    def _check_positive(self, g: CorpusGrammar, s: Sample, res: GrammarResult, time_masks: str | None) -> bool:
        passed = True
        for name, grammar in g.compiled.items():
            ids = self._ids(name, s)
            if ids is None:
                continue
            w = walk(grammar, ids)
            if not w.accepted:
                where = "at the end (not accepting)" if w.tokens == len(ids) else f"token {w.tokens} at byte {w.fail_byte}"
                self._disagree(g, s, "refuses valid", name, w, f"refused {where}: {s.text[:80]!r}")
                passed = False
            elif name == time_masks and "#m" not in s.name:
                res.mask_us.extend(mask_times(grammar, ids))
        return passed

    def _check_negative(self, g: CorpusGrammar, s: Sample, bound: int | None) -> bool:
        passed = True
        for name, grammar in g.compiled.items():
            ids = self._ids(name, s)
            if ids is None:
                continue
            w = walk(grammar, ids)
            if w.accepted:
                self._disagree(g, s, "accepts invalid", name, w, repr(s.text[:80]))
                passed = False
            elif bound is not None and w.fail_byte is not None and w.fail_byte > bound:
                self._disagree(g, s, "rejects late", name, w, f"matcher at byte {w.fail_byte}, lark LALR by {bound}: {s.text[:80]!r}")
                passed = False
        return passed

    def reasons(self) -> set[tuple[str, str]]:
        """(grammar, reason) of every disagreement."""
        return {(d.grammar, d.reason) for d in self.disagreements}

    def _disagree(self, g: CorpusGrammar, s: Sample, kind: str, name: str, w: Walk, detail: str) -> None:
        self.disagreements.append(Disagreement(g.key, s.name, kind, name, self.classify(g, s, kind, name, w), detail))

    def classify(self, g: CorpusGrammar, s: Sample, kind: str, name: str, w: Walk) -> str:
        """Which of :data:`REASONS` explains a disagreement, checked on the text itself; else "unexplained"."""
        tok, vocab = self.tokenizers[name]
        if kind == "refuses valid":
            core = s.text.rstrip(" \t\r\n\f")
            ids = spell(tok, vocab, core) if core != s.text else None
            if ids is not None and walk(g.compiled[name], ids).accepted:
                return "trailing-ignore"  # lark accepts text = core + whitespace, the matcher accepts core
        elif _NL_STRING.search(g.lark_text):
            earley, lalr = _newline_string_parsers(g)
            try:
                earley.parse(s.text)
                nl_accepts = True
            except LarkError:
                nl_accepts = False
            if kind == "accepts invalid" and nl_accepts:
                return "newline-in-string"  # lark accepts it once strings may hold raw newlines
            if kind == "rejects late" and not nl_accepts and lalr is not None:
                bound = lalr_error_byte(lalr, s.text)
                if bound is not None and w.fail_byte is not None and w.fail_byte <= bound:
                    return "newline-in-string"  # in time by lark's own LALR once strings may hold raw newlines
        return "unexplained"


_NL_STRING = re.compile(r"^%import common\.ESCAPED_STRING(?:[ \t]*->[ \t]*(\w+))?[ \t]*$", re.M)
_NL_PARSERS: dict[str, tuple[Any, Any]] = {}


def _newline_string_parsers(g: CorpusGrammar) -> tuple[Any, Any]:
    """lark's Earley and LALR (or None) parsers of ``g`` with an ESCAPED_STRING that may hold raw newlines."""
    hit = _NL_PARSERS.get(g.lark_text)
    if hit is None:
        text = _NL_STRING.sub(lambda m: (m.group(1) or "ESCAPED_STRING") + ': /"(?:[^"\\\\]|\\\\.)*"/s', g.lark_text)
        earley = lark.Lark(text, start=g.start, import_paths=[g.path.parent], ambiguity="forest")
        try:
            lalr = lark.Lark(text, start=g.start, parser="lalr", import_paths=[g.path.parent])
        except Exception:  # noqa: BLE001 - not LALR
            lalr = None
        hit = _NL_PARSERS[g.lark_text] = (earley, lalr)
    return hit


def _lalr_accepts(parser: Any, text: str) -> bool:
    try:
        parser.parse(text)
        return True
    except LarkError:
        return False


def mask_times(grammar: LazyGrammar, ids: list[int]) -> list[float]:
    """µs to compute the mask at every position of ``ids`` (and after the last), on a fresh matcher."""
    m = grammar.matcher()
    out = []
    for token in [*ids, None]:
        t0 = time.perf_counter()
        m.bitmask()
        out.append((time.perf_counter() - t0) * 1e6)
        if token is not None:
            m.advance(token)
    return out


def percentile(values: Iterable[float], q: float) -> float:
    xs = sorted(values)
    if not xs:
        return float("nan")
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def load_tokenizers(names: Iterable[str]) -> dict[str, tuple[Any, TokenVocabulary]]:
    """name -> (Hugging Face tokenizer, vocabulary) for the offline tokenizers of ``tokenizer_assets``."""
    from transformers import AutoTokenizer

    from constrained_spec.grammar.vocab import build_vocabulary
    from constrained_spec.models.store.tokenizer_assets import ensure_vocab_tokenizer

    out = {}
    for name in names:
        tok = AutoTokenizer.from_pretrained(str(ensure_vocab_tokenizer(name)))
        out[name] = (tok, build_vocabulary(tok))
    return out


def _short(error: str | None, width: int = 70) -> str:
    if not error:
        return ""
    text = error.replace("the lark does not compile: ", "")
    first = text.strip().splitlines()[0]
    for line in text.splitlines():  # llguidance's regex errors put the reason on a later "error:" line
        if line.startswith("error:"):
            first += " / " + line
    return first[:width]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA, help="the grammars folder (default ../shared/data/grammars)")
    ap.add_argument("--tokenizers", default="gpt-2,qwen2,llama-spm", help="comma-separated names of tokenizer_assets")
    ap.add_argument("--mutations", type=int, default=10, help="mutations per sample")
    ap.add_argument("--mask-vocab", default="qwen2", help="the tokenizer whose masks are timed")
    args = ap.parse_args(argv)
    if not args.data.is_dir():
        print(f"no grammars folder at {args.data}", file=sys.stderr)
        return 2
    names = [n for n in args.tokenizers.split(",") if n]
    if args.mask_vocab not in names:
        names.append(args.mask_vocab)
    t0 = time.perf_counter()
    corpus = Corpus(load_tokenizers(names), args.data, mutations_per_sample=args.mutations).run(time_masks=args.mask_vocab)
    elapsed = time.perf_counter() - t0
    print(f"grammars in {args.data} ; tokenizers {', '.join(names)} ; mask times on {args.mask_vocab} (cold matcher per sample)\n")
    print("| grammar | lark | llguidance | samples passing | negatives rejected (LALR-bounded, before the end) | mask p50 µs | mask p99 µs |")
    print("|---|---|---|---|---|---|---|")
    all_masks: list[float] = []
    for g in corpus.grammars:
        if g.library:
            state = "library: imports" if g.lark_error is None else f"library FAILS {_short(g.lark_error, 40)}"
            print(f"| {g.key} | {state} | - | - | - | - | - |")
            continue
        lark_cell = "loads" if g.loads else f"FAILS {_short(g.lark_error, 40)}"
        llg_cell = "compiles" if g.llg_error is None else f"refused: {_short(g.llg_error)}"
        r = corpus.results.get(g.key)
        if r is None:
            print(f"| {g.key} | {lark_cell} | {llg_cell} | - | - | - | - |")
            continue
        all_masks.extend(r.mask_us)
        p50 = f"{percentile(r.mask_us, 50):.0f}" if r.mask_us else "-"
        p99 = f"{percentile(r.mask_us, 99):.0f}" if r.mask_us else "-"
        print(f"| {g.key} | {lark_cell} | {llg_cell} | {r.samples_passing}/{r.samples_accepted} | "
              f"{r.negatives_passing}/{r.negatives} ({r.lalr_bounded}, {r.early_bounds}) | {p50} | {p99} |")
    files = [g for g in corpus.grammars if not g.library and not g.key.endswith("(priorities removed)")]
    variants = [g for g in corpus.grammars if g.key.endswith("(priorities removed)")]
    res = list(corpus.results.values())
    print()
    libraries = [g for g in corpus.grammars if g.library]
    print(f"grammar files: {len(files)} (+{len(libraries)} terminal libraries, {sum(g.lark_error is None for g in libraries)} import in lark); "
          f"load in lark: {sum(g.loads for g in files)}; compile in llguidance: {sum(g.both for g in files)}; "
          f"priority-free variants compiling: {sum(g.both for g in variants)}/{len(variants)}")
    print(f"grammars with accepted samples: {sum(r.samples_accepted > 0 for r in res)}; "
          f"samples passing: {sum(r.samples_passing for r in res)}/{sum(r.samples_accepted for r in res)}; "
          f"negatives rejected: {sum(r.negatives_passing for r in res)}/{sum(r.negatives for r in res)}")
    print(f"mask time over all sample paths ({len(all_masks)} masks): p50 {percentile(all_masks, 50):.0f} µs, p99 {percentile(all_masks, 99):.0f} µs")
    print(f"disagreements with lark: {len(corpus.disagreements)} (grammar, sample, tokenizer) cases")
    groups: dict[tuple[str, str, str], list[Disagreement]] = {}
    for d in corpus.disagreements:
        groups.setdefault((d.reason, d.grammar, d.kind), []).append(d)
    for (reason, grammar, kind), ds in sorted(groups.items()):
        samples = sorted({d.sample for d in ds})
        print(f"  [{reason}] {grammar} [{kind}]: {len(samples)} samples x {len({d.tokenizer for d in ds})} tokenizers, e.g. {samples[0]} :: {ds[0].detail}")
    for reason, text in REASONS.items():
        print(f"  {reason}: {text}")
    if corpus.unspellable:
        print(f"samples a tokenizer cannot spell exactly (skipped): {sorted(set(corpus.unspellable))}")
    if corpus.variant_mismatches:
        print(f"priority-free variants where lark's verdict changes: {corpus.variant_mismatches}")
    print(f"\n{elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
