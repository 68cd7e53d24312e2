"""SMC particles as rows of the continuous batch: forking a row's cache, the coordinator's parked
rows, and ``Generator.run(alignment="smc")`` on a batched Generator.

A forked row's next logits are checked against a fresh forward of its whole sequence (a new cache,
nothing copied) for the torch ragged cache (packed and padded forwards) and llama.cpp's unified
cache; a negative control probes one position off. The distribution of SMC over batch rows is
tested against the exact enumeration in ``test_smc.py``.
"""

from __future__ import annotations

import random
import threading

import pytest
import torch
from synthetic import BatchedPrefixModel, PrefixModel
from tiny_models import tiny_llama

from constrained_spec.engine.batching import BatchCoordinator
from constrained_spec.errors import ConfigError
from constrained_spec.models.torch.batched import BatchedHFModel, RowCall
from constrained_spec.models.torch.hf import HFModel


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "padded"])
def test_a_forked_torch_row_continues_like_a_fresh_forward(packed):
    """Slot 0 holds a prompt and a rejected tail; it forks into slot 2 (which held another
    sequence, longer) at the committed length; then source and fork extend by different blocks in
    one forward, and each block's logits equal a fresh forward of its whole sequence."""
    hf = HFModel(tiny_llama(500, seed=3))
    batched = BatchedHFModel(HFModel(tiny_llama(500, seed=3)), slots=3, max_length=64)
    batched.packed = packed
    rng = random.Random(5)
    seq = [rng.randrange(500) for _ in range(12)]
    batched.forward([RowCall(0, 0, seq + [1, 2, 3], head="none"), RowCall(2, 0, [rng.randrange(500) for _ in range(30)], head="none")])
    batched.copy_rows(0, 2, len(seq))  # the tail [1, 2, 3] was rejected: only 12 positions fork
    a, b = [rng.randrange(500) for _ in range(3)], [rng.randrange(500) for _ in range(2)]
    got = batched.forward([RowCall(0, len(seq), a), RowCall(2, len(seq), b)])
    for block, logits in zip((a, b), got):
        hf.reset()
        fresh = hf.extend(seq + block)[-len(block):]
        assert logits is not None
        torch.testing.assert_close(logits, fresh, atol=2e-4, rtol=1e-4)
    hf.reset()
    off = hf.extend(seq[:-1] + b)[-1]  # negative control: one position off
    assert got[1] is not None and not torch.allclose(got[1][-1], off, atol=1e-3)


def test_a_forked_llamacpp_row_shares_cells_and_each_side_continues_alone(tiny_ggufs):
    """llama.cpp: the fork shares the source's cells (``llama_memory_seq_cp``); the fork rolls
    back into the shared part and extends, then the source extends past it: both equal fresh
    decodes (a crop of one sequence leaves the other's cells)."""
    from constrained_spec.models.llamacpp.model import LlamaCppRows, LlamaCppWeights

    weights = LlamaCppWeights(tiny_ggufs[0], threads=1, n_ctx=256)
    rows = LlamaCppRows(weights, slots=2, max_length=64)
    rng = random.Random(6)
    seq = [rng.randrange(50000) for _ in range(9)]
    rows.forward([RowCall(0, 0, seq, head="none"), RowCall(1, 0, [5, 6, 7], head="none")])
    rows.copy_rows(0, 1, len(seq))
    fork_block, source_block = [11, 12], [13, 14, 15]
    got_fork = rows.forward([RowCall(1, 5, fork_block)])[0]  # rolls back 4 shared positions first
    got_source = rows.forward([RowCall(0, len(seq), source_block)])[0]

    def fresh(tokens):
        return weights.sequence_model().extend(tokens)[-1]

    def close(a, b):
        return float((a - b).abs().max()) <= 1e-3 * float(b.abs().max())

    assert got_fork is not None and got_source is not None
    assert close(got_fork[-1], fresh(seq[:5] + fork_block))
    assert close(got_source[-1], fresh(seq + source_block))
    assert not close(got_source[-1], fresh(seq[:5] + source_block))  # negative control
    with pytest.raises(ValueError):
        rows.copy_rows(1, 0, 30)  # more than the source holds


def test_parked_rows_hold_slots_without_stalling_other_rows():
    """Reserved rows start parked: a row of another request runs its forwards alone meanwhile; a
    woken row's job waits for the other active rows'; a fork copies a slot's rows between rounds;
    more rows than slots is refused; the slots come back."""
    backend = BatchedPrefixModel(PrefixModel(10, seed=1), slots=3, max_length=32)
    batch = BatchCoordinator({"target": backend}, prefix_cache_bytes=0)
    with pytest.raises(ConfigError):
        batch.reserve(4)
    mine = batch.reserve(2)
    other = batch.acquire()
    assert sorted(mine + [other]) == [0, 1, 2]
    row = batch.rows("target", other)
    row.extend([1, 2])  # alone: two parked rows do not hold it up
    first = batch.rows("target", mine[0])
    first.extend([3, 4, 5])
    batch.copy_row(mine[0], mine[1], {"target": 2})
    fork = batch.rows("target", mine[1], 2)
    assert backend.tokens[mine[1]] == [3, 4]
    batch.wake(1)
    out: dict[str, torch.Tensor] = {}
    woken = threading.Thread(target=lambda: out.setdefault("fork", fork.extend([6])))
    woken.start()
    woken.join(0.2)
    assert woken.is_alive()  # waits for the other active row's job: they share the round
    out["row"] = row.extend([7])
    woken.join(5)
    batch.park()
    assert backend.rows_per_forward[-1] == 2
    torch.testing.assert_close(out["fork"][0], backend.model.logits([3, 4, 6]))
    batch.release(other)
    batch.unreserve(mine)
    assert sorted(batch.reserve(3)) == [0, 1, 2]


def test_generator_runs_smc_particles_as_batch_rows(tiny_generator):
    """A batched Generator runs an SMC request's 4 particles as batch rows: forwards of several
    rows, the prompt prefilled once (then restored from the prefix cache by the next request);
    a request of more particles than slots runs them one after another; both return valid values."""
    gen = tiny_generator(max_batch_size=4)
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["a"]}
    metrics = gen.batch.metrics
    got = gen.run("A JSON object:", schema, alignment="smc", particles=4, temperature=1.0, seed=3, max_new_tokens=24)
    assert set(got.value) == {"a"} and len(got.smc.particles) == 4
    assert max(metrics.rows_per_forward) >= 2
    prompt = got.prompt_tokens
    assert metrics.prefill_tokens == 2 * (prompt - 1)  # target and draft, once each
    again = gen.run("A JSON object:", schema, alignment="smc", particles=4, temperature=1.0, seed=3, max_new_tokens=24)
    assert metrics.reused_tokens >= prompt - 1
    assert again.token_ids == got.token_ids and again.smc.log_z == got.smc.log_z  # seeded: the same
    rounds = metrics.rounds
    wide = gen.run("A JSON object:", schema, alignment="smc", particles=6, temperature=1.0, seed=3, max_new_tokens=24)
    assert set(wide.value) == {"a"} and len(wide.smc.particles) == 6 and metrics.rounds == rounds
