"""Proposals that cost no model forward: grammar-forced strings and prompt lookup.

Each proposes tokens with a point-mass q. The speculative construction is exact for any proposal
distribution, as long as q is the distribution the token was really drawn from: with q a point mass
the target keeps the token with probability p(token) and on rejection draws from
norm(max(0, p - q)), i.e. p without that token, renormalised. Greedy keeps it iff it is the
target's masked argmax.
"""

from __future__ import annotations

import bisect
import threading
from typing import Callable, Sequence

import numpy as np

from constrained_spec.grammar.automaton import CompiledAutomaton
from constrained_spec.grammar.vocab import TokenVocabulary


class GrammarStrings:
    """For one automaton and tokenizer: the string the grammar forces from a state, as tokens.

    From a state with exactly one outgoing byte (and not final), the grammar forces that byte; the
    run of such bytes is the forced string (a property name with its quotes and colon, a closing
    bracket, the rest of an enum value once it is unambiguous). Its canonical tokenization by the
    target's tokenizer is the proposal, cut where the automaton would not accept a token.

    The proposal also stops before a token at the string's end whose split depends on what
    follows: where some allowed token could start inside that last token and run past the forced
    string into the free text, the model may well write it (``":`` then ``"M`` rather than the
    canonical ``":"`` then ``M``). Proposing it anyway costs a rejection and every draft forward
    after it; leaving it to the draft model costs one forward.
    """

    def __init__(self, automaton: CompiledAutomaton, encode: Callable[[str], list[int]], max_bytes: int = 256,
                 stable_end: bool = True) -> None:
        self.automaton = automaton
        self.encode = encode
        self.max_bytes = max_bytes
        self.stable_end = stable_end
        self._cache: dict[int, tuple[int, ...]] = {}
        self._lock = threading.Lock()

    def forced_bytes(self, state: int) -> tuple[bytes, int]:
        """The bytes the grammar forces from ``state``, and the state they lead to."""
        dfa, dead = self.automaton.dfa, self.automaton.dead
        out = bytearray()
        while len(out) < self.max_bytes and not self.automaton.is_final(state):
            live = np.flatnonzero(dfa[state] != dead)
            if live.size != 1:
                break
            out.append(int(live[0]))
            state = int(dfa[state, live[0]])
        return bytes(out), state

    def tokens(self, state: int) -> tuple[int, ...]:
        """Canonical tokens of the forced string from ``state`` (empty if nothing is forced)."""
        hit = self._cache.get(state)
        if hit is not None:
            return hit
        raw, end_state = self.forced_bytes(state)
        text = raw.decode("utf-8", errors="ignore")  # drop a trailing partial character
        proposal: list[int] = []
        if text:
            s: int | None = state
            for token in self.encode(text):
                s = self.automaton.next_state(s, token)
                if s is None:
                    break
                proposal.append(token)
        if proposal and self.stable_end:
            proposal = self._stable_prefix(raw, end_state, proposal)
        result = tuple(proposal)
        with self._lock:
            self._cache[state] = result
        return result

    def _stable_prefix(self, raw: bytes, end_state: int, proposal: list[int]) -> list[int]:
        """``proposal`` without its last token where that token's split depends on the free text
        after ``raw`` (which leads to ``end_state``): some token starting inside the last token
        runs past ``raw`` and stays in the language."""
        tokens = self.automaton.vocab.tokens
        covered = sum(len(tokens[t]) for t in proposal)
        start = covered - len(tokens[proposal[-1]])
        by_bytes = self.automaton.token_table.sorted_bytes
        for j in range(start, len(raw)):
            head = raw[j:]
            i = bisect.bisect_right(by_bytes, head)  # tokens that extend ``head`` sort right after it
            while i < len(by_bytes) and by_bytes[i].startswith(head):
                if self.automaton.walk_bytes(end_state, by_bytes[i][len(head) :]) is not None:
                    return proposal[:-1]
                i += 1
        return proposal


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
