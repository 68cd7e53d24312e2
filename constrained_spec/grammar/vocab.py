"""Token id -> the exact bytes it emits, for a Hugging Face tokenizer.

Handles byte-level BPE (GPT-2, Qwen, Llama-3: tokens are spelled in the printable byte alphabet)
and SentencePiece with byte fallback (Llama-2, Mistral: '▁' is a space, '<0xNN>' is one raw byte).
Special and added control tokens are left out; EOS is kept apart and only allowed by the grammar
in final states. Knows nothing of models or grammars.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Iterator

from constrained_spec.errors import VocabularyMismatchError

_SPM_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SPM_SPACE = "\u2581"


def _byte_level_alphabet() -> dict[str, int]:
    """The printable-character alphabet byte-level BPE uses to spell each of the 256 bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars: dict[str, int] = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_LEVEL = _byte_level_alphabet()


@dataclass(frozen=True)
class TokenVocabulary:
    """The vocabulary as the grammar sees it.

    ``tokens`` maps every usable id to its bytes; ``eos_token_ids`` are allowed only in final
    states; ``size`` is the model's logits width (it may exceed the tokenizer's length).
    """

    tokens: dict[int, bytes]
    eos_token_ids: tuple[int, ...]
    size: int
    excluded: frozenset[int] = field(default_factory=frozenset)

    @property
    def eos_token_id(self) -> int:
        return self.eos_token_ids[0]

    @cached_property
    def fingerprint(self) -> str:
        """A hash of the id -> bytes map, EOS and size: equal fingerprints mean one vocabulary."""
        h = hashlib.sha256()
        h.update(f"{self.size}|{self.eos_token_ids}|".encode())
        for tid in sorted(self.tokens):
            h.update(tid.to_bytes(4, "little"))
            h.update(len(self.tokens[tid]).to_bytes(2, "little"))
            h.update(self.tokens[tid])
        return h.hexdigest()[:32]

    @cached_property
    def sorted_bytes(self) -> list[bytes]:
        """The distinct non-empty token byte strings, sorted: the tokens that extend a byte string
        sort right after it (built on first use)."""
        return sorted({b for b in self.tokens.values() if b})

    def tokens_starting_with(self, head: bytes) -> Iterator[bytes]:
        """The byte strings of the tokens that start with ``head`` and are longer than it."""
        by_bytes = self.sorted_bytes
        i = bisect.bisect_right(by_bytes, head)
        while i < len(by_bytes) and by_bytes[i].startswith(head):
            yield by_bytes[i]
            i += 1

    def decode(self, ids: Iterable[int]) -> str:
        """The text the ids spell (EOS and unknown ids spell nothing)."""
        return b"".join(self.tokens.get(i, b"") for i in ids).decode("utf-8", errors="replace")

    def text_stream(self) -> "TextStream":
        """An incremental decoder: token ids in, text out, multi-byte characters kept whole."""
        return TextStream(self)

    def check_same(self, other: "TokenVocabulary", what: str = "draft") -> None:
        """Raise VocabularyMismatchError unless ``other`` spells every id the same way."""
        if self.fingerprint == other.fingerprint:
            return
        diff = [i for i in sorted(set(self.tokens) | set(other.tokens)) if self.tokens.get(i) != other.tokens.get(i)]
        raise VocabularyMismatchError(
            f"the {what} model's vocabulary differs from the target's: sizes {self.size} vs {other.size}, "
            f"EOS {self.eos_token_ids} vs {other.eos_token_ids}, {len(diff)} ids spelled differently"
            + (f" (first: id {diff[0]}: {self.tokens.get(diff[0])!r} vs {other.tokens.get(diff[0])!r})" if diff else "")
        )


class TextStream:
    """Token ids -> text, piece by piece, for streaming.

    A token may end inside a multi-byte UTF-8 character (byte-level BPE and byte fallback split
    them); those bytes are held back until the character is complete. The pieces of
    :meth:`push` plus :meth:`flush` concatenate to ``vocab.decode(all ids)`` exactly.
    """

    def __init__(self, vocab: TokenVocabulary) -> None:
        import codecs

        self._tokens = vocab.tokens
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, ids: Iterable[int]) -> str:
        """The text that the new ids complete (may be empty)."""
        return self._decoder.decode(b"".join(self._tokens.get(i, b"") for i in ids))

    def flush(self) -> str:
        """What is still held back (an unfinished character comes out as U+FFFD, as in decode)."""
        return self._decoder.decode(b"", final=True)


def _detect_kind(tokenizer: Any, pieces: list[str]) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        try:
            decoder = backend.decoder
            kind = type(decoder).__name__ if decoder is not None else ""
            desc = repr(decoder) if decoder is not None else ""
        except Exception:  # pragma: no cover - exotic backends
            kind, desc = "", ""
        if "ByteLevel" in kind or "ByteLevel" in desc:
            return "byte_level"
        if "ByteFallback" in desc or "Metaspace" in desc or "Replace" in desc:
            return "sentencepiece"
    if any(_SPM_BYTE.match(p) for p in pieces if p):
        return "sentencepiece"
    if any(p.startswith("\u0120") or p.startswith("\u010a") for p in pieces if p):
        return "byte_level"
    return "sentencepiece" if any(p.startswith(_SPM_SPACE) for p in pieces if p) else "byte_level"


def _piece_bytes(piece: str, kind: str) -> bytes | None:
    if kind == "byte_level":
        try:
            return bytes(_BYTE_LEVEL[c] for c in piece)
        except KeyError:
            return None  # not spelled in the byte alphabet: not a real BPE token
    m = _SPM_BYTE.match(piece)
    if m:
        return bytes([int(m.group(1), 16)])
    return piece.replace(_SPM_SPACE, " ").encode("utf-8")


def build_vocabulary(
    tokenizer: Any,
    model_vocab_size: int | None = None,
    eos_token_ids: Iterable[int] | None = None,
) -> TokenVocabulary:
    """Build the id -> bytes map of a Hugging Face tokenizer (offline; no hub access).

    Leaves out special tokens and added tokens (control strings such as ``<|im_start|>`` or Qwen's
    ``[PAD151700]`` placeholders), keeps ``eos_token_ids`` (default: the tokenizer's EOS) apart.
    ``model_vocab_size`` is the width of the model's logits (defaults to ``len(tokenizer)``).
    """
    if eos_token_ids is None:
        if tokenizer.eos_token_id is None:
            raise VocabularyMismatchError("the tokenizer has no EOS token; pass eos_token_ids explicitly")
        eos_token_ids = [tokenizer.eos_token_id]
    eos = tuple(dict.fromkeys(int(i) for i in eos_token_ids))
    n = len(tokenizer)
    size = max(model_vocab_size or n, n)
    pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
    added = set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    kind = _detect_kind(tokenizer, pieces)
    tokens: dict[int, bytes] = {}
    excluded: set[int] = set()
    for tid, piece in enumerate(pieces):
        if tid in eos or piece is None:
            continue
        if tid in added or tid in special:
            excluded.add(tid)
            continue
        raw = _piece_bytes(piece, kind)
        if not raw:
            excluded.add(tid)
            continue
        tokens[tid] = raw
    return TokenVocabulary(tokens=tokens, eos_token_ids=eos, size=size, excluded=frozenset(excluded))


def check_same_vocabulary(target_tokenizer: Any, draft_tokenizer: Any | None, target_size: int, draft_size: int | None) -> None:
    """Raise VocabularyMismatchError if a draft model (``draft_size`` output logits; None: no draft)
    cannot propose in the target's vocabulary (``target_size`` logits): sizes first, then, where the
    draft has a tokenizer of its own, every id's spelling."""
    if draft_size is None:
        return
    if draft_size != target_size:
        raise VocabularyMismatchError(
            f"draft model has {draft_size} output logits, the target {target_size}: "
            "the draft must share the target's vocabulary"
        )
    if draft_tokenizer is not None and draft_tokenizer is not target_tokenizer:
        build_vocabulary(target_tokenizer, target_size).check_same(build_vocabulary(draft_tokenizer, draft_size), what="draft")
