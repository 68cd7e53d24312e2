"""The verifier convention is written once (``sampling.verifier``): a verifier made by ``verifier_of``
takes VerifyCall's fields, positional or by name, and hands its implementation one VerifyCall."""

from __future__ import annotations

import inspect

import pytest
import torch

from constrained_spec.sampling.acceptance import verify
from constrained_spec.sampling.verifier import VerifyCall, VerifyResult, verifier_of

NAMES = ["target_logits", "draft_probs", "draft_tokens", "bitmask", "temperature", "top_k", "top_p", "uniforms"]


def _tensors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    batch, k, vocab = 2, 3, 40
    q = torch.softmax(torch.randn(batch, k, vocab, generator=g), -1)
    return [torch.randn(batch, k + 1, vocab, generator=g), q, torch.randint(0, vocab, (batch, k), generator=g),
            torch.full((batch, k + 1, 2), -1, dtype=torch.int32), torch.tensor([1.0, 0.7]), torch.tensor([0, 5]), torch.tensor([1.0, 0.9]),
            torch.rand(batch, k + 1, generator=g)]


def test_a_verifier_gathers_its_arguments_into_one_call() -> None:
    seen: list[tuple[VerifyCall, dict]] = []

    def impl(call: VerifyCall, **options: object) -> VerifyResult:
        seen.append((call, options))
        return VerifyResult(call.draft_tokens[:, 0], call.draft_tokens[:, 0], call.uniforms)

    v = verifier_of(impl, "probe")
    args, flags = _tensors(), torch.tensor([[True, False, False], [False, False, True]])
    v(*args, flags, filters=True, block=64)
    v(*args, point_mass=flags, filters=True, block=64)
    v(**dict(zip(NAMES, args)), point_mass=flags, filters=True, block=64)
    for call, options in seen:
        assert call.args() == tuple(args) and call.point_mass is flags and call.filters is True and options == {"block": 64}
    with pytest.raises(TypeError):
        v(*args, flags, True)  # filters only by name
    with pytest.raises(TypeError):
        v(*args[:7])  # uniforms missing
    assert v.__name__ == "probe" and list(inspect.signature(v).parameters) == [*NAMES, "point_mass", "filters", "options"]


def test_the_reference_answers_alike_however_it_is_called() -> None:
    args, flags = _tensors(), torch.tensor([[True, False, False], [False, True, True]])
    results = [verify(*args, flags), verify(**dict(zip(NAMES, args)), point_mass=flags), VerifyCall(*args, point_mass=flags).run(verify)]
    for r in results[1:]:
        assert all(torch.equal(getattr(r, f), getattr(results[0], f)) for f in ("accepted", "next_token", "accept_prob"))
    plain = verify(*args)
    assert not torch.equal(plain.accept_prob, results[0].accept_prob)  # the control: the point masses are read
    with pytest.raises(TypeError):
        verify(*args, block=64)  # the reference takes no launch options


def test_map_reaches_every_tensor_and_keeps_filters() -> None:
    args, flags = _tensors(), torch.tensor([[True, False, False], [False, False, True]])
    call = VerifyCall(*args, point_mass=flags, filters=False)
    first = call.map(lambda t: t[:1])
    assert all(torch.equal(a, b[:1]) for a, b in zip(first.args(), args)) and first.filters is False
    assert first.point_mass is not None and torch.equal(first.point_mass, flags[:1])
    assert VerifyCall(*args).map(lambda t: t[:1]).point_mass is None
