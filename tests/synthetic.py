"""Small synthetic models with exactly enumerable distributions, behind the SequenceModel interface."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import threading
from collections import Counter
from collections.abc import Iterator

import torch
from scipy.stats import chisquare

from constrained_spec.config import DecodeConfig
from constrained_spec.engine.loop import Drafting, SpeculativeDecoder
from constrained_spec.engine.proposers import GrammarStringProposer, PromptLookupProposer
from constrained_spec.engine.stats import DecodeHooks
from constrained_spec.grammar.backends.outlines_core import AutomatonMatcher
from constrained_spec.grammar.vocab import TokenVocabulary
from constrained_spec.sampling import verify


class PrefixModel:
    """Logits depend on the whole prefix (a hash seeds them), so caching bugs change the output.

    ``logits(prefix)`` is a pure function; ``extend``/``crop`` only track the cached prefix.
    """

    device = torch.device("cpu")

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

    def prefill(self, tokens: list[int]) -> None:
        self.extend(tokens)

    def crop(self, length: int) -> None:
        assert 0 <= length <= len(self.tokens), (length, len(self.tokens))
        del self.tokens[length:]

    def reset(self) -> None:
        self.tokens = []


class MemoLogits:
    """A mixin for :class:`PrefixModel` subclasses: ``logits(prefix)`` remembered in the class's
    ``_memo`` under ``memo_key(prefix)`` (logits are a pure function of the model's settings and
    the prefix; the statistical tests ask for the same prefixes thousands of times)."""

    _memo: dict

    def memo_key(self, prefix) -> tuple:
        raise NotImplementedError

    def logits(self, prefix):
        key = self.memo_key(prefix)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = super().logits(prefix)
        return hit


class ForkModel(MemoLogits, PrefixModel):
    """:class:`PrefixModel` with memoised logits and a ``fork()`` (a copy of its token list, of the
    same class): a model SMC particles can fork, for the tests and ``benchmarks/smc_bench.py``."""

    _memo: dict = {}
    extends = 0  # extend() calls on every instance: the forwards of particles run alone

    def extend(self, tokens):
        ForkModel.extends += 1
        return super().extend(tokens)

    def memo_key(self, prefix) -> tuple:
        return (self.seed, self.scale, tuple(prefix))

    def fork(self):
        clone = copy.copy(self)
        clone.tokens = list(self.tokens)
        return clone


def chi2_pvalue(counts: Counter, exact: dict) -> float:
    """Chi-square goodness of fit of sampled ``counts`` to the ``exact`` distribution; categories
    with expected < 5 are pooled; outcomes outside ``exact`` fail; a single category gives 1."""
    n = sum(counts.values())
    assert set(counts) <= set(exact), f"outcomes outside the language: {set(counts) - set(exact)}"
    obs, exp, pool_o, pool_e = [], [], 0, 0.0
    for outcome, prob in exact.items():
        if prob * n >= 5:
            obs.append(counts.get(outcome, 0))
            exp.append(prob * n)
        else:
            pool_o += counts.get(outcome, 0)
            pool_e += prob * n
    if pool_e > 0:
        obs.append(pool_o)
        exp.append(pool_e)
    if len(obs) < 2:
        return 1.0
    scale = sum(obs) / sum(exp)  # float rounding of the enumerated probabilities
    return float(chisquare(obs, [e * scale for e in exp]).pvalue)


def letters_vocab(extra: dict[int, bytes] | None = None) -> TokenVocabulary:
    """A 10-token vocabulary: a, b, c, ab, ba, bc, ca, abc, cc, EOS(9)."""
    tokens = {0: b"a", 1: b"b", 2: b"c", 3: b"ab", 4: b"ba", 5: b"bc", 6: b"ca", 7: b"abc", 8: b"cc"}
    tokens.update(extra or {})
    return TokenVocabulary(tokens=tokens, eos_token_ids=(9,), size=10)


def make_decoder(target, draft, matcher, policy, *, num_draft_tokens: int = 4, max_new_tokens: int = 256, verifier=verify,
                 debug_checks: bool = False, generator=None, grammar_strings=None, lookup: bool = False, draft_length=None,
                 restrict_head: bool = True, draft_confidence: float = 0.0, lookup_min_ngram: int = 3, on_tokens=None, draft_window: int = 0,
                 text_lookup=None, decoder_class=SpeculativeDecoder, lookup_gate: bool = True, prefill_overlap: str = "auto",
                 draft_plan: str = "always", draft_gain_per_token: float | None = None, **extra) -> SpeculativeDecoder:
    """A :class:`SpeculativeDecoder` from the loop's options as keywords (the tests' shorthand):
    ``grammar_strings`` / ``lookup`` / ``text_lookup`` become the free proposers, in the API's order;
    ``matcher`` may be a compiled automaton. ``draft_plan`` defaults to "always" here, so a test's
    short budget never leaves its draft out unasked."""
    if not hasattr(matcher, "advance"):
        matcher = AutomatonMatcher(matcher)
    config = DecodeConfig(num_draft_tokens=num_draft_tokens, draft_confidence=draft_confidence, restrict_head=restrict_head,
                          lookup_min_ngram=lookup_min_ngram, debug_checks=debug_checks, draft_window=draft_window,
                          lookup_gate=lookup_gate, prefill_overlap=prefill_overlap, draft_plan=draft_plan,
                          draft_gain_per_token=draft_gain_per_token)
    proposers = []
    if grammar_strings is not None:
        proposers.append(GrammarStringProposer(grammar_strings))
    if lookup:
        proposers.append(PromptLookupProposer(text_lookup, lookup_min_ngram))
    drafting = Drafting(proposers, draft_length, **extra)  # allowed_mask, output_bound, draft_cap, draft_gain
    return decoder_class(target, draft, matcher, policy, config, max_new_tokens=max_new_tokens, verifier=verifier,
                         generator=generator, hooks=DecodeHooks(on_tokens=on_tokens), drafting=drafting)


class BatchedPrefixModel:
    """A :class:`~constrained_spec.models.torch.batched.RowBackend` of :class:`PrefixModel` logits over
    ``slots`` token lists: each call's logits come from its slot's tokens up to its start, so a row
    fed at a wrong position gets another prefix's logits (and a distribution test fails)."""

    device = torch.device("cpu")

    def __init__(self, model: PrefixModel, slots: int = 4, max_length: int = 64) -> None:
        self.model = model
        self.vocab_size = model.vocab_size
        self.slots, self.max_length = slots, max_length
        self.tokens: list[list[int]] = [[] for _ in range(slots)]
        self.rows_per_forward: list[int] = []
        self.can_restrict_head = False
        self.head_prefix = 0

    def forward(self, calls):
        assert len({c.slot for c in calls}) == len(calls)
        self.rows_per_forward.append(len(calls))
        out = []
        for c in calls:
            seq = self.tokens[c.slot]
            assert c.start <= len(seq), f"slot {c.slot} fed at {c.start} but holds only {len(seq)} tokens"
            del seq[c.start:]
            rows = []
            for t in c.tokens:
                seq.append(t)
                rows.append(self.model.logits(seq))
            out.append(torch.stack(rows) if c.head == "all" else None)
        return out

    def read_prefix(self, slot, length):
        return [(torch.tensor(self.tokens[slot][:length]), torch.empty(0))]

    def write_prefix(self, slot, saved, length):
        self.tokens[slot] = saved[0][0][:length].tolist()

    def reusable_prefix(self, tokens, stored, length):
        return length

    def copy_rows(self, source, dest, length):
        assert length <= len(self.tokens[source]), f"slot {source} holds {len(self.tokens[source])} tokens, not {length}"
        self.tokens[dest] = self.tokens[source][:length]


@contextlib.contextmanager
def rows_start_together(batch, n: int) -> Iterator[None]:
    """Inside: the first ``n`` rows that take a slot of ``batch`` (a ``BatchCoordinator``) wait
    for each other before decoding, so they share forwards whatever the machine's load (on a busy
    runner one tiny-model row could end before the next thread took its slot). Only the test's
    timing changes: a round already waits for every active row's job."""
    barrier, acquire, count = threading.Barrier(n, timeout=60), batch.acquire, itertools.count()

    def acquire_together(timeout: float | None = None) -> int:
        slot = acquire(timeout)
        if next(count) < n:
            barrier.wait()
        return slot

    batch.acquire = acquire_together
    try:
        yield
    finally:
        del batch.acquire  # the instance attribute goes; the method shows again
