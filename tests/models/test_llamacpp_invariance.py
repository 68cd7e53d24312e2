"""Batch invariance on the llama.cpp runtime, on *quantized* GGUF files (Q4_K_M and Q8_0, made by llama.cpp's
own quantizer from a tiny random-weight float32 file whose matrices are wide enough for K-quants).

Every position of a verify block (2, 6 and 16 tokens; after a short prompt and after one past the 512 cells
where flash attention's single-query split-KV path starts; after random rollbacks; as a batch row beside
other rows of other lengths) must get *bitwise* the logits that one-token decoding computes there. The
reference is plain one-token decoding through the same runtime: no tolerance. The negative control runs
the same comparison on the binding's default paths (repacked weights, tiled and llamafile matmuls, no
flash attention): there blocks differ from one-token decodes, so the comparison can fail.

Needs the patched binding (``make install-llamacpp``); skipped with the reason elsewhere, a failure under
``CONSTRAINED_SPEC_REQUIRE_ASSETS=1`` (CI)."""

from __future__ import annotations

import os
import random
from types import SimpleNamespace

import pytest
import torch
from conftest import require_llamacpp

pytestmark = pytest.mark.xdist_group("llamacpp-invariance")

BLOCKS = (2, 6, 16)
SPAN = 16


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    require_llamacpp()
    from constrained_spec.models.llamacpp.model import batch_invariant_build

    if not batch_invariant_build():
        if os.environ.get("CONSTRAINED_SPEC_REQUIRE_ASSETS") == "1":
            pytest.fail("llama-cpp-python is installed without scripts/llamacpp-batch-invariant.patch (make install-llamacpp)")
        pytest.skip("llama-cpp-python without the batch-invariance patch (make install-llamacpp builds it)")
    from tiny_gguf import quantize_gguf, write_tiny_gguf

    base = tmp_path_factory.mktemp("gguf-q")
    f32 = write_tiny_gguf(base / "wide-f32.gguf", seed=3, logit_scale=1.0, n_embd=256, n_ff=512)
    return {ftype: quantize_gguf(f32, base / f"wide-{ftype}.gguf", ftype) for ftype in ("Q4_K_M", "Q8_0")}


def _weights(path, invariant: bool):
    from constrained_spec.models.llamacpp.model import LlamaCppWeights

    return LlamaCppWeights(path, threads=2, n_ctx=1024, batch_invariant=invariant)


@pytest.fixture(scope="module")
def invariant_weights(quantized):
    return {ftype: _weights(path, True) for ftype, path in quantized.items()}


def _tokens(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(50000) for _ in range(n)]


def one_token_logits(weights, prompt: list[int], cont: list[int]) -> torch.Tensor:
    """The reference: ``prompt`` prefilled, then ``cont`` decoded one token at a time on a fresh sequence."""
    m = weights.sequence_model()
    m.prefill(prompt)
    return torch.cat([m.extend([t]) for t in cont])


def block_logits(model, prompt_len: int, cont: list[int], n: int) -> torch.Tensor:
    model.crop(prompt_len)
    return torch.cat([model.extend(cont[i : i + n]) for i in range(0, len(cont), n)])


def _mismatch(a: torch.Tensor, b: torch.Tensor) -> str:
    return f"max |Δ| {float((a - b).abs().max()):.3g} over {int((a != b).any(-1).sum())} of {a.shape[0]} positions"


@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q8_0"])
@pytest.mark.parametrize("prompt_len", [5, 600])
def test_blocks_are_bitwise_one_token_decoding(invariant_weights, ftype, prompt_len):
    weights = invariant_weights[ftype]
    assert weights.batch_invariant and weights.flash_attn
    prompt, cont = _tokens(prompt_len, prompt_len), _tokens(prompt_len + 1, SPAN)
    ref = one_token_logits(weights, prompt, cont)
    assert float(ref.std()) > 0.1  # real spread, not a constant
    m = weights.sequence_model()
    m.prefill(prompt)
    for n in BLOCKS:
        got = block_logits(m, prompt_len, cont, n)
        assert torch.equal(got, ref), f"{ftype}, block of {n} after {prompt_len}: {_mismatch(got, ref)}"


def test_blocks_after_random_rollbacks_are_bitwise_a_fresh_one_token_run(invariant_weights):
    weights = invariant_weights["Q4_K_M"]
    rng = random.Random(7)
    prompt = _tokens(11, 40)
    m = weights.sequence_model()
    m.prefill(prompt)
    committed = list(prompt)
    for _ in range(12):
        if len(committed) > len(prompt) and rng.random() < 0.5:
            keep = rng.randrange(len(prompt), len(committed))
            m.crop(keep)
            del committed[keep:]
        block = [rng.randrange(50000) for _ in range(rng.choice(BLOCKS))]
        got = m.extend(block)
        ref = one_token_logits(weights, prompt, committed[len(prompt):] + block)[-len(block):]
        assert torch.equal(got, ref), _mismatch(got, ref)
        committed += block


def test_a_sequence_reset_over_stale_cells_is_bitwise_a_fresh_one(quantized, invariant_weights):
    """``reset`` drops cells without zeroing them (``llama_memory_clear(..., data=False)``), in the decode context and
    the prefill context alike: a short prompt decoded over a longer one's stale cells must get bitwise what fresh
    weights (fresh, zeroed contexts) compute. Control: the same comparison tells apart a run whose earlier cells are
    still live in the sequence."""
    from constrained_spec.models.llamacpp.model import LlamaCppWeights

    weights = invariant_weights["Q4_K_M"]
    long_prompt, prompt, cont = _tokens(21, 600), _tokens(22, 9), _tokens(23, 12)
    m = weights.sequence_model()
    m.prefill(long_prompt)
    m.extend(_tokens(24, 6))
    m.reset()
    m.prefill(prompt)
    got = torch.cat([m.extend(cont[:1]), m.extend(cont[1:])])
    fresh = LlamaCppWeights(quantized["Q4_K_M"], threads=2, n_ctx=1024, batch_invariant=True)
    ref = one_token_logits(fresh, prompt, cont)
    assert torch.equal(got, ref), _mismatch(got, ref)
    live = weights.sequence_model()
    live.prefill(long_prompt)
    live.extend(prompt)
    control = torch.cat([live.extend([t]) for t in cont])
    assert not torch.equal(control, ref)


def test_a_batch_row_beside_other_rows_is_bitwise_one_token_decoding(invariant_weights):
    """Row 0 verifies blocks while rows 1 and 2 prefill, grow and roll back in the same forwards."""
    from constrained_spec.models.llamacpp.model import LlamaCppRows

    weights = invariant_weights["Q4_K_M"]
    rows = LlamaCppRows(weights, slots=3, max_length=320)
    rng = random.Random(3)
    prompts = [_tokens(20 + s, 30 + 17 * s) for s in range(3)]
    call = SimpleNamespace
    rows.forward([call(slot=s, start=0, tokens=p, head="none") for s, p in enumerate(prompts)])
    committed = [list(p) for p in prompts]
    for step in range(10):
        calls = []
        for s in range(3):
            start = len(committed[s])
            if start > len(prompts[s]) and rng.random() < 0.4:  # a rollback first
                start = rng.randrange(len(prompts[s]), start)
                del committed[s][start:]
            block = [rng.randrange(50000) for _ in range(rng.choice(BLOCKS))]
            calls.append(call(slot=s, start=start, tokens=block, head="all"))
        rng.shuffle(calls)
        out = rows.forward(calls)
        for c, got in zip(calls, out):
            ref = one_token_logits(weights, prompts[c.slot], committed[c.slot][len(prompts[c.slot]):] + c.tokens)[-len(c.tokens):]
            assert torch.equal(got, ref), f"step {step}, row {c.slot}: {_mismatch(got, ref)}"
            committed[c.slot] += c.tokens


def _chunked_row_logits(weights, prompt: list[int], block: list[int], chunk: int, eager: bool) -> torch.Tensor:
    """A row's prompt fed in chunks of ``chunk`` (head "none", as the batch coordinator feeds it), then ``block``
    verified. ``eager``: each chunk computed when it comes (the control), else as the rows do it."""
    from constrained_spec.models.llamacpp.model import LlamaCppRows

    rows = LlamaCppRows(weights, slots=2, max_length=400)
    for start in range(0, len(prompt), chunk):
        if eager:
            rows._prefill_row(1, start, prompt[start : start + chunk])
            rows.lengths[1] = start + len(prompt[start : start + chunk])
        else:
            rows.forward([SimpleNamespace(slot=1, start=start, tokens=prompt[start : start + chunk], head="none")])
    out = rows.forward([SimpleNamespace(slot=1, start=len(prompt), tokens=block, head="all")])[0]
    assert out is not None
    return out


def test_a_row_prompt_fed_in_chunks_holds_the_cache_one_sequence_prefill_makes(invariant_weights):
    """The coordinator feeds a row's prompt in chunks; the row computes them on the fast paths, cut as a single
    sequence's prefill cuts it (a prefill piece as soon as it is complete, the rest when the row is next read: before 2026-12-04 every chunk after the first ran on
    the reference paths: 93-118 s a prompt as rows against 11-17 s one at a time on the real target, 2026-12-04), and its verify is bitwise the one-token reference.
    Controls: each chunk computed as a prefill piece of its own as it comes (other pieces: other bits on this file
    since prefill pieces are 512 wide, measured 2026-12-05), and a prompt that differs in its first chunk."""
    weights = invariant_weights["Q4_K_M"]
    prompt, block = _tokens(40, 300), _tokens(41, 6)  # 300: one sequence's prefill computes it as one piece
    ref = one_token_logits(weights, prompt, block)
    got = _chunked_row_logits(weights, prompt, block, chunk=64, eager=False)
    assert torch.equal(got, ref), _mismatch(got, ref)
    assert not torch.equal(_chunked_row_logits(weights, prompt, block, chunk=64, eager=True), ref), "the eager control"
    other = _chunked_row_logits(weights, [prompt[0] + 1] + prompt[1:], block, chunk=64, eager=False)
    assert not torch.equal(other, ref), "the control: another prompt must give other logits"


def test_a_row_prompt_is_computed_a_piece_at_a_time_between_decode_steps_of_another_row(invariant_weights):
    """Issue 46 item 4: row 1's long prompt is fed in chunks (head "none") in the very forwards in which row 0 verifies
    blocks. Row 0's logits stay bitwise the one-token reference at every step; row 1's cache grows a prefill piece at a
    time while it is fed (llama.cpp's own count of its positions, not the runtime's bookkeeping: before 2026-12-05 it
    held nothing until its first read, which then computed the whole prompt and stalled row 0), and row 1's first verify
    is bitwise the one-token reference after one sequence's prefill of the same prompt."""
    import dataclasses

    from constrained_spec.models.llamacpp.model import LlamaCppRows

    weights = invariant_weights["Q4_K_M"]
    width, rule = 256, weights.pieces  # pieces of 256 (the runtime's: 512) keep the tiny file's prompts short
    weights.pieces = dataclasses.replace(rule, width=width)
    try:
        rows = LlamaCppRows(weights, slots=2, max_length=900)
        rng = random.Random(5)
        prompt0, prompt1 = _tokens(50, 40), _tokens(51, 2 * width + 120)  # 2 full pieces and a partial one
        call = SimpleNamespace
        rows.forward([call(slot=0, start=0, tokens=prompt0, head="none")])
        committed, chunk, fed = list(prompt0), 100, 0
        while fed < len(prompt1):
            block = [rng.randrange(50000) for _ in range(rng.choice(BLOCKS))]
            piece = prompt1[fed : fed + chunk]
            out = rows.forward([call(slot=1, start=fed, tokens=piece, head="none"),
                                call(slot=0, start=len(committed), tokens=block, head="all")])
            fed += len(piece)
            ref = one_token_logits(weights, prompt0, committed[len(prompt0):] + block)[-len(block):]
            assert out[0] is None and torch.equal(out[1], ref), f"row 0 after {fed} prompt tokens of row 1: {_mismatch(out[1], ref)}"
            committed += block
            held = rows._ctx.seq_length(1)
            assert held == fed - fed % width, f"row 1 holds {held} positions after {fed} fed: its complete pieces are not computed"
        block1 = _tokens(52, 6)
        got = rows.forward([call(slot=1, start=len(prompt1), tokens=block1, head="all")])[0]
        ref1 = one_token_logits(weights, prompt1, block1)
        assert torch.equal(got, ref1), f"row 1's first verify: {_mismatch(got, ref1)}"
        control = one_token_logits(weights, [prompt1[0] + 1] + prompt1[1:], block1)
        assert not torch.equal(control, ref1), "the control: another prompt must give other logits"
    finally:
        weights.pieces = rule


def test_negative_control_the_default_paths_are_not_batch_invariant(quantized):
    """The same comparison on the binding's default paths (repacked weights, no flash attention): blocks part
    from one-token decodes, so the tests above can fail."""
    weights = _weights(quantized["Q4_K_M"], False)
    assert not weights.batch_invariant
    prompt, cont = _tokens(5, 5), _tokens(6, SPAN)
    ref = one_token_logits(weights, prompt, cont)
    m = weights.sequence_model()
    m.prefill(prompt)
    got = block_logits(m, len(prompt), cont, 16)
    assert not torch.equal(got, ref)


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 999},
                                           "b": {"type": "string", "maxLength": 8}}, "required": ["a", "b"]}


def test_greedy_speculative_and_batch_rows_equal_target_only_on_the_quantized_pair(quantized, gpt2_tokenizer, tmp_path):
    """The public door on quantized files: greedy speculative output (k = 1, 4) and batched rows give the
    target-only tokens exactly (every verified position's logits are those one-token decoding gives)."""
    from constrained_spec.api import Generator

    target, draft = str(quantized["Q4_K_M"]), str(quantized["Q8_0"])
    options = dict(runtime="llamacpp", tokenizer=gpt2_tokenizer, progress=False, cache_dir=tmp_path, draft_plan="always")
    spec, alone = Generator(target, draft, **options), Generator(target, None, **options)
    batched = Generator(target, draft, max_batch_size=3, batch_max_tokens=256, **options)
    assert spec.target.weights.batch_invariant and spec.draft.weights.batch_invariant
    prompts = ["Alpha", "Give me the item: " + "word " * 6, "Order 17"]
    drafted = 0
    for prompt in prompts:
        base = alone.run(prompt, SCHEMA, max_new_tokens=40, num_draft_tokens=0)
        for k in (1, 4):
            got = spec.run(prompt, SCHEMA, max_new_tokens=40, num_draft_tokens=k)
            assert got.token_ids == base.token_ids, (prompt, k)
            drafted += got.stats.drafted_tokens
    assert drafted > 20  # the draft really proposed
    requests = [dict(prompt=p, output_type=SCHEMA, max_new_tokens=40, num_draft_tokens=1 + i) for i, p in enumerate(prompts)]
    expected = [alone.run(p, SCHEMA, max_new_tokens=40, num_draft_tokens=0).token_ids for p in prompts]
    assert [g.token_ids for g in batched.run_batch(requests)] == expected


def test_a_row_prompt_with_message_ends_is_cut_as_one_sequence_cuts_it(quantized):
    """Pieces also end after each end-of-message token (``PieceRule.stops``). A row fed a prompt holding such tokens in
    chunks of 37 computes up to the last cut it has seen (llama.cpp's own count of the row's positions), and its first
    verify is bitwise the one-token reference after one sequence's prefill of the same prompt (which keeps a previous
    prompt's cache up to a shared message end)."""
    from constrained_spec.models.llamacpp.model import LlamaCppRows
    from constrained_spec.models.llamacpp.pieces import PieceRule

    weights = _weights(quantized["Q4_K_M"], True)
    stop = 49999
    weights.pieces = PieceRule(256, frozenset({stop}))  # 256 wide (the runtime's: 512) to keep the prompt short
    prompt = _tokens(60, 90) + [stop] + _tokens(61, 200) + [stop] + _tokens(62, 30)  # cuts at 91, 256, 292
    rows = LlamaCppRows(weights, slots=2, max_length=600)
    call = SimpleNamespace
    for fed in range(0, len(prompt), 37):
        rows.forward([call(slot=1, start=fed, tokens=prompt[fed : fed + 37], head="none")])
        seen = prompt[: fed + 37]
        assert rows._ctx.seq_length(1) == weights.pieces.complete_end(0, seen), f"after {len(seen)} tokens fed"
    block = _tokens(63, 6)
    got = rows.forward([call(slot=1, start=len(prompt), tokens=block, head="all")])[0]
    weights.prefilled_state(prompt[:91] + _tokens(64, 40))  # the next prefill keeps the first message of this one
    ref = one_token_logits(weights, prompt, block)
    assert weights.prefill_reused == 91
    assert torch.equal(got, ref), f"the row's first verify: {_mismatch(got, ref)}"


def test_the_batch_prefix_cache_restores_a_row_only_at_a_prefill_cut(quantized):
    """The batch coordinator's prefix cache (``engine.prefix_cache``) hands a row the longest stored prefix of its
    prompt; on batch-invariant llama.cpp rows it is cut back to the last prefill cut, so the row computes the rest in
    the pieces a prefill from scratch uses and its first verify is bitwise the one-token reference on fresh weights.
    Control: restoring the whole common prefix (off the cuts) gives other logits."""
    from constrained_spec.engine.prefix_cache import PrefixCache
    from constrained_spec.models.llamacpp.model import LlamaCppRows
    from constrained_spec.models.llamacpp.pieces import PieceRule

    stop = 49999
    weights = _weights(quantized["Q4_K_M"], True)
    weights.pieces = PieceRule(weights.pieces.width, frozenset({stop}))
    first = _tokens(70, 60) + [stop] + _tokens(71, 50)
    second = first[:61] + first[61:91] + _tokens(72, 40)  # shares 91 tokens; the last cut within them is 61
    call = SimpleNamespace
    block = _tokens(73, 4)

    def run(rule_cut: bool) -> torch.Tensor:
        rows = LlamaCppRows(weights, slots=2, max_length=400)
        if not rule_cut:
            rows.reusable_prefix = lambda tokens, stored, length: length  # type: ignore[method-assign]
        cache = PrefixCache(1 << 30)
        rows.forward([call(slot=0, start=0, tokens=first, head="none")])
        rows._settle(0)
        cache.store(rows, 0, first)
        reused = cache.restore(rows, 1, second)
        assert reused == (61 if rule_cut else 91)
        rows.forward([call(slot=1, start=reused, tokens=second[reused:], head="none")])
        out = rows.forward([call(slot=1, start=len(second), tokens=block, head="all")])[0]
        assert out is not None
        return out

    fresh = _weights(quantized["Q4_K_M"], True)
    fresh.pieces = weights.pieces
    ref = one_token_logits(fresh, second, block)
    got = run(True)
    assert torch.equal(got, ref), _mismatch(got, ref)
    assert not torch.equal(run(False), ref)


def test_a_row_prompt_starting_with_a_head_is_cut_as_one_sequence_cuts_it(quantized):
    """A head cut (``PieceRule.heads``) on rows fed in chunks shorter than the head: the row cuts after the head once it
    has seen it whole, and its first verify is bitwise the one-token reference after one sequence's prefill on fresh
    weights with the same cuts."""
    import dataclasses

    from constrained_spec.models.llamacpp.model import LlamaCppRows

    head = _tokens(80, 13)
    weights = _weights(quantized["Q4_K_M"], True)
    assert weights.share_heads([head])
    prompt = head + _tokens(81, 50)
    rows = LlamaCppRows(weights, slots=2, max_length=300)
    call = SimpleNamespace
    for fed in range(0, len(prompt), 5):
        rows.forward([call(slot=0, start=fed, tokens=prompt[fed : fed + 5], head="none")])
        assert rows._ctx.seq_length(0) == (13 if fed + 5 >= 13 else 0)
    block = _tokens(82, 5)
    got = rows.forward([call(slot=0, start=len(prompt), tokens=block, head="all")])[0]
    fresh = _weights(quantized["Q4_K_M"], True)
    fresh.pieces = dataclasses.replace(fresh.pieces, heads=weights.pieces.heads)
    ref = one_token_logits(fresh, prompt, block)
    assert torch.equal(got, ref), _mismatch(got, ref)


def test_a_row_prompt_ending_just_after_a_message_end_is_cut_as_one_sequence_cuts_it(quantized):
    """The last message end is followed by fewer than ``tail`` tokens (the answer's header): no cut there. A row fed
    the prompt in chunks of 7 waits until the stop's cut is settled, and its first verify is bitwise the one-token
    reference after one sequence's prefill on fresh weights; the sequence's prefill made no cut at the last stop."""
    import dataclasses

    from constrained_spec.models.llamacpp.model import LlamaCppRows

    stop = 49999
    weights = _weights(quantized["Q4_K_M"], True)
    weights.pieces = dataclasses.replace(weights.pieces, stops=frozenset({stop}), tail=8)
    prompt = _tokens(90, 60) + [stop] + _tokens(91, 40) + [stop] + _tokens(92, 3)
    assert weights.pieces.cuts(0, prompt) == [61]
    rows = LlamaCppRows(weights, slots=2, max_length=300)
    call = SimpleNamespace
    for fed in range(0, len(prompt), 7):
        rows.forward([call(slot=1, start=fed, tokens=prompt[fed : fed + 7], head="none")])
    assert rows._ctx.seq_length(1) == 61  # the last stop is not settled as a cut: its piece waits
    block = _tokens(93, 4)
    got = rows.forward([call(slot=1, start=len(prompt), tokens=block, head="all")])[0]
    fresh = _weights(quantized["Q4_K_M"], True)
    fresh.pieces = weights.pieces
    ref = one_token_logits(fresh, prompt, block)
    assert torch.equal(got, ref), _mismatch(got, ref)
