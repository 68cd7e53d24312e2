"""Continuous batching on the real default pair (``pytest -m real_models``; several minutes on 2 cores).

The 8 benchmark prompts decoded together through 8 batch rows give, token for token, the greedy
outputs of one-at-a-time decoding; every value validates; sampled rows with a seed give the same
target-only output alone in the batch and among 7 speculative rows (a row's randomness is its own).
"""

from __future__ import annotations

import jsonschema
import pytest
from synthetic import rows_start_together

pytestmark = pytest.mark.real_models


@pytest.fixture(scope="module")
def pair():
    from benchmarks.workload import load_workload
    from constrained_spec.api import Generator

    serial = Generator(progress=False)
    batched = Generator(progress=False, max_batch_size=8)
    return serial, batched, load_workload(8)


def test_eight_greedy_rows_equal_one_at_a_time(pair):
    serial, batched, items = pair
    requests = [dict(prompt=i.prompt, output_type=i.schema, max_new_tokens=320) for i in items]
    with rows_start_together(batched.batch, 2):
        together = batched.run_batch(requests)
    for item, request, got in zip(items, requests, together):
        alone = serial.run(**request)
        assert got.token_ids == alone.token_ids, item.id
        jsonschema.validate(got.value, item.schema)
    assert any(n > 1 for n in batched.batch.metrics.rows_per_forward)


def test_a_seeded_sampled_row_does_not_depend_on_its_neighbours(pair):
    """This row decodes with the target alone (k = 0), the others speculatively. Its seeded sample is
    then the same alone and in a crowd: its uniforms are its own, and the target's logits of a row
    do not depend on the other rows. A speculative row's seeded sample may differ (same
    distribution): the draft length falls under load, and the int8w draft quantizes its
    activations per forward, so its q (which only changes speed) depends on the batch."""
    _, batched, items = pair
    mine = dict(prompt=items[1].prompt, output_type=items[1].schema, max_new_tokens=200, temperature=0.7, seed=11, num_draft_tokens=0)
    alone = batched.run(**mine)
    others = [dict(prompt=i.prompt, output_type=i.schema, max_new_tokens=200, temperature=1.0, seed=n) for n, i in enumerate(items[:7])]
    crowd = batched.run_batch([mine, *others])
    assert crowd[0].token_ids == alone.token_ids
