"""A transformers causal LM as a :class:`~constrained_spec.models.protocol.SequenceModel`.

:class:`HFModel` wraps any transformers causal LM with a ``DynamicCache`` and has the restricted-head
capability where the head is a plain linear map; tests add synthetic models with exactly enumerable
distributions. Loading by name/folder/GGUF lives in ``models.torch.resolve``; this module takes loaded objects.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

from constrained_spec.errors import ModelLoadError
from constrained_spec.models.protocol import SequenceModel
from constrained_spec.models.torch.forward import cache_kwarg

if TYPE_CHECKING:
    from constrained_spec.models.torch.batched import BatchedHFModel


class HFModel:
    """A transformers causal LM with a ``DynamicCache`` (crop takes a negative count here)."""

    def __init__(self, model: Any, vocab_size: int | None = None) -> None:
        self.model = model.eval()
        self.config = model.config
        head = model.get_output_embeddings()
        self.vocab_size = int(vocab_size or getattr(head, "out_features", None) or head.weight.shape[0])
        self.device = next(model.parameters()).device
        self._cache: Any = None
        self._length = 0
        self._prefix_head: Any = None  # see set_head_prefix
        self._prefill_twin: Any = None  # see set_prefill
        self.prefill_split = 0  # see set_prefill

    @property
    def length(self) -> int:
        return self._length

    def reset(self) -> None:
        self._cache = None
        self._length = 0

    def fork(self) -> HFModel:
        """A sequence over the same weights with a deep copy of this one's ``DynamicCache``."""
        clone = copy.copy(self)
        clone._cache = copy.deepcopy(self._cache)
        return clone

    def rows(self, slots: int, max_length: int) -> BatchedHFModel:
        """``slots`` ragged rows over these weights (:class:`~constrained_spec.models.torch.batched.BatchedHFModel`)."""
        from constrained_spec.models.torch.batched import BatchedHFModel

        return BatchedHFModel(self, slots, max_length)

    def _run(self, module: Any, tokens: list[int], **kwargs: Any) -> Any:
        """Feed ``tokens`` through ``module`` (the model or its base) on the cache; advance the length."""
        from transformers import DynamicCache

        if not tokens:
            raise ValueError("extend() needs at least one token")
        if self._cache is None:
            self._cache = DynamicCache(config=self.config)
        # built on the host, copied without waiting for the device (a blocking copy would be a host sync per forward)
        ids = torch.tensor([tokens], dtype=torch.long).to(self.device, non_blocking=True)
        out = module(input_ids=ids, use_cache=True, **cache_kwarg(module, self._cache), **kwargs)
        self._length += len(tokens)
        return out

    @torch.inference_mode()
    def extend(self, tokens: list[int]) -> torch.Tensor:
        return self._run(self.model, tokens).logits[0, :, : self.vocab_size].float()

    def set_prefill(self, twin: Any = None, split: int = 0) -> None:
        """How :meth:`prefill` runs: through ``twin`` (the base model with its linear weights in
        another dtype, :func:`~constrained_spec.models.torch.prefill_twin.prefill_twin`; None: this
        model itself) and in forwards of ``split`` tokens (0: one forward)."""
        if split < 0:
            raise ValueError(f"prefill split must be >= 0, got {split}")
        self._prefill_twin = twin
        self.prefill_split = split

    @torch.inference_mode()
    def prefill(self, tokens: list[int]) -> None:
        """Append ``tokens`` (a prompt) without keeping their logits: the output head runs for the
        last position only (``logits_to_keep=1``), so a long prompt never holds [T, V] logits.

        With a prefill twin (:meth:`set_prefill`) the twin's base model writes the keys and values
        into this model's cache (no output head at all); with a split, in forwards of that many
        tokens."""
        if not tokens:
            raise ValueError("prefill() needs at least one token")
        step = self.prefill_split or len(tokens)
        for i in range(0, len(tokens), max(step, 1)):
            chunk = tokens[i : i + step]
            if self._prefill_twin is None:
                self._run(self.model, chunk, logits_to_keep=1)
            else:
                self._run(self._prefill_twin, chunk)

    #: model types whose output head is a plain linear map of the final hidden state
    RESTRICTABLE = {"llama", "qwen2", "qwen3", "mistral", "phi3", "smollm3"}

    @property
    def can_restrict_head(self) -> bool:
        from constrained_spec.models.torch.packed_linear import PACKED

        head = self.model.get_output_embeddings()
        plain = isinstance(head, torch.nn.Linear)
        packed = isinstance(head, tuple(PACKED.values())) and getattr(head, "weight", None) is not None
        return (
            getattr(self.config, "model_type", "") in self.RESTRICTABLE
            and (plain or packed)
            and getattr(self.config, "final_logit_softcapping", None) is None
        )

    @torch.inference_mode()
    def extend_last(self, tokens: list[int], allowed_ids: torch.Tensor) -> torch.Tensor:
        """Append ``tokens``; return logits [V] for the last position, computing the output head only
        for ``allowed_ids`` (others are -inf). After the grammar mask, the distribution is the same
        as the full head's; the head is about a quarter of a 0.5B model's compute."""
        hidden = self._run(self.model.base_model, tokens).last_hidden_state[0, -1]
        head = self.model.get_output_embeddings()
        rows = allowed_ids.to(self.device, non_blocking=True)
        sub = head.weight.index_select(0, rows).to(hidden.dtype) @ hidden
        if head.bias is not None:
            sub = sub + head.bias.index_select(0, rows)
        logits = torch.full((self.vocab_size,), float("-inf"), device=self.device)
        logits[rows] = sub.float()
        return logits

    def set_head_prefix(self, n: int) -> bool:
        """Keep an output head over the first ``n`` token ids for :meth:`extend_prefix_head`.

        Byte-level BPE vocabularies number tokens in merge order, so the first ids are the common
        ones; a draft that proposes only among them reads a fraction of its head's weights. Returns
        False (and keeps nothing) where the head cannot be cut or ``n`` covers the vocabulary.
        """
        from constrained_spec.models.torch.packed_linear import PACKED

        self._prefix_head = None
        if n <= 0 or n >= self.vocab_size or not self.can_restrict_head:
            return False
        head = self.model.get_output_embeddings()
        cut = torch.nn.Linear(head.in_features, n, bias=head.bias is not None, device=head.weight.device)
        with torch.no_grad():
            cut.weight.copy_(head.weight[:n].float())
            if head.bias is not None:
                cut.bias.copy_(head.bias[:n].float())
        packed = type(head) if type(head) in PACKED.values() else None  # cut it packed the same way
        self._prefix_head = packed(cut) if packed is not None else cut.to(head.weight.dtype)
        return True

    @property
    def head_prefix(self) -> int:
        """How many leading token ids :meth:`extend_prefix_head` scores (0: none set)."""
        return 0 if self._prefix_head is None else int(self._prefix_head.out_features)

    @torch.inference_mode()
    def extend_prefix_head(self, tokens: list[int]) -> torch.Tensor:
        """Append ``tokens``; return logits [V] for the last position, computed for the first
        :attr:`head_prefix` ids only (the others are -inf)."""
        hidden = self._run(self.model.base_model, tokens).last_hidden_state[0, -1:]
        sub = self._prefix_head(hidden)[0].float()
        logits = torch.full((self.vocab_size,), float("-inf"), device=self.device)
        logits[: sub.shape[0]] = sub
        return logits

    def crop(self, length: int) -> None:
        if length > self._length or length < 0:
            raise ValueError(f"cannot crop a cache of {self._length} tokens to {length}")
        if length == self._length:
            return
        if length == 0:
            self.reset()
            return
        self._cache.crop(-(self._length - length))
        self._length = length

    def cache_length(self) -> int:
        """The length the cache object itself reports (for the debug invariant check)."""
        return 0 if self._cache is None else int(self._cache.get_seq_length())


def wrap(model: Any) -> SequenceModel:
    """Accept a SequenceModel or a transformers model; anything else is an error."""
    if isinstance(model, SequenceModel):
        return model
    make = getattr(model, "sequence_model", None)  # loaded weights of another runtime (llama.cpp): a context of its own
    if callable(make):
        return make()
    if hasattr(model, "config") and hasattr(model, "get_output_embeddings"):
        return HFModel(model)
    raise ModelLoadError(f"not a language model: {type(model).__name__}")
