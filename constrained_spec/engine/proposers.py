"""Proposal sources behind one interface, and why every one of them keeps the output exact.

**The exactness argument, once.** The verifier keeps a proposed token x with probability
min(1, p(x)/q(x)); at the first rejection it draws from norm(max(0, p - q)); when every proposal is
kept it draws one more from p. For one position this yields exactly p, whatever q is, provided x
really was drawn from q. Position by position the block then yields the target's sequence
distribution, provided that (1) which source proposes at a position, and its q, depend only on the
committed context and the tokens drafted before that position (never on the token drawn there), and
(2) a proposal reports the q it was drawn from. p and q are both masked by the grammar state of
their position first, so a token the grammar forbids has p = 0 and is always rejected.

A deterministic proposal (a grammar-forced string, a prompt-lookup continuation, a forced token)
is a draw from a point mass at the proposed token. It is reported as ``q=None`` and stays a point
mass all the way to the verifier, which treats it as the one-hot row without building one: the
token is kept with probability p(x), and on rejection the next token comes from p without x,
renormalised. Greedy keeps it iff it is the target's masked argmax.

A :class:`Proposer` is asked for tokens at the drafted position the matcher stands on; the loop
takes them one position at a time (see ``engine.loop``). Free proposers (no model forward) return a
plan of several tokens; the draft model returns one token per call.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Hashable, Protocol, Sequence

import torch

from constrained_spec.grammar.matcher import GrammarMatcher
from constrained_spec.grammar.vocab import TokenVocabulary
from constrained_spec.models.protocol import SequenceModel, restricted_head
from constrained_spec.sampling import PolicyTensors, draw, effective_probs


@dataclass(frozen=True)
class Proposal:
    """One proposed token and the distribution it was drawn from.

    ``q``: the probabilities [V] (on the proposer's model device) the token was drawn from, or None
    for a point mass at ``token``. ``confidence``: the proposer's probability of its token where it
    has one (used by stopping rules, which depend on the proposal alone). ``kind``: how its plan
    was found, where a source has several ways (prompt lookup: "ngram" token n-grams or "text"
    bytes; the lookup gate keeps a keep rate for each, as they are right in different places).
    """

    token: int
    q: torch.Tensor | None = None
    confidence: float | None = None
    kind: str | None = None


@dataclass
class DraftContext:
    """Where a proposer is asked: the matcher at the drafted position, and the token ids before it
    (prompt, committed output and the tokens drafted so far in this block)."""

    matcher: GrammarMatcher
    ids: list[int]
    drafted: int  # how many of ``ids`` were drafted in this block (the rest are committed)


class Proposer(Protocol):
    """A proposal source. ``source`` names it in stats ("grammar", "lookup", "model", ...)."""

    source: str

    def propose(self, ctx: DraftContext) -> list[Proposal]:
        """Proposals for the next positions from ``ctx`` (empty: nothing to propose here)."""


# -- grammar-forced strings ------------------------------------------------------------------------


class GrammarStrings:
    """For one compiled grammar and tokenizer: the string the grammar forces from a position, as tokens.

    Where the grammar allows exactly one next byte (and the text is not complete), it forces that
    byte; the run of such bytes is the forced string (a property name with its quotes and colon, a
    closing bracket, the rest of an enum value once it is unambiguous). Its canonical tokenization
    by the target's tokenizer is the proposal, cut where the grammar would not accept a token.

    The proposal also stops before a token at the string's end whose split depends on what
    follows: where some token could start inside that last token and run past the forced string
    into the free text, the model may well write it (``":`` then ``"M`` rather than the canonical
    ``":"`` then ``M``). Proposing it anyway costs a rejection and every draft forward after it;
    leaving it to the draft model costs one forward.

    Results are cached by the matcher's state key (one compiled grammar has finitely many).
    """

    def __init__(self, encode: Callable[[str], list[int]], vocab: TokenVocabulary, max_bytes: int = 256,
                 stable_end: bool = True) -> None:
        self.encode = encode
        self.vocab = vocab
        self.max_bytes = max_bytes
        self.stable_end = stable_end
        self._cache: dict[Hashable, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def tokens(self, matcher: GrammarMatcher) -> tuple[int, ...]:
        """Canonical tokens of the forced string from the matcher's position (empty if none)."""
        key = matcher.state_key()
        hit = self._cache.get(key) if key is not None else None
        if hit is not None:
            return hit
        raw = matcher.forced_bytes(self.max_bytes)
        text = raw.decode("utf-8", errors="ignore")  # drop a trailing partial character
        proposal: list[int] = []
        if text:
            encoded = self.encode(text)
            proposal = encoded[: matcher.count_allowed(encoded)]
        if proposal and self.stable_end:
            proposal = self._stable_prefix(matcher, raw, proposal)
        result = tuple(proposal)
        if key is not None:
            with self._lock:
                self._cache[key] = result
        return result

    def _stable_prefix(self, matcher: GrammarMatcher, raw: bytes, proposal: list[int]) -> list[int]:
        """``proposal`` without its last token where that token's split depends on the free text
        after ``raw``: some token starting inside the last token runs past ``raw`` and stays in
        the language."""
        tokens = self.vocab.tokens
        covered = sum(len(tokens[t]) for t in proposal)
        start = covered - len(tokens[proposal[-1]])
        for j in range(start, len(raw)):
            head = raw[j:]
            for longer in self.vocab.tokens_starting_with(head):
                if matcher.accepts_prefix_bytes(raw + longer[len(head) :]):
                    return proposal[:-1]
        return proposal


class GrammarStringProposer:
    """Proposes the grammar-forced string (point masses)."""

    source = "grammar"

    def __init__(self, strings: GrammarStrings) -> None:
        self.strings = strings

    def propose(self, ctx: DraftContext) -> list[Proposal]:
        return [Proposal(t) for t in self.strings.tokens(ctx.matcher)]


# -- prompt lookup ---------------------------------------------------------------------------------


def prompt_lookup(context: Sequence[int], max_ngram: int = 3, min_ngram: int = 2, max_tokens: int = 8) -> list[int]:
    """Tokens that followed the latest earlier occurrence of the context's last n-gram (n from max down).

    The classic prompt-lookup proposal: in extraction-style prompts values repeat the input.
    """
    length = len(context)
    for n in range(max_ngram, min_ngram - 1, -1):
        if length <= n:
            continue
        tail = list(context[-n:])
        for start in range(length - n - 1, -1, -1):
            if list(context[start : start + n]) == tail:
                follow = list(context[start + n : start + n + max_tokens])
                if follow:
                    return follow
    return []


class PromptText:
    """Prompt lookup on text: the bytes that followed the latest earlier occurrence of the context's
    last few bytes (in the prompt or the output so far), as the tokenizer's canonical tokens.

    Token n-gram lookup misses values that the prompt spells with other tokens: ``Reykjavik`` in
    a sentence is `` Reyk`` ``javik``, in a JSON string ``Re`` ``yk`` ``jav`` ``ik``. Matching
    bytes finds it once a few of its bytes are out. The continuation's last token is dropped (its
    split depends on the bytes after the cut). q is a point mass, as for every lookup; the proposal
    is a function of the context alone. One object serves one request at a time (the decode loop
    holds the generator's lock); it keeps the context's bytes and extends them as the context grows.

    A string value's first bytes follow a quote in the output and a space in the prompt, so
    the ``min_match`` bytes that an ordinary match needs would have to come from the value alone.
    A value's start is matched on its own: once ``min_word`` bytes of the string are out, the
    latest earlier occurrence of them at a word start (after a byte that is not a letter or
    digit) gives the continuation.
    """

    def __init__(self, vocab: TokenVocabulary, encode: Callable[[str], list[int]], min_match: int = 6,
                 max_match: int = 24, max_bytes: int = 40, min_word: int = 3) -> None:
        self.tokens = vocab.tokens
        self.encode = encode
        self.min_match, self.max_match, self.max_bytes = min_match, max_match, max_bytes
        self.min_word = min_word
        self._ids: list[int] = []  # the context whose bytes are in _text
        self._text = bytearray()

    def _bytes(self, ids: Sequence[int]) -> bytes:
        return b"".join(self.tokens.get(int(t), b"") for t in ids)

    def propose(self, context: Sequence[int], drafted: Sequence[int] = ()) -> list[int]:
        """Tokens to propose after ``context`` (prompt + committed output) + ``drafted``; empty where
        no earlier occurrence of at least ``min_match`` trailing bytes is found."""
        known = len(self._ids)
        if known > len(context) or list(context[:known]) != self._ids:  # another request: start over
            self._ids, self._text, known = [], bytearray(), 0
        self._ids.extend(int(t) for t in context[known:])
        self._text += self._bytes(context[known:])
        text = bytes(self._text) + self._bytes(drafted)
        for m in range(min(self.max_match, len(text) - 1), self.min_match - 1, -1):
            pos = text.rfind(text[-m:], 0, len(text) - 1)  # an earlier occurrence, not the tail itself
            if pos >= 0:
                return self._continuation(text, pos + m)
        pos = self._word_start(text)
        return self._continuation(text, pos) if pos >= 0 else []

    def _continuation(self, text: bytes, pos: int) -> list[int]:
        follow = text[pos : pos + self.max_bytes].decode("utf-8", errors="ignore")
        return self.encode(follow)[:-1] if follow else []

    def _word_start(self, text: bytes) -> int:
        """Where the bytes after the latest earlier word-start occurrence of the open string's
        start end (the string: the bytes after the text's last quote, where that quote opens a
        JSON string), or -1."""
        quote = text.rfind(b'"')
        value = text[quote + 1 :]
        if quote < 1 or text[quote - 1 : quote] not in (b":", b"[", b",", b"{", b" ", b"\n"):
            return -1
        if not self.min_word <= len(value) < self.min_match:
            return -1
        end = quote
        while (pos := text.rfind(value, 0, end)) >= 0:
            before = text[pos - 1 : pos]
            if pos == 0 or not (before.isalnum() or before[0] >= 0x80):
                return pos + len(value)
            end = pos + len(value) - 1
        return -1


class PromptLookupProposer:
    """Token n-gram prompt lookup, else byte-level lookup (:class:`PromptText`); point masses."""

    source = "lookup"

    def __init__(self, text: PromptText | None = None, min_ngram: int = 3) -> None:
        self.text = text
        self.min_ngram = min_ngram  # 3: measured more precise than 2 on the bench workload

    def propose(self, ctx: DraftContext) -> list[Proposal]:
        """Point masses along the prompt's continuation; each names its lookup (``Proposal.kind``)."""
        n = self.min_ngram
        tokens = prompt_lookup(ctx.ids, max_ngram=max(3, n), min_ngram=n)
        if tokens:
            return [Proposal(t, kind="ngram") for t in tokens]
        if self.text is None:
            return []
        split = len(ctx.ids) - ctx.drafted
        return [Proposal(t, kind="text") for t in self.text.propose(ctx.ids[:split], ctx.ids[split:])]


# -- the draft model -------------------------------------------------------------------------------


@dataclass
class HeadCounts:
    """How the draft model's output head was computed, per forward."""

    restricted: int = 0  # for the allowed tokens only
    prefix: int = 0  # for the leading (common) token ids only
    full: int = 0


class DraftModelProposer:
    """One token per call, drawn from the draft model's masked effective distribution q.

    Where the grammar allows at most ``restricted_head_max_rows`` tokens and the model has the
    restricted-head capability, its output head is computed for the allowed tokens only (the masked
    q is the same); where a prefix head is set and some allowed token is among its ids, only that
    head is computed. ``want_confidence``: also report the draft's probability of its token (q
    itself, or the masked softmax where q is a greedy point mass).
    """

    source = "model"

    def __init__(self, model: SequenceModel, params: PolicyTensors, uniform: Callable[[int], torch.Tensor],
                 restricted_head_max_rows: int = 3000, restrict_head: bool = True, want_confidence: bool = False,
                 allowed_mask: Callable[[GrammarMatcher], torch.Tensor] | None = None) -> None:
        self.model = model
        self.device = torch.device(model.device)
        self.params = params  # on the model's device
        # read once here, not per token (each read is a host sync on a GPU)
        self.greedy = bool((params.temperature == 0).all())
        self.mixed = not self.greedy and bool((params.temperature == 0).any())
        self.filters = bool(((params.top_k > 0) | (params.top_p < 1.0)).any())
        self.uniform = uniform  # n -> uniforms on the model's device
        self.max_rows = restricted_head_max_rows
        self.heads = restricted_head(model) if restrict_head else None  # checked once
        self.want_confidence = want_confidence
        self.allowed_mask = allowed_mask or (lambda m: m.allowed_mask())
        self.counts = HeadCounts()
        #: context tokens before the model's cache (a windowed draft starts inside the prompt)
        self.offset = 0

    def _logits(self, pending: list[int], matcher: GrammarMatcher) -> torch.Tensor:
        """The draft's logits [1, V] for the next position."""
        heads = self.heads
        if heads is not None:
            allowed = matcher.allowed_ids()
            if allowed.size <= self.max_rows:
                self.counts.restricted += 1
                return heads.extend_last(pending, torch.from_numpy(allowed)).unsqueeze(0)
            prefix = heads.head_prefix
            if prefix and allowed.size and int(allowed.min()) < prefix:
                self.counts.prefix += 1
                return heads.extend_prefix_head(pending).unsqueeze(0)
        self.counts.full += 1
        return self.model.extend(pending)[-1:]

    def propose(self, ctx: DraftContext) -> list[Proposal]:
        pending = ctx.ids[self.offset + self.model.length :]
        logits = self._logits(pending, ctx.matcher)
        allowed = self.allowed_mask(ctx.matcher).to(self.device, non_blocking=True).unsqueeze(0)
        p = self.params
        q = effective_probs(logits, allowed, p.temperature, p.top_k, p.top_p,
                            all_greedy=None if self.mixed else self.greedy, filters=self.filters)[0]
        drawn = draw(q, self.uniform(1))[0]
        if not self.want_confidence:
            return [Proposal(int(drawn), q, None)]
        row = q if not self.greedy else torch.softmax(logits.float().masked_fill(~allowed, float("-inf")), -1)[0]
        token, confidence = torch.stack((drawn.double(), row[drawn].double())).tolist()  # one transfer to the host
        return [Proposal(int(token), q, confidence)]
