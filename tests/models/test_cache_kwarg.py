"""The cache reaches the model under the name its transformers release reads.

transformers 5.2x names the argument ``cache``; earlier releases (5.17 on the GPU image, 4.57 allowed by
pyproject) name it ``past_key_values`` and swallow an unknown ``cache=`` into ``**kwargs``, so a model
would run every forward without its cache. A model whose ``forward`` knows only ``past_key_values``
stands for such a release here; the reference is a fresh full forward of the whole sequence."""

from __future__ import annotations

from typing import Any

import torch
from tiny_models import tiny_llama

from constrained_spec.models.torch import hf
from constrained_spec.models.torch.forward import cache_kwarg
from constrained_spec.models.torch.hf import HFModel


class OldStyleLM(torch.nn.Module):
    """A causal LM whose forward takes the cache as ``past_key_values`` (and ignores unknown keywords)."""

    def __init__(self, inner: Any) -> None:
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def get_output_embeddings(self) -> Any:
        return self.inner.get_output_embeddings()

    def forward(self, input_ids: torch.Tensor, past_key_values: Any = None, use_cache: bool = True, **kwargs: Any) -> Any:
        kwargs.pop("cache", None)  # what an old release does with a name it does not know: nothing
        return self.inner(input_ids=input_ids, **{"cache": past_key_values} if past_key_values is not None else {},
                          use_cache=use_cache, **kwargs)


def _run_blocks(model: Any) -> tuple[torch.Tensor, int]:
    seq = HFModel(model)
    seq.prefill([5, 9, 3, 7])
    got = torch.cat([seq.extend([11, 2]), seq.extend([8])])
    return got, seq.cache_length()


def test_the_cache_argument_is_read_off_the_signature():
    model = tiny_llama(64, seed=3)
    assert list(cache_kwarg(model, "c")) == ["cache"]
    assert list(cache_kwarg(OldStyleLM(model), "c")) == ["past_key_values"]


def test_an_old_style_model_keeps_its_cache_and_matches_a_full_forward():
    inner = tiny_llama(64, seed=3)
    got, length = _run_blocks(OldStyleLM(inner))
    assert length == 7
    with torch.inference_mode():
        full = inner(input_ids=torch.tensor([[5, 9, 3, 7, 11, 2, 8]])).logits[0, 4:].float()
    torch.testing.assert_close(got, full, rtol=0, atol=1e-4)


def test_negative_control_the_new_name_alone_loses_the_cache(monkeypatch):
    """Passing ``cache=`` whatever the signature (the old code) leaves the cache empty: the check above fails."""
    monkeypatch.setattr(hf, "cache_kwarg", lambda module, cache: {"cache": cache})
    _, length = _run_blocks(OldStyleLM(tiny_llama(64, seed=3)))
    assert length == 0
