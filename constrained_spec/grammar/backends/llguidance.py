"""The llguidance back end (engine ``"lazy"``, the default): regex and Lark grammars compiled in
milliseconds, masks computed on demand.

llguidance (a Rust engine: a lazy derivative-based lexer under an Earley parser, masks by walking
the token trie) sits behind :class:`~constrained_spec.grammar.matcher.GrammarMatcher`. Regexes
(the JSON Schema compiler's output and user ``Regex`` types) compile to one lexeme whose DFA states
are built only as the output reaches them; Lark grammars compile to rules over small lexemes, so a
context-free language (unbounded nesting, SQL, arithmetic) is enforced exactly.

Nothing is eager: compiling is parsing the grammar (about a millisecond), a mask is computed when
asked (tens of microseconds). The language is the grammar's: this module adds no restriction of its
own. The vocabulary is our :class:`TokenVocabulary` (id -> bytes); EOS and excluded tokens are
special tokens that the grammar never allows (EOS only where the text is complete).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Hashable, Sequence

import numpy as np
import torch

from constrained_spec.errors import CompileLimitError, EmptyLanguageError, GrammarError
from constrained_spec.grammar.matcher import FORCED_BYTES_LIMIT
from constrained_spec.grammar.vocab import TokenVocabulary
from constrained_spec.lru import LRUCache

if TYPE_CHECKING:
    from llguidance import LLMatcher, LLTokenizer

    from constrained_spec.grammar import OutputSpec

#: llguidance marks special tokens by this first byte; the grammar never allows them
_SPECIAL = b"\xff"
_TOO_COMPLEX = ("too complex", "toocomplex", "limit", "too many", "fuel")  # "toocomplex": llguidance's Stop reasons


class _TokenTable:
    """What ``llguidance.TokenizerWrapper`` reads: every id's bytes, EOS, the special ids, an encoder."""

    def __init__(self, vocab: TokenVocabulary, encode: Callable[[bytes], list[int]]) -> None:
        self.eos_token_id = vocab.eos_token_id
        self.bos_token_id = None
        self.tokens = [vocab.tokens.get(i) or _SPECIAL + b"<[%d]>" % i for i in range(vocab.size)]
        self.special_token_ids = [i for i in range(vocab.size) if i not in vocab.tokens]
        self._encode = encode

    def __call__(self, data: bytes | str) -> list[int]:
        # llguidance calls this from Rust: it must not raise
        try:
            return self._encode(data.encode("utf-8") if isinstance(data, str) else data)
        except Exception:  # noqa: BLE001 - an unspellable byte: spell what can be spelled
            return []


def greedy_encoder(vocab: TokenVocabulary) -> Callable[[bytes], list[int]]:
    """Longest-match tokenisation over the vocabulary's bytes (for vocabularies without a tokenizer)."""
    by_bytes: dict[bytes, int] = {}
    for tid, raw in sorted(vocab.tokens.items(), reverse=True):
        by_bytes[raw] = tid
    longest = max((len(b) for b in by_bytes), default=1)

    def encode(data: bytes) -> list[int]:
        out: list[int] = []
        i = 0
        while i < len(data):
            for n in range(min(longest, len(data) - i), 0, -1):
                tid = by_bytes.get(data[i : i + n])
                if tid is not None:
                    out.append(tid)
                    i += n
                    break
            else:
                raise GrammarError(f"the vocabulary cannot spell byte {data[i]:#04x}")
        return out

    return encode


_TOKENIZERS: "LRUCache[str, LLTokenizer]" = LRUCache(8)
_TOKENIZERS_LOCK = threading.Lock()


def lazy_tokenizer(vocab: TokenVocabulary, encode: Callable[[str], list[int]] | None = None) -> "LLTokenizer":
    """llguidance's tokenizer for ``vocab`` (built once per vocabulary; ~0.4 s for 152k tokens).

    ``encode``: the model tokenizer's text -> ids (forced tokens are spelled canonically with it);
    without one, longest-match over the vocabulary.
    """
    from llguidance import LLTokenizer, TokenizerWrapper

    with _TOKENIZERS_LOCK:
        hit = _TOKENIZERS.get(vocab.fingerprint)
        if hit is not None:
            return hit
        greedy = greedy_encoder(vocab)

        def by_bytes(data: bytes) -> list[int]:
            if encode is None:
                return greedy(data)
            try:
                return encode(data.decode("utf-8"))
            except UnicodeDecodeError:
                return greedy(data)

        eos = list(vocab.eos_token_ids)
        tokenizer = LLTokenizer(TokenizerWrapper(_TokenTable(vocab, by_bytes)), n_vocab=vocab.size, eos_token=eos)
        _TOKENIZERS.put(vocab.fingerprint, tokenizer)
        return tokenizer


@dataclass(frozen=True)
class LazyGrammar:
    """A grammar compiled for one vocabulary: immutable, shared by requests; :meth:`matcher` per request."""

    kind: str  # "regex" or "lark"
    source: str  # the regex or the Lark text, as given
    vocab: TokenVocabulary
    _template: "LLMatcher" = field(repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def matcher(self) -> "LazyMatcher":
        """A fresh matcher at the start of the grammar."""
        with self._lock:
            inner = self._template.deep_copy()
        return LazyMatcher(self.vocab, inner)


#: every grammar lets the model choose how forced text is tokenised: by default llguidance allows
#: only the canonical tokens of forced bytes, which removes tokens the grammar allows (``{`` where
#: ``{"name":`` is forced) and so changes the target's masked distribution; the grammar-strings
#: proposer drafts the canonical tokens instead, as a proposal the target verifies
_NO_FORCING = '%llguidance {"no_forcing": true}\n'


#: terminals of lark's ``common`` library whose llguidance namesake accepts more than lark's does,
#: written out as lark defines them (without lark's look-behind, which llguidance cannot take):
#: llguidance's ESCAPED_STRING allows a raw newline inside the quotes, lark's does not
_LARK_COMMON = {"ESCAPED_STRING": r'/"([^"\\\n]|\\[^\n])*"/'}
_IMPORT_ONE = re.compile(r"^(\s*)%import\s+common\.(\w+)(?:\s*->\s*(\w+))?\s*$")
_IMPORT_MANY = re.compile(r"^(\s*)%import\s+common\s*\(([^)]*)\)\s*$")


def _lark_common_as_lark(source: str) -> str:
    """``source`` with imports of the terminals in :data:`_LARK_COMMON` replaced by lark's definitions."""
    out: list[str] = []
    for line in source.splitlines():
        one, many = _IMPORT_ONE.match(line), _IMPORT_MANY.match(line)
        if one and one.group(2) in _LARK_COMMON:
            out.append(f"{one.group(1)}{one.group(3) or one.group(2)}: {_LARK_COMMON[one.group(2)]}")
        elif many and any(name.strip() in _LARK_COMMON for name in many.group(2).split(",")):
            names = [name.strip() for name in many.group(2).split(",") if name.strip()]
            kept = [n for n in names if n not in _LARK_COMMON]
            if kept:
                out.append(f"{many.group(1)}%import common ({', '.join(kept)})")
            out.extend(f"{many.group(1)}{n}: {_LARK_COMMON[n]}" for n in names if n in _LARK_COMMON)
        else:
            out.append(line)
    return "\n".join(out) + ("\n" if source.endswith("\n") else "")


def _llg_grammar(kind: str, source: str) -> str:
    import json

    from llguidance import LLMatcher

    if kind == "lark":  # llguidance takes Lark text as it is; lark lets %ignore text open the output too
        return _NO_FORCING + '%llguidance {"allow_initial_skip": true}\n' + _lark_common_as_lark(source)
    if kind != "regex":
        raise GrammarError(f"unknown grammar kind {kind!r}")
    top = json.loads(LLMatcher.grammar_from_regex(source))
    for grammar in top.get("grammars", []):
        if grammar.get("lark_grammar") is not None:
            grammar["lark_grammar"] = _NO_FORCING + grammar["lark_grammar"]
    return json.dumps(top)


def _error(kind: str, message: str) -> GrammarError:
    text = f"the {kind} does not compile: {message.strip()}"
    if any(word in message.lower() for word in _TOO_COMPLEX):
        return CompileLimitError(text)
    return GrammarError(text)


#: the longest regex or grammar text compiled (characters), as the automaton engine's cap
MAX_SOURCE_CHARS = 200_000


def compile_grammar(kind: str, source: str, vocab: TokenVocabulary, encode: Callable[[str], list[int]] | None = None,
                    max_source_chars: int = MAX_SOURCE_CHARS) -> LazyGrammar:
    """Compile a ``"regex"`` (Rust regex syntax, full match) or a ``"lark"`` grammar for ``vocab``.

    Every cost is bounded: the text by ``max_source_chars``; grammar size, lexer states and the
    work of one mask by llguidance's default limits (an error past them, never an unbounded step).

    Raises :class:`GrammarError` naming what llguidance could not compile (a construct it cannot
    enforce exactly, a syntax error), :class:`CompileLimitError` past its size limits and
    :class:`EmptyLanguageError` where not even the first token can be written.
    """
    from llguidance import LLMatcher

    if len(source) > max_source_chars:
        what = "regex" if kind == "regex" else "grammar"
        raise CompileLimitError(f"the constraint's {what} has {len(source)} characters, over the cap of {max_source_chars}")
    tokenizer = lazy_tokenizer(vocab, encode)
    template = LLMatcher(tokenizer, _llg_grammar(kind, source), log_level=0)
    if template.is_error():
        raise _error(kind, template.get_error())
    grammar = LazyGrammar(kind, source, vocab, template)
    probe = grammar.matcher()
    if probe.is_dead() or (not probe.is_accepting() and not probe.allowed_ids().size):
        raise EmptyLanguageError(f"the {kind} admits no output this vocabulary can spell")
    _probe_first_token(probe)
    return grammar


class LlguidanceBackend:
    """:class:`~constrained_spec.grammar.backends.GrammarBackend` over llguidance: a Lark grammar
    (checked by lark first, which judges its outputs), a recursive schema's Lark form (nesting
    unbounded), else the spec's regex."""

    name = "lazy"

    def __init__(self, vocab: TokenVocabulary, encode: Callable[[str], list[int]] | None = None) -> None:
        self.vocab = vocab
        self.encode = encode

    def compile(self, spec: OutputSpec, max_source_chars: int = MAX_SOURCE_CHARS, disk_cache: bool = True) -> LazyGrammar:
        """The grammar of ``spec`` (``disk_cache``: nothing to keep on disk here)."""
        if spec.kind == "lark":
            from constrained_spec.grammar.lark_check import check_lark_grammar

            check_lark_grammar(spec.regex)  # lark must load what it is to judge
            return compile_grammar("lark", spec.regex, self.vocab, self.encode, max_source_chars)
        if spec.grammar is not None:  # a recursive schema (or one past max_regex_chars): its Lark form
            return compile_grammar("lark", spec.grammar, self.vocab, self.encode, max_source_chars)
        return compile_grammar("regex", spec.regex, self.vocab, self.encode, max_source_chars)


def _probe_first_token(probe: "LazyMatcher") -> None:
    """Read the forced text and take one allowed token on a probe matcher: a grammar whose lexer or
    parser runs past llguidance's limits at once (``a{1000000}``: walking the forced a's builds too
    many lexer states) fails here, at compile time, with :class:`CompileLimitError`, not in the
    middle of a decode."""
    probe.forced_bytes()  # the proposers read them first: llguidance walks the forced text
    allowed = [int(t) for t in probe.allowed_ids() if not probe.is_eos(int(t))]
    if allowed:
        probe.advance(allowed[-1])  # raises CompileLimitError past a limit; a forbidden token cannot be
        probe.allowed_ids()


class LazyMatcher:
    """:class:`~constrained_spec.grammar.matcher.GrammarMatcher` over an llguidance ``LLMatcher``.

    llguidance enters a permanent error state on a forbidden token, so :meth:`advance` checks the
    token first; rollback is llguidance's own (it keeps the parser's history). EOS is kept here and
    never fed to llguidance: llguidance 1.9.1's rollback over a consumed EOS leaves a state whose masks
    differ from a fresh replay of the same tokens (``tests/grammar/test_lazy.py`` holds the repro).
    """

    def __init__(self, vocab: TokenVocabulary, inner: "LLMatcher") -> None:
        self.vocab = vocab
        self._inner = inner
        self._tokens: list[int] = []
        self._eos = frozenset(vocab.eos_token_ids)
        self._words = (vocab.size + 31) // 32
        self._single = byte_tokens_for(vocab)  # byte -> a one-byte token, to spell bytes for llguidance
        self._cached: tuple[int, np.ndarray] | None = None  # (length, packed mask) of the current position; reset on every move
        self._broken: Exception | None = None  # llguidance's failure, once it has failed: raised on every later move

    def _failure(self) -> Exception:
        """The error of llguidance's error state (kept: llguidance's error state is permanent).

        Past one of llguidance's limits (a lexer or parser too complex for this output, a right
        recursion nested too deep) it is :class:`CompileLimitError` naming llguidance's reason; any
        other failure is the engine's own fault, a ``RuntimeError`` (never a client error).
        """
        if self._broken is None:
            message = str(self._inner.get_error() or "").strip()
            first = message.splitlines()[0] if message else "unknown error"
            where = f"after {len(self._tokens)} tokens"
            if any(word in message.lower() for word in _TOO_COMPLEX):
                self._broken = CompileLimitError(f"the grammar ran past the grammar engine's limits {where}: {first}")
            else:
                self._broken = RuntimeError(f"llguidance failed {where}: {first}")
        return self._broken

    def _check(self) -> None:
        if self._broken is not None:
            raise self._broken

    @property
    def length(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> list[int]:
        """The accepted tokens (a copy)."""
        return list(self._tokens)

    def is_eos(self, token_id: int) -> bool:
        return token_id in self._eos

    def is_terminated(self) -> bool:
        return bool(self._tokens) and self.is_eos(self._tokens[-1])

    def is_accepting(self) -> bool:
        return bool(self._inner.is_accepting())

    def is_dead(self) -> bool:
        """True where the text so far can be neither completed nor extended (nothing is allowed)."""
        self._packed()
        return bool(self._inner.is_error())

    def _packed(self) -> np.ndarray:
        """uint32 [words]: the allowed tokens at this position (computed once per position)."""
        if self._cached is not None:
            return self._cached[1]
        self._check()
        # after EOS this is the mask before it (the engine never samples there; as the automaton does)
        raw = self._inner.compute_bitmask()
        if self._inner.is_error() and any(word in str(self._inner.get_error()).lower() for word in _TOO_COMPLEX):
            raise self._failure()
        words = np.frombuffer(raw, dtype=np.uint32, count=self._words).copy()
        self._cached = (len(self._tokens), words)
        return words

    def _bits(self) -> np.ndarray:
        """uint8 [V]: 1 where the token is allowed at this position."""
        return np.unpackbits(self._packed().view(np.uint8), bitorder="little")[: self.vocab.size]

    def allowed_mask(self) -> torch.Tensor:
        return torch.from_numpy(self._bits().astype(np.bool_))

    def allowed_ids(self) -> np.ndarray:
        return np.flatnonzero(self._bits()).astype(np.int64)

    def bitmask(self) -> torch.Tensor:
        return torch.from_numpy(self._packed().view(np.int32).copy())

    def forced_token(self) -> int | None:
        words = self._packed()
        nonzero = np.flatnonzero(words)
        if nonzero.size != 1:
            return None
        word = int(words[nonzero[0]])
        if word & (word - 1):
            return None
        return int(nonzero[0]) * 32 + word.bit_length() - 1

    def forced_bytes(self, limit: int = FORCED_BYTES_LIMIT) -> bytes:
        self._check()
        if self.is_terminated():
            return b""
        forced = bytes(self._inner.compute_ff_bytes())[:limit]
        if self._inner.is_error():
            raise self._failure()
        return forced

    def count_allowed(self, token_ids: Sequence[int]) -> int:
        if self.is_terminated():
            return 0
        ids = [int(t) for t in token_ids]
        for n, token in enumerate(ids):
            if self.is_eos(token):  # EOS ends the text: allowed where it is complete, nothing after it
                head = int(self._inner.validate_tokens(ids[:n])) if n else 0
                if head < n:
                    return head
                return n + int(self._accepting_after(ids[:n]))
        return int(self._inner.validate_tokens(ids))

    def _accepting_after(self, ids: list[int]) -> bool:
        if not ids:
            return self.is_accepting()
        if not self._inner.consume_tokens(ids):
            raise GrammarError("llguidance rejected tokens it had validated")  # pragma: no cover
        try:
            return self.is_accepting()
        finally:
            self._inner.rollback(len(ids))

    def accepts_prefix_bytes(self, data: bytes) -> bool:
        if self.is_terminated():
            return not data
        if not data:
            return True
        single = self._single
        try:
            ids = [single[b] for b in data]
        except KeyError:
            spelled = self._spell(data)
            if spelled is None:
                return False
            ids = spelled
        return int(self._inner.validate_tokens(ids)) == len(ids)

    def _spell(self, data: bytes) -> list[int] | None:
        """Some tokens that spell ``data`` exactly (the mask is byte-level, so any spelling answers),
        longest match first: for vocabularies without a one-byte token for every byte in ``data``."""
        try:
            return greedy_encoder_for(self.vocab)(data)
        except GrammarError:
            return None

    def state_key(self) -> Hashable | None:
        return None  # positions are parser stacks: no small key tells them apart

    def advance(self, token_id: int) -> None:
        self._check()
        if self.is_terminated():
            raise GrammarError("token after EOS")
        token_id = int(token_id)
        if self.is_eos(token_id):  # kept here, not fed to llguidance (its rollback over EOS is not exact)
            if not self.is_accepting():
                raise GrammarError(f"EOS before the text is complete (after {len(self._tokens)} tokens)")
        elif int(self._inner.validate_tokens([token_id])) != 1:
            if self._inner.is_error():
                raise self._failure()
            raise GrammarError(f"token {token_id} is not allowed after {len(self._tokens)} tokens")
        elif not self._inner.consume_token(token_id):
            raise self._failure()
        self._tokens.append(token_id)
        self._cached = None

    def rollback(self, length: int) -> None:
        self._check()
        if not 0 <= length <= len(self._tokens):
            raise GrammarError(f"cannot roll back to length {length} from {len(self._tokens)}")
        drop = len(self._tokens) - length - int(self.is_terminated() and length < len(self._tokens))
        if length < len(self._tokens):
            if drop and not self._inner.rollback(drop):
                raise self._failure()
            del self._tokens[length:]
            self._cached = None
            if drop:
                # llguidance 1.9.1 can return a stale mask for the first token consumed after a rollback
                # in a CFG (the mask at '(()' allowed '))' after '(((' -> rollback -> ')'); computing the
                # mask at once, here, avoids it (tests/grammar/test_lazy_differential.py holds the repro)
                self._packed()


_GREEDY: "LRUCache[str, Callable[[bytes], list[int]]]" = LRUCache(8)


def greedy_encoder_for(vocab: TokenVocabulary) -> Callable[[bytes], list[int]]:
    """:func:`greedy_encoder` of ``vocab``, built once per vocabulary."""
    hit = _GREEDY.get(vocab.fingerprint)
    if hit is None:
        hit = greedy_encoder(vocab)
        _GREEDY.put(vocab.fingerprint, hit)
    return hit


_BYTE_TOKENS: "LRUCache[str, dict[int, int]]" = LRUCache(8)


def byte_tokens_for(vocab: TokenVocabulary) -> dict[int, int]:
    """byte value -> the id of a token spelling just that byte (where the vocabulary has one)."""
    hit = _BYTE_TOKENS.get(vocab.fingerprint)
    if hit is None:
        hit = {}
        for tid, raw in sorted(vocab.tokens.items(), reverse=True):
            if len(raw) == 1:
                hit[raw[0]] = tid
        _BYTE_TOKENS.put(vocab.fingerprint, hit)
    return hit
