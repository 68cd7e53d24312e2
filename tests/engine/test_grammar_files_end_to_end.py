"""Every grammar in grammars/ through the whole decode loop, on the GPT-2 vocabulary, lark as the judge.

Random tiny models never finish an unbounded grammar, so the target here is a synthetic model that
"knows" one valid sample of the grammar: a large logit on every token that continues the sample's
remaining text (and on EOS once it is spelled), over seeded noise. The draft knows it less well (a
small bonus, different noise), so it proposes wrong tokens and the loop rejects and rolls back. The
grammar mask decides what may be written; lark decides whether the result is in the language.
Checked: the output parses with lark, greedy speculative decoding equals greedy target-only
decoding token for token, and rejections really happened.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from synthetic import PrefixModel, make_decoder

from constrained_spec.grammar.backends.llguidance import compile_grammar
from constrained_spec.grammar.lark_check import parse_with_lark
from constrained_spec.grammar.vocab import build_vocabulary
from constrained_spec.sampling import SamplingPolicy

GRAMMARS = Path(__file__).resolve().parents[2] / "grammars"
CASES = sorted((g.stem, s) for g in GRAMMARS.glob("*.lark") for s in sorted((GRAMMARS / "samples" / g.stem / "valid").glob("*.txt"))[:2])


class SampleSeekingModel(PrefixModel):
    """:class:`PrefixModel`'s seeded noise plus ``bonus`` on tokens whose bytes continue ``sample``
    after the text so far (and on EOS once it is spelled)."""

    def __init__(self, vocab, sample: bytes, prompt_len: int, bonus: float, seed: int) -> None:
        super().__init__(vocab.size, seed, scale=2.0)
        self.vocab, self.sample, self.prompt_len, self.bonus = vocab, sample, prompt_len, bonus
        self.by_bytes: dict[bytes, list[int]] = {}
        for tid, raw in vocab.tokens.items():
            self.by_bytes.setdefault(raw, []).append(tid)
        self.longest = max(len(b) for b in self.by_bytes)

    def logits(self, prefix: list[int]) -> torch.Tensor:
        out = super().logits(prefix)
        written = b"".join(self.vocab.tokens.get(t, b"") for t in prefix[self.prompt_len :])
        if self.sample.startswith(written):
            rest = self.sample[len(written) :]
            if not rest:
                out[list(self.vocab.eos_token_ids)] += self.bonus
            for n in range(1, min(len(rest), self.longest) + 1):
                for tid in self.by_bytes.get(rest[:n], ()):
                    out[tid] += self.bonus * (0.5 + n / (2 * self.longest))  # longer pieces first
        return out


@pytest.fixture(scope="module")
def gpt2(gpt2_tokenizer):
    return build_vocabulary(gpt2_tokenizer), (lambda s: gpt2_tokenizer.encode(s))


@pytest.mark.parametrize("name,sample_path", CASES, ids=[f"{n}-{p.stem}" for n, p in CASES])
def test_grammar_output_parses_and_speculative_greedy_equals_target_only(gpt2, name, sample_path):
    vocab, encode = gpt2
    text = (GRAMMARS / f"{name}.lark").read_text()
    sample = sample_path.read_bytes()
    grammar = compile_grammar("lark", text, vocab, encode)
    prompt = encode("Write it:")
    outputs = []
    rejected = 0
    for with_draft in (True, False):
        target = SampleSeekingModel(vocab, sample, len(prompt), bonus=60.0, seed=1)
        draft = SampleSeekingModel(vocab, sample, len(prompt), bonus=2.5, seed=2) if with_draft else None
        decoder = make_decoder(target, draft, grammar.matcher(), SamplingPolicy(temperature=0.0), num_draft_tokens=4,
                               max_new_tokens=len(sample) + 8)
        result = decoder.run(list(prompt))
        outputs.append(result.token_ids)
        if with_draft:
            rejected = result.stats.drafted_tokens - result.stats.accepted_tokens
    written = vocab.decode(outputs[0])
    parse_with_lark(text, written)  # lark is the judge
    assert outputs[0] == outputs[1], "greedy speculative differs from greedy target-only"
    assert written.encode() == sample  # the target knew the sample: the mask let every piece of it through
    assert rejected > 0, "the draft never missed: the test would not see a bad rollback"
