"""fp16-packed linear layers: the model they give, and that rows batched equal rows one at a time."""

from __future__ import annotations

import pytest
import torch

from constrained_spec.cpu_linear import PackedFp16Linear, pack_linears, packing_available
from constrained_spec.errors import ModelLoadError
from constrained_spec.models import HFModel
from tiny_models import tiny_llama

pytestmark = pytest.mark.skipif(not packing_available(), reason="torch build without fbgemm")


def test_packed_linear_is_the_linear_with_fp16_rounded_weights():
    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 200)
    x = torch.randn(3, 5, 96)
    packed = PackedFp16Linear(lin)
    rounded = torch.nn.functional.linear(x, lin.weight.half().float(), lin.bias)
    exact = lin(x)
    y = packed(x)
    assert y.shape == (3, 5, 200) and y.dtype == torch.float32
    assert torch.allclose(y, rounded, atol=1e-4)
    # the rounding is real: the fp32 linear differs by more than the tolerance used above
    assert (y - exact).abs().max() > 1e-4


@pytest.mark.parametrize("rows", [2, 5, 9])
def test_a_block_of_rows_equals_the_rows_one_at_a_time(rows):
    """Greedy speculative output equals target-only output only if a verify of k+1 tokens gives
    the logits that k+1 single-token forwards give."""
    torch.manual_seed(1)
    packed = PackedFp16Linear(torch.nn.Linear(512, 1024))
    x = torch.randn(rows, 512)
    block = packed(x)
    single = torch.cat([packed(x[i : i + 1]) for i in range(rows)])
    assert torch.allclose(block, single, atol=1e-5, rtol=1e-5)


def test_pack_linears_replaces_every_linear_and_keeps_the_head_weight():
    model = tiny_llama(300, seed=4)
    ids = torch.randint(0, 300, (1, 10))
    with torch.no_grad():
        before = model(input_ids=ids).logits
    n_linear = sum(type(m) is torch.nn.Linear for m in model.modules())
    assert pack_linears(model) == n_linear > 0
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    head = model.get_output_embeddings()
    assert isinstance(head, PackedFp16Linear) and head.weight is not None and head.weight.dtype == torch.float16
    with torch.no_grad():
        after = model(input_ids=ids).logits
    scale = before.abs().max()
    assert (after - before).abs().max() < 1e-2 * scale
    assert HFModel(model).can_restrict_head


def test_packing_refuses_non_fp32_weights():
    with pytest.raises(ModelLoadError, match="fp32"):
        PackedFp16Linear(torch.nn.Linear(4, 4).to(torch.bfloat16))
