"""The verification math alone: exact acceptance numbers, residuals, masks, greedy, edge cases."""

from __future__ import annotations

import torch

from constrained_spec.sampling.acceptance import acceptance_probs, residual, verify
from constrained_spec.sampling.distribution import SamplingPolicy, draw, effective_probs, pack_bitmask, unpack_bitmask


def _params(batch: int, **kw):
    return SamplingPolicy(**kw).as_tensors(batch)


def test_three_token_example_exact_numbers():
    p = torch.tensor([0.60, 0.30, 0.10])
    q = torch.tensor([0.50, 0.40, 0.10])
    acc = acceptance_probs(p.expand(1, 3, 3), q.expand(1, 3, 3), torch.tensor([[0, 1, 2]]))
    assert torch.allclose(acc, torch.tensor([[1.0, 0.75, 1.0]]))
    total = float((q * acc[0]).sum())
    assert abs(total - 0.90) < 1e-6
    r = residual(p, q)
    assert torch.allclose(r, torch.tensor([1.0, 0.0, 0.0]))
    # combined: P(out = x) = q(x) * acc(x) + (1 - total) * r(x) == p(x), exactly
    combined = q * acc[0] + (1 - total) * r
    assert torch.allclose(combined, p, atol=1e-6)


def test_forbidden_draft_token_gets_p_zero_and_is_always_rejected():
    vocab = 3
    logits = torch.log(torch.tensor([0.6, 0.3, 0.1])).expand(1, 2, vocab)
    allowed = torch.tensor([[True, True, False], [True, True, True]]).unsqueeze(0)
    q = torch.tensor([[[0.2, 0.2, 0.6]]])
    params = _params(1)
    for u in torch.linspace(0, 0.999, 50):
        out = verify(logits, q, torch.tensor([[2]]), pack_bitmask(allowed), params.temperature, params.top_k, params.top_p,
                     torch.tensor([[float(u), float(u)]]))
        assert int(out.accepted[0]) == 0
        assert float(out.accept_prob[0, 0]) == 0.0
        assert int(out.next_token[0]) in (0, 1)  # the residual holds allowed tokens only


def test_residual_zero_mass_falls_back_to_p_without_nan():
    p = torch.tensor([0.5, 0.5, 0.0])
    r = residual(p, p.clone())
    assert torch.isfinite(r).all() and torch.allclose(r, p)
    tiny = residual(p, p - 1e-9)
    assert torch.isfinite(tiny).all() and abs(float(tiny.sum()) - 1) < 1e-6


def test_single_allowed_token_is_a_point_mass_in_every_mode():
    logits = torch.randn(3, 1, 7)
    allowed = torch.zeros(3, 1, 7, dtype=torch.bool)
    allowed[:, :, 4] = True
    temp = torch.tensor([1.0, 0.0, 0.7])
    probs = effective_probs(logits, allowed, temp, torch.tensor([0, 2, 0]), torch.tensor([1.0, 1.0, 0.5]))
    assert torch.equal(probs[:, 0].argmax(-1), torch.tensor([4, 4, 4]))
    assert torch.allclose(probs.sum(-1), torch.ones(3, 1))


def test_effective_probs_order_mask_temperature_topk_topp():
    logits = torch.tensor([[[2.0, 1.0, 0.5, 0.0, -1.0]]])
    allowed = torch.tensor([[[False, True, True, True, True]]])
    # mask drops token 0; T = 0.5 sharpens; top-k 3 keeps 1, 2, 3; top-p 0.8 keeps the shortest prefix >= 0.8
    probs = effective_probs(logits, allowed, torch.tensor([0.5]), torch.tensor([3]), torch.tensor([0.8]))[0, 0]
    z = torch.softmax(torch.tensor([1.0, 0.5, 0.0]) / 0.5, 0)
    keep = 2 if float(z[0]) < 0.8 else 1
    expect = torch.zeros(5)
    expect[1 : 1 + keep] = z[:keep] / z[:keep].sum()
    assert torch.allclose(probs, expect, atol=1e-6)
    greedy = effective_probs(logits, allowed, torch.tensor([0.0]), torch.tensor([0]), torch.tensor([1.0]))[0, 0]
    assert torch.equal(greedy, torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0]))


def test_greedy_keeps_draft_while_it_equals_masked_argmax():
    vocab, k = 6, 4
    torch.manual_seed(0)
    logits = torch.randn(1, k + 1, vocab)
    allowed = torch.ones(1, k + 1, vocab, dtype=torch.bool)
    allowed[0, 2, logits[0, 2].argmax()] = False  # the mask changes the argmax at position 2
    target_argmax = logits.masked_fill(~allowed, float("-inf")).argmax(-1)[0]
    drafted = target_argmax[:k].clone()
    q = torch.nn.functional.one_hot(drafted, vocab).float().unsqueeze(0)
    params = _params(1, temperature=0.0)
    out = verify(logits, q, drafted.unsqueeze(0), pack_bitmask(allowed), params.temperature, params.top_k, params.top_p, torch.rand(1, k + 1))
    assert int(out.accepted[0]) == k and int(out.next_token[0]) == int(target_argmax[k])
    wrong = drafted.clone()
    wrong[1] = (wrong[1] + 1) % vocab
    q = torch.nn.functional.one_hot(wrong, vocab).float().unsqueeze(0)
    out = verify(logits, q, wrong.unsqueeze(0), pack_bitmask(allowed), params.temperature, params.top_k, params.top_p, torch.rand(1, k + 1))
    assert int(out.accepted[0]) == 1 and int(out.next_token[0]) == int(target_argmax[1])


def test_bitmask_roundtrip_and_draw_never_picks_zero_mass():
    allowed = torch.rand(4, 3, 77) > 0.6
    assert torch.equal(unpack_bitmask(pack_bitmask(allowed), 77), allowed)
    probs = torch.tensor([0.0, 0.3, 0.0, 0.7, 0.0])
    u = torch.linspace(0, 1 - 1e-9, 1000)
    picks = draw(probs.expand(1000, 5), u)
    assert set(picks.tolist()) == {1, 3}
    assert abs(float((picks == 1).float().mean()) - 0.3) < 0.01
