"""Small synthetic models with exactly enumerable distributions, behind the SequenceModel interface."""

from __future__ import annotations

import hashlib

import torch

from constrained_spec.grammar.vocab import TokenVocabulary


class PrefixModel:
    """Logits depend on the whole prefix (a hash seeds them), so caching bugs change the output.

    ``logits(prefix)`` is a pure function; ``extend``/``crop`` only track the cached prefix.
    """

    def __init__(self, vocab_size: int, seed: int, scale: float = 2.0) -> None:
        self.vocab_size = vocab_size
        self.seed = seed
        self.scale = scale
        self.tokens: list[int] = []
        self.calls = 0

    @property
    def length(self) -> int:
        return len(self.tokens)

    def logits(self, prefix: list[int]) -> torch.Tensor:
        digest = hashlib.sha256(f"{self.seed}|{prefix}".encode()).digest()
        g = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))
        return torch.randn(self.vocab_size, generator=g, dtype=torch.float64).float() * self.scale

    def extend(self, tokens: list[int]) -> torch.Tensor:
        self.calls += 1
        rows = []
        for t in tokens:
            self.tokens.append(t)
            rows.append(self.logits(self.tokens))
        return torch.stack(rows)

    def crop(self, length: int) -> None:
        assert 0 <= length <= len(self.tokens), (length, len(self.tokens))
        del self.tokens[length:]

    def reset(self) -> None:
        self.tokens = []


def letters_vocab(extra: dict[int, bytes] | None = None) -> TokenVocabulary:
    """A 10-token vocabulary: a, b, c, ab, ba, bc, ca, abc, cc, EOS(9)."""
    tokens = {0: b"a", 1: b"b", 2: b"c", 3: b"ab", 4: b"ba", 5: b"bc", 6: b"ca", 7: b"abc", 8: b"cc"}
    tokens.update(extra or {})
    return TokenVocabulary(tokens=tokens, eos_token_ids=(9,), size=10)
