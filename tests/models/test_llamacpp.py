"""The llama.cpp runtime (models.llamacpp.model) on tiny random-weight GGUF files over GPT-2's vocabulary.

* blocks: logits of a block of tokens (one ``llama_decode``) equal those of the same tokens fed one
  at a time and those of a fresh decode, within a stated tolerance (the kernels differ by batch width);
* cache alignment: after random rollbacks (``llama_memory_seq_rm``), and after speculative runs with
  many rejections, incremental logits equal a fresh decode of the committed tokens;
* greedy identity: speculative decoding on this runtime gives the target-only (k = 0) tokens;
* rows: a batched forward over several sequence ids gives each row what a single run gives, and
  greedy rows of a batched Generator equal single runs;
* the runtime option: resolution rules and errors (these run without llama-cpp-python).
"""

from __future__ import annotations

import random

import pytest
import torch
from synthetic import make_decoder, rows_start_together

from constrained_spec.errors import ConfigError
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.grammar.vocab import build_vocabulary
from constrained_spec.models.runtime import resolve_runtime
from constrained_spec.sampling.distribution import SamplingPolicy

#: max |block logits - one-at-a-time or fresh logits| / max |logit| allowed. Measured 2026-12-02 on these
#: models (flash attention off): 2e-7 at 8 tokens of context, 7e-6 at 100; with it on, 4e-4 at 100
BLOCK_RTOL = 1e-3


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return float((a - b).abs().max()) <= BLOCK_RTOL * float(b.abs().max())
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 999},
                                           "b": {"type": "string", "maxLength": 8}}, "required": ["a", "b"]}


@pytest.fixture(scope="module")
def weights(tiny_ggufs):
    from constrained_spec.models.llamacpp.model import LlamaCppWeights

    return LlamaCppWeights(tiny_ggufs[0], threads=1, n_ctx=512), LlamaCppWeights(tiny_ggufs[1], threads=1, n_ctx=512)


def fresh_logits(w, tokens: list[int]) -> torch.Tensor:
    """Logits of the last token of ``tokens`` from a new context (nothing cached before)."""
    return w.sequence_model().extend(tokens)[-1]


def test_the_tiny_gguf_is_read_as_written(weights, gpt2_tokenizer):
    target, _ = weights
    assert target.vocab_size == 50257 == len(gpt2_tokenizer)
    m = target.sequence_model()
    out = m.extend(gpt2_tokenizer("Hello there")["input_ids"])
    assert out.shape == (2, 50257) and out.dtype == torch.float32 and torch.isfinite(out).all()
    assert float(out.std()) > 0.5  # random weights give spread logits, not a constant


def test_a_block_gives_logits_at_every_position_like_one_token_at_a_time(weights):
    target, _ = weights
    ids = random.Random(0).sample(range(50000), 12)
    block, single = target.sequence_model(), target.sequence_model()
    a = block.extend(ids)
    b = torch.stack([single.extend([t])[0] for t in ids])
    assert block.length == single.length == 12 == block.cache_length()
    assert close(a, b), float((a - b).abs().max())
    assert not torch.allclose(a[3], a[4], atol=0.1)  # rows are positions, not copies


def test_cache_matches_a_fresh_decode_after_random_rollbacks(weights):
    target, _ = weights
    rng = random.Random(1)
    m = target.sequence_model()
    committed: list[int] = []
    for step in range(30):
        if committed and rng.random() < 0.4:
            keep = rng.randrange(0, len(committed))
            m.crop(keep)
            del committed[keep:]
        new = [rng.randrange(50000) for _ in range(rng.randint(1, 6))]
        out = m.extend(new)
        committed += new
        assert m.length == m.cache_length() == len(committed)
        assert close(out[-1], fresh_logits(target, committed)), step
    m.reset()
    assert m.length == 0 and m.cache_length() == 0
    with pytest.raises(ValueError):
        m.crop(1)


def test_speculative_runs_leave_both_caches_on_the_committed_tokens(weights, gpt2_tokenizer):
    from constrained_spec.models.llamacpp.model import LlamaCppModel

    vocab = build_vocabulary(gpt2_tokenizer, 50257)
    automaton = AutomatonCompiler(vocab, disk_cache=False, compile_timeout=None).compile(r'\{"name":"[a-z ]{5,40}","n":[0-9]{1,6}\}')
    target, draft = LlamaCppModel(weights[0]), LlamaCppModel(weights[1])
    prompt = gpt2_tokenizer("Give me a record:")["input_ids"]
    rejections = 0
    for seed in range(3):
        dec = make_decoder(target, draft, automaton, SamplingPolicy(temperature=1.0, seed=seed), num_draft_tokens=4,
                           max_new_tokens=80, debug_checks=True, generator=torch.Generator().manual_seed(seed))
        result = dec.run(prompt)
        rejections += result.stats.drafted_tokens - result.stats.accepted_tokens
        committed = dec.committed
        assert automaton.accepts(result.token_ids)
        for w, model in zip(weights, (target, draft)):
            assert model.cache_length() == model.length <= len(committed)
            if model.length == len(committed):
                model.crop(len(committed) - 1)
            inc = model.extend(committed[model.length :])[-1]
            assert close(inc, fresh_logits(w, committed))
    assert rejections >= 10, "the test needs many rejections to mean anything"


@pytest.fixture(scope="module")
def generators(tiny_ggufs, gpt2_tokenizer, tmp_path_factory):
    from constrained_spec.api import Generator

    target, draft = (str(p) for p in tiny_ggufs)
    options = dict(runtime="llamacpp", tokenizer=gpt2_tokenizer, progress=False, cache_dir=tmp_path_factory.mktemp("cache"),
                   draft_plan="always")
    return (Generator(target, draft, **options), Generator(target, None, **options),
            Generator(target, draft, max_batch_size=4, batch_max_tokens=256, prefix_cache_mb=16, **options))


PROMPTS = ["Alpha", "Give me the item: " + "word " * 6, "Order 17"]


def test_greedy_speculative_equals_target_only_on_this_runtime(generators):
    spec, alone, _ = generators
    assert type(spec.target).__name__ == "LlamaCppModel" and type(spec.draft).__name__ == "LlamaCppModel"
    drafted = 0
    for prompt in PROMPTS:
        base = alone.run(prompt, SCHEMA, max_new_tokens=40, num_draft_tokens=0)
        for k in (1, 4):
            got = spec.run(prompt, SCHEMA, max_new_tokens=40, num_draft_tokens=k)
            assert got.token_ids == base.token_ids, (prompt, k)
            drafted += got.stats.drafted_tokens
    assert drafted > 20  # the draft really proposed


def test_batch_rows_equal_single_runs(weights):
    from constrained_spec.models.llamacpp.model import LlamaCppRows
    from constrained_spec.models.torch.batched import RowCall

    target, _ = weights
    rows = LlamaCppRows(target, slots=3, max_length=64)
    rng = random.Random(2)
    seqs = [[rng.randrange(50000) for _ in range(n)] for n in (5, 9, 2)]
    out = rows.forward([RowCall(i, 0, s) for i, s in enumerate(seqs)])
    for s, o in zip(seqs, out):
        assert o is not None and close(o, target.sequence_model().extend(s))
    # ragged next step: row 0 rolls back 2 tokens, row 1 appends, row 2 only prefills (no logits)
    more = [[rng.randrange(50000) for _ in range(n)] for n in (3, 4, 6)]
    out = rows.forward([RowCall(0, 3, more[0]), RowCall(1, 9, more[1]), RowCall(2, 2, more[2], head="none")])
    assert out[2] is None
    for o, full in ((out[0], seqs[0][:3] + more[0]), (out[1], seqs[1] + more[1])):
        assert o is not None and close(o[-1], fresh_logits(target, full))
    saved = rows.read_prefix(2, 5)  # a prefix moves to another slot through llama_state_seq_get/set_data
    rows.write_prefix(0, saved, 4)
    tail = rows.forward([RowCall(0, 4, [7, 8])])[0]
    assert tail is not None and close(tail[-1], fresh_logits(target, (seqs[2] + more[2])[:4] + [7, 8]))


def test_greedy_batched_rows_equal_single_runs(generators):
    spec, _, batched = generators
    requests = [dict(prompt=p + f" {i}", output_type=SCHEMA, max_new_tokens=40, num_draft_tokens=1 + i % 4)
                for i, p in enumerate(PROMPTS + PROMPTS[:2])]
    expected = [spec.run(**r).token_ids for r in requests]
    with rows_start_together(batched.batch, 2):
        got = batched.run_batch(requests)  # 5 requests through 4 slots: rows join as others leave
    assert [g.token_ids for g in got] == expected
    assert any(n > 1 for n in batched.batch.metrics.rows_per_forward), batched.batch.metrics.rows_per_forward
    assert batched.batch.active_rows == 0


# -- the runtime option (no llama-cpp-python needed) -------------------------------------------------
def test_runtime_resolution_rules(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve_runtime("torch", "qwen2.5-coder-1.5b", "cpu") == "torch"
    assert resolve_runtime("llamacpp", str(gguf), "cpu") == "llamacpp"
    assert resolve_runtime("auto", "some/hub-id", "cpu") == "torch"  # not a GGUF: torch whatever the default
    assert resolve_runtime("auto", "qwen2.5-coder-1.5b", "cuda:0") == "torch"
    assert resolve_runtime("auto", "qwen2.5-coder-1.5b", "cpu", "fp32") == "torch"  # a dtype asked for is torch's
    with pytest.raises(ConfigError, match="CPU only"):
        resolve_runtime("llamacpp", str(gguf), "cuda:0")
    with pytest.raises(ConfigError, match="as stored"):
        resolve_runtime("llamacpp", str(gguf), "cpu", "bf16")
    with pytest.raises(ConfigError, match="unknown runtime"):
        resolve_runtime("onnx", str(gguf), "cpu")


def test_auto_follows_the_measured_cpu_default_and_falls_back_without_the_binding(monkeypatch, caplog):
    from constrained_spec.models import runtime

    monkeypatch.setattr(runtime, "CPU_DEFAULT", "llamacpp")
    monkeypatch.setattr(runtime, "llamacpp_installed", lambda: True)
    assert resolve_runtime("auto", "qwen2.5-coder-1.5b", "cpu") == "llamacpp"
    assert resolve_runtime("auto", "qwen2.5-coder-1.5b", "cpu", batched=True) == "torch"  # rows: torch measured faster
    assert resolve_runtime("llamacpp", "qwen2.5-coder-1.5b", "cpu", batched=True) == "llamacpp"  # asked for: kept
    monkeypatch.setattr(runtime, "llamacpp_installed", lambda: False)
    monkeypatch.setattr(runtime, "_warned", set())
    with caplog.at_level("WARNING", logger="constrained_spec"):
        assert resolve_runtime("auto", "qwen2.5-coder-1.5b", "cpu") == "torch"
    assert "llama-cpp-python is not installed" in caplog.text
    monkeypatch.setattr(runtime, "CPU_DEFAULT", "torch")
    monkeypatch.setattr(runtime, "llamacpp_installed", lambda: True)
    assert resolve_runtime("auto", "qwen2.5-coder-1.5b", "cpu") == "torch"


def test_model_config_and_cli_take_the_runtime():
    import argparse

    from constrained_spec.cli.args import add_model_arguments, model_config
    from constrained_spec.config import ModelConfig

    p = argparse.ArgumentParser()
    add_model_arguments(p)
    assert model_config(p.parse_args(["--runtime", "llamacpp"])).runtime == "llamacpp"
    assert model_config(p.parse_args([])).runtime == "auto"
    with pytest.raises(SystemExit):
        p.parse_args(["--runtime", "onnx"])
    with pytest.raises(ConfigError):
        ModelConfig(runtime="onnx")
