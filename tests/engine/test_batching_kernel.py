"""The batched verify through the fused Triton kernel (in the CPU interpreter, in subprocesses).

Rows with different draft lengths, padded into one call (``engine.batching.pad_verify_rows``), give
through the kernel exactly what each row gives alone through the torch reference: the padding rule
(zero q rows, the uniform 1.0, the draw uniform moved to the last column) holds for the kernel too.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from engine.test_batching import _verify_rows
from sampling.test_kernels import ARG_NAMES, HAS_TRITON, run_triton_workers

from constrained_spec.engine.batching import pad_verify_rows
from constrained_spec.sampling import verify

pytestmark = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")


def test_padded_rows_through_the_kernel_equal_each_rows_own_verify(tmp_path):
    cases, alone = [], []
    for seed in range(4):
        calls = _verify_rows(500 + seed, [0, 1, 3, 5], vocab=300)
        calls = [dataclasses.replace(c, point_mass=None) for c in calls]  # dense q rows: the kernel's worker passes no point masses
        padded, _ = pad_verify_rows(calls)
        assert padded.point_mass is None
        cases.append({**dict(zip(ARG_NAMES, padded.args())), "launch": {}})
        alone.append([c.run(verify) for c in calls])
    out = run_triton_workers(cases, tmp_path)
    for n, rows in enumerate(alone):
        for b, own in enumerate(rows):
            assert int(out["accepted"][n][b]) == int(own.accepted[0]), (n, b)
            assert int(out["next_token"][n][b]) == int(own.next_token[0]), (n, b)
            k = own.accept_prob.shape[1]
            torch.testing.assert_close(out["accept_prob"][n][b, :k].float(), own.accept_prob[0].float(), atol=1e-5, rtol=1e-4)
