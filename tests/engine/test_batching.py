"""Continuous batching: rows that share every forward stay exact, aligned and independent.

* distribution: rows with different grammars, temperatures, top-k/top-p and draft lengths decode
  together (joining and leaving the batch after every sample); each row's samples pass a chi-square
  against the exact enumeration of its own constrained target, and a row with a wrong verifier in
  the same batch fails it (negative control);
* alignment: after many ragged rejections, each row of the batched cache gives the logits of a
  fresh full forward over its tokens;
* identity: greedy rows are token-identical to single-sequence runs, with rows joining, leaving,
  cancelled or out of budget around them.
"""

from __future__ import annotations

import dataclasses
import random
import threading
from collections import Counter

import pytest
import torch
from engine.test_distribution import PROMPT, REGEX, MemoModel, chi2_pvalue, exact_distribution, verify_resample_from_p
from synthetic import BatchedPrefixModel, letters_vocab, make_decoder, rows_start_together
from tiny_models import tiny_llama

from constrained_spec.engine.batching import BatchCoordinator
from constrained_spec.engine.draft_length import batch_draft_length
from constrained_spec.engine.prefix_cache import PrefixCache, common_prefix
from constrained_spec.grammar.backends.outlines_core import AutomatonCompiler
from constrained_spec.models.torch.batched import BatchedHFModel, RowCall
from constrained_spec.models.torch.hf import HFModel
from constrained_spec.sampling import SamplingPolicy, verify
from constrained_spec.sampling.verifier import VerifyCall

ALPHA = 1e-3
SAMPLES = 2000  # the wrong verifier row gives p ~ 1e-90 at 2500 samples; correct rows p > 0.7


def _coordinator(slots: int) -> BatchCoordinator:
    target = BatchedPrefixModel(MemoModel(10, seed=11), slots=slots)
    draft = BatchedPrefixModel(MemoModel(10, seed=22, scale=2.0), slots=slots)
    return BatchCoordinator({"target": target, "draft": draft}, slots, prefix_cache_bytes=0)


def _sample_rows(rows: list[dict], samples: int) -> tuple[list[Counter], BatchCoordinator]:
    """Run every row on its own thread, ``samples`` decodes each, all in one batch; counts per row."""
    coordinator = _coordinator(len(rows))
    counts = [Counter() for _ in rows]
    errors: list[BaseException] = []

    def work(i: int, row: dict) -> None:
        gen = torch.Generator().manual_seed(100 + i)
        automaton = AutomatonCompiler(letters_vocab(), disk_cache=False, compile_timeout=None).compile(row["regex"])
        try:
            for _ in range(samples):
                slot = coordinator.acquire()
                try:
                    # correct rows verify through the batched call; the wrong verifier runs on its own row
                    verifier = row.get("verifier") or coordinator.verifier(verify)
                    dec = make_decoder(coordinator.rows("target", slot), coordinator.rows("draft", slot), automaton, row["policy"],
                                       num_draft_tokens=row["k"], max_new_tokens=16, generator=gen,
                                       verifier=verifier, debug_checks=True)
                    dec.run(PROMPT)
                    counts[i][tuple(dec.generated)] += 1
                finally:
                    coordinator.release(slot)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, row)) for i, row in enumerate(rows)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return counts, coordinator


def test_rows_of_one_batch_each_match_their_own_exact_distribution():
    rows = [
        dict(regex=REGEX, policy=SamplingPolicy(temperature=1.0), k=3),
        dict(regex=r"c(a|b){1,3}", policy=SamplingPolicy(temperature=0.7, top_k=3), k=1),
        dict(regex=REGEX, policy=SamplingPolicy(temperature=1.0, top_p=0.9), k=5),
        dict(regex=REGEX, policy=SamplingPolicy(temperature=1.0), k=3, verifier=verify_resample_from_p),  # wrong
    ]
    counts, coordinator = _sample_rows(rows, SAMPLES)
    pvalues = [chi2_pvalue(c, exact_distribution(row["regex"], row["policy"])) for c, row in zip(counts, rows)]
    assert all(p > ALPHA for p in pvalues[:3]), pvalues
    assert pvalues[3] < ALPHA, f"the wrong verifier's row passed: p={pvalues[3]}"
    shared = [n for n in coordinator.models["target"].rows_per_forward if n > 1]
    assert len(shared) > SAMPLES // 2, "the rows hardly ever shared a target forward"
    verifies = coordinator.metrics.rows_per_verify
    assert sum(c for n, c in verifies.items() if n > 1) > SAMPLES // 2, verifies


def _verify_rows(seed: int, ks: list[int], vocab: int = 40):
    """One-row verifier calls with random logits, q, masks, policies and uniforms, one per k."""
    from constrained_spec.sampling.distribution import effective_probs

    g = torch.Generator().manual_seed(seed)
    calls = []
    for i, k in enumerate(ks):
        logits = torch.randn(1, k + 1, vocab, generator=g) * 3
        allowed = torch.rand(1, k + 1, vocab, generator=g) < 0.6
        allowed[..., 0] = True
        words = (vocab + 31) // 32
        bits = torch.zeros(1, k + 1, words, dtype=torch.int64)
        for v in range(vocab):
            bits[..., v // 32] |= allowed[..., v].long() << (v % 32)
        mask = torch.where(bits >= 2**31, bits - 2**32, bits).to(torch.int32)
        policy = SamplingPolicy(temperature=[1.0, 0.7, 0.0][i % 3], top_k=[0, 5, 0][i % 3], top_p=[1.0, 1.0, 0.9][i % 3]).as_tensors(1)
        q = effective_probs(torch.randn(1, max(k, 1), vocab, generator=g) * 3, allowed[:, : max(k, 1)], policy.temperature, policy.top_k, policy.top_p)[:, :k]
        tokens = torch.multinomial(q[0], 1, generator=g).T if k else torch.zeros(1, 0, dtype=torch.long)
        flags = torch.rand(1, k, generator=g) < 0.3
        uniforms = torch.rand(1, k + 1, generator=g)
        calls.append(VerifyCall(logits, q, tokens, mask, policy.temperature, policy.top_k, policy.top_p, uniforms, flags))
    return calls


@pytest.mark.parametrize("seed", range(6))
def test_padded_batched_verify_equals_each_rows_own_verify(seed):
    from constrained_spec.engine.batching import pad_verify_rows

    ks = [0, 1, 3, 5, 2, 5, 4][: 3 + seed % 5]
    calls = _verify_rows(seed, ks)
    padded, got_ks = pad_verify_rows(calls)
    batched = padded.run(verify)
    assert got_ks == ks and padded.k == max(ks)
    for b, call in enumerate(calls):
        alone = call.run(verify)
        assert int(batched.accepted[b]) == int(alone.accepted[0])
        assert int(batched.next_token[b]) == int(alone.next_token[0])
        torch.testing.assert_close(batched.accept_prob[b, : ks[b]], alone.accept_prob[0])


@pytest.mark.parametrize("wrong", ["pads-as-point-masses", "draw-uniform-left-in-place"])
def test_careless_padding_changes_rows(wrong):
    """Negative controls: padded positions flagged as point masses can be kept (p of the pad token
    is often > 0), and a row's draw uniform left at its own column k_b is not the one the draw
    reads; either changes some rows' results, so the equality test above can fail."""
    from constrained_spec.engine.batching import pad_verify_rows

    differs = 0
    for seed in range(20):
        ks = [0, 1, 5]
        calls = _verify_rows(100 + seed, ks)
        padded, _ = pad_verify_rows(calls)
        if wrong == "pads-as-point-masses":
            flags = torch.ones(len(ks), max(ks), dtype=torch.bool)
            for b, (call, k) in enumerate(zip(calls, ks)):
                flags[b, :k] = call.point_mass[0]
            padded = dataclasses.replace(padded, point_mass=flags)
        else:
            for b, (call, k) in enumerate(zip(calls, ks)):
                padded.uniforms[b, k] = call.uniforms[0, k]
                padded.uniforms[b, max(ks)] = 0.999 if k < max(ks) else call.uniforms[0, k]
        batched = padded.run(verify)
        for b, call in enumerate(calls):
            alone = call.run(verify)
            differs += (int(batched.accepted[b]), int(batched.next_token[b])) != (int(alone.accepted[0]), int(alone.next_token[0]))
    assert differs > 0


@pytest.mark.slow  # the default run has the same wrong verifier's row inside the batch (above)
def test_negative_control_alone_differs_from_a_correct_row_with_the_same_settings():
    """The same wrong verifier also fails when its row is the only one (the batch is not what fails it)."""
    row = dict(regex=REGEX, policy=SamplingPolicy(temperature=1.0), k=3, verifier=verify_resample_from_p)
    counts, _ = _sample_rows([row], SAMPLES)
    assert chi2_pvalue(counts[0], exact_distribution(REGEX, row["policy"])) < ALPHA


# -- cache alignment --------------------------------------------------------------------------
@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_each_row_matches_a_fresh_forward_after_ragged_rejections(packed):
    torch.manual_seed(0)
    hf = HFModel(tiny_llama(500, seed=3))
    batched = BatchedHFModel(HFModel(tiny_llama(500, seed=3)), slots=4, max_length=200)
    assert batched.packed  # sdpa models run packed by default
    batched.packed = packed
    rng = random.Random(7)
    committed: list[list[int]] = [[rng.randrange(500) for _ in range(rng.randrange(2, 30))] for _ in range(4)]
    for slot, seq in enumerate(committed):  # prompts, one slot at a time, in two chunks
        half = len(seq) // 2
        batched.forward([RowCall(slot, 0, seq[:half], head="none")])
        batched.forward([RowCall(slot, half, seq[half:], head="none")])
    for _ in range(40):  # steps: some rows extend by a ragged block, then roll back a random share of it
        rows = rng.sample(range(4), rng.randrange(1, 5))
        calls = []
        for slot in rows:
            block = [rng.randrange(500) for _ in range(rng.randrange(1, 7))]
            calls.append(RowCall(slot, len(committed[slot]), block))
        batched.forward(calls)
        for call in calls:
            keep = rng.randrange(0, len(call.tokens) + 1)
            committed[call.slot] += call.tokens[:keep]  # the rest is rejected: only the length says so
    probe = [RowCall(slot, len(seq), [rng.randrange(500)]) for slot, seq in enumerate(committed)]
    got = batched.forward(probe)
    for call, logits in zip(probe, got):
        hf.reset()
        fresh = hf.extend(committed[call.slot] + call.tokens)[-1]
        assert logits is not None
        torch.testing.assert_close(logits[-1], fresh, atol=2e-4, rtol=1e-4)
    # negative control: a row probed one position off does not match
    hf.reset()
    off = hf.extend(committed[0][:-1] + probe[0].tokens)[-1]
    assert not torch.allclose(got[0][-1], off, atol=1e-3)


def test_sdpa_outside_packed_forwards_is_unchanged():
    """Once the packed attention is installed, every other sdpa call is still plain sdpa: a model
    gives the logits of the same model with eager attention (which never goes through it)."""
    from constrained_spec.models.torch import ragged_attention

    assert ragged_attention.install() and ragged_attention.installed()
    sdpa = tiny_llama(300, seed=6)
    eager = tiny_llama(300, seed=6)
    eager.config._attn_implementation = "eager"
    a, b = HFModel(sdpa), HFModel(eager)
    ids = list(range(5, 40))
    torch.testing.assert_close(a.extend(ids[:30]), b.extend(ids[:30]), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(a.extend(ids[30:]), b.extend(ids[30:]), atol=1e-4, rtol=1e-4)  # q_len > 1 over a past


def test_restricted_and_prefix_heads_match_the_full_head():
    model = HFModel(tiny_llama(500, seed=4))
    model.set_head_prefix(100)
    batched = BatchedHFModel(model, slots=2, max_length=64)
    allowed = torch.tensor([3, 77, 150, 499])
    full, restricted, prefix = batched.forward([RowCall(0, 0, [5, 6, 7]), RowCall(1, 0, [5, 6, 7], head="restricted", allowed_ids=allowed)])[0], None, None
    restricted = batched.forward([RowCall(1, 3, [8], head="restricted", allowed_ids=allowed)])[0]
    full = batched.forward([RowCall(0, 3, [8])])[0]
    prefix = batched.forward([RowCall(0, 3, [8], head="prefix")])[0]
    torch.testing.assert_close(restricted[allowed], full[-1][allowed], atol=1e-4, rtol=1e-4)
    assert torch.isinf(restricted[[0, 1, 2]]).all()
    torch.testing.assert_close(prefix[:100], full[-1][:100], atol=1e-4, rtol=1e-4)
    assert torch.isinf(prefix[100:]).all()


def test_a_forward_past_the_slot_length_is_refused():
    batched = BatchedHFModel(HFModel(tiny_llama(100, seed=5)), slots=1, max_length=8)
    with pytest.raises(ValueError, match="exceed"):
        batched.forward([RowCall(0, 5, [1, 2, 3, 4])])


# -- prefix cache and draft length -------------------------------------------------------------
def test_prefix_cache_reuses_the_longest_common_prefix_and_evicts_by_bytes():
    backend = BatchedPrefixModel(MemoModel(10, seed=11), slots=2)
    cache = PrefixCache(max_bytes=8 * 40, min_prefix=4)  # int64 tokens: room for 40 tokens
    backend.tokens[0] = list(range(10)) * 2
    cache.store(backend, 0, backend.tokens[0])
    assert cache.restore(backend, 1, list(range(10)) + [9, 9]) == 10
    assert backend.tokens[1] == list(range(10))
    assert cache.restore(backend, 1, [9, 9, 9, 9, 9]) == 0  # no common prefix
    backend.tokens[0] = [7] * 30
    cache.store(backend, 0, backend.tokens[0])  # 20 + 30 tokens > 40: the first entry goes
    assert len(cache) == 1 and cache.restore(backend, 1, list(range(10))) == 0
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2


def test_draft_length_falls_as_rows_are_added():
    ks = [batch_draft_length(rows, 8) for rows in (1, 2, 4, 8, 32)]
    assert ks[0] == 8 and ks == sorted(ks, reverse=True) and ks[-1] >= 1 and ks[-1] < ks[0]


# -- greedy identity on tiny transformers models -------------------------------------------------
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 999},
                                           "b": {"type": "string", "maxLength": 8}}, "required": ["a", "b"]}


@pytest.fixture(scope="module")
def generators(tiny_generator):
    single = tiny_generator()
    batched = tiny_generator(max_batch_size=4, prefix_cache_mb=64)
    return single, batched


def test_greedy_rows_equal_single_runs_with_rows_joining_and_leaving(generators):
    single, batched = generators
    requests = [dict(prompt=f"Item {i}: " + "word " * (3 * i), output_type=SCHEMA, max_new_tokens=40 + 5 * i,
                     num_draft_tokens=1 + i % 4) for i in range(7)]
    expected = [single.run(**r).token_ids for r in requests]
    with rows_start_together(batched.batch, 2):
        got = batched.run_batch(requests)  # 7 requests through 4 slots: rows join as others leave
    assert [g.token_ids for g in got] == expected
    hist = batched.batch.metrics.rows_per_forward
    assert any(n > 1 for n in hist), hist
    assert batched.batch.active_rows == 0


def test_cancelled_and_over_budget_rows_leave_the_others_unchanged(generators):
    single, batched = generators

    class Stop(Exception):
        pass

    def cancel_after_two(ids, seen=[]):  # noqa: B006 - counts calls of this one request
        seen.append(ids)
        if len(seen) >= 2:
            raise Stop()

    requests = [dict(prompt="Alpha", output_type=SCHEMA, max_new_tokens=60),
                dict(prompt="Beta", output_type=SCHEMA, max_new_tokens=60, on_tokens=cancel_after_two),
                dict(prompt="Gamma", output_type=SCHEMA, max_new_tokens=3),  # cannot finish: budget error
                dict(prompt="Delta", output_type=SCHEMA, max_new_tokens=60)]
    got = batched.run_batch(requests, return_exceptions=True)
    assert isinstance(got[1], Stop)
    assert type(got[2]).__name__ == "TokenBudgetExceeded"
    assert len(got[2].token_ids) == 3 and got[2].prompt_tokens > 0  # a row's overrun carries its partial output
    assert got[2].partial_text == batched.vocab.decode(got[2].token_ids)
    for i in (0, 3):
        assert got[i].token_ids == single.run(requests[i]["prompt"], SCHEMA, max_new_tokens=60).token_ids
    assert batched.batch.active_rows == 0 and sorted(batched.batch._free) == [0, 1, 2, 3]


def test_a_repeated_prompt_reuses_its_prefix_and_decodes_the_same(generators):
    single, batched = generators
    prompt = "A long shared system prompt. " * 8 + "Now the item."
    before = batched.batch.metrics.reused_tokens
    first = batched.run(prompt, SCHEMA, max_new_tokens=60)
    second = batched.run(prompt, SCHEMA, max_new_tokens=60)
    assert batched.batch.metrics.reused_tokens - before >= 2 * 40  # target and draft both reused it
    assert first.token_ids == second.token_ids == single.run(prompt, SCHEMA, max_new_tokens=60).token_ids


def test_prefill_budget_fills_the_batch_first():
    from constrained_spec.engine.batching import _Job

    coordinator = BatchCoordinator({"target": BatchedPrefixModel(MemoModel(10, seed=11), slots=4)}, 4, prefill_chunk=8,
                                   idle_prefill_chunk=64, prefix_cache_bytes=0)

    def job(slot, prefill):
        return _Job("target", RowCall(slot, 0, [1, 2, 3]), prefill=prefill)

    assert coordinator._prefill_budget([], [job(0, True)]) == 64  # nobody decodes
    assert coordinator._prefill_budget([job(0, False)], [job(0, False), job(1, True), job(2, True)]) == 64  # mostly prompts
    assert coordinator._prefill_budget([job(0, False), job(1, False)], [job(0, False), job(1, False), job(2, True)]) == 8


def test_batched_rows_prefill_through_the_prefill_twin_like_single_runs(tiny_generator):
    """With prefill_dtype set, batch rows prefill through the same twin as one-at-a-time decoding
    (greedy outputs equal), and the twin really ran (its forward hook fired)."""
    single = tiny_generator(prefill_dtype="bf16")
    batched = tiny_generator(max_batch_size=3, prefill_dtype="bf16", prefix_cache_mb=0)
    twin = batched.target._prefill_twin
    assert twin is not None
    calls = []
    handle = twin.register_forward_hook(lambda *a: calls.append(1))
    try:
        requests = [dict(prompt=f"Row {i} " + "x " * (10 * i), output_type=SCHEMA, max_new_tokens=40) for i in range(3)]
        got = batched.run_batch(requests)
    finally:
        handle.remove()
    assert calls
    assert [g.token_ids for g in got] == [single.run(**r).token_ids for r in requests]


def test_adaptive_k_on_batch_rows_varies_block_lengths_and_keeps_greedy_output(tiny_generator):
    """``adaptive=True`` on a batching Generator: rows end blocks where one more position is not
    worth its cost (``length_stops``, which fixed k never counts), the draft still proposes, the
    rows hand their learnt costs back to the Generator's state, and greedy rows equal greedy
    target-only decoding token for token."""
    batched = tiny_generator(max_batch_size=2, prefix_cache_mb=0, adaptive=True, num_draft_tokens=4)
    target_only = tiny_generator(draft=False)
    requests = [dict(prompt=f"Row {i}: " + "word " * (2 * i), output_type=SCHEMA, max_new_tokens=40) for i in range(4)]
    with rows_start_together(batched.batch, 2):
        got = batched.run_batch(requests)
    assert [g.token_ids for g in got] == [target_only.run(**r).token_ids for r in requests]
    assert sum(g.stats.length_stops for g in got) > 0, [g.stats.as_dict() for g in got]
    assert sum(g.stats.model_proposed for g in got) > 0
    assert batched.draft_length.target.seconds and batched.draft_length.draft.seconds  # learnt by the rows
    assert any(n > 1 for n in batched.batch.metrics.rows_per_forward)  # the rows really shared forwards
    fixed = tiny_generator(max_batch_size=2, prefix_cache_mb=0, num_draft_tokens=4).run_batch(requests[:2])
    assert sum(g.stats.length_stops for g in fixed) == 0  # control: fixed k never ends a block by cost
