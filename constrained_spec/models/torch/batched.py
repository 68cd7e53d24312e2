"""Ragged batched forwards of one transformers causal LM over a slotted KV cache.

A :class:`RowCall` asks for one row: its slot, the position its tokens start at (the row's length:
whatever the slot held past it is overwritten) and what it wants back (every token's logits, the
last position's logits through a cut head, or nothing for a prompt). :class:`BatchedHFModel` runs
any number of calls as one forward: tokens padded to the widest row, position ids and a causal
mask per row, keys and values written into :class:`~constrained_spec.models.torch.ragged_cache.RaggedKVCache`
at each row's own positions. Lengths are the caller's: rolling a row back costs nothing here.

:class:`~constrained_spec.models.protocol.RowBackend` (the runtime protocol's rows) is what the batch
coordinator (``engine.batching``) needs of such a model; tests give it synthetic models with exactly
enumerable distributions.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from constrained_spec.errors import ConfigError
from constrained_spec.models.protocol import HeadKind, RowBackend, RowCall
from constrained_spec.models.torch import ragged_attention
from constrained_spec.models.torch.forward import WrappedLM, cache_kwarg
from constrained_spec.models.torch.ragged_cache import RaggedKVCache

__all__ = ["BatchedHFModel", "HeadKind", "RowBackend", "RowCall"]

#: scratch positions past ``max_length`` that padding columns of a ragged forward write to
PAD_MARGIN = 16


class BatchedHFModel:
    """A transformers Llama/Qwen2-family model (through its :class:`HFModel`) over ``slots`` cache rows.

    The cache is preallocated: ``slots * max_length`` positions per layer, reported by :attr:`cache_bytes`.
    """

    def __init__(self, model: WrappedLM, slots: int, max_length: int) -> None:
        config = model.config
        if slots < 1 or max_length < 2:
            raise ConfigError("a batched model needs at least one slot of at least two positions")
        if "sliding_attention" in (getattr(config, "layer_types", None) or []):
            raise ConfigError("batched decoding does not support sliding-window attention layers")
        self.hf = model
        self.vocab_size = model.vocab_size
        self.device = model.device
        self.slots, self.max_length = slots, max_length
        heads = config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        dtype = model.model.get_input_embeddings().weight.dtype
        self.cache = RaggedKVCache(config.num_hidden_layers, slots, getattr(config, "num_key_value_heads", heads),
                                   max_length + PAD_MARGIN, head_dim, dtype, self.device)
        self._eager = getattr(config, "_attn_implementation", "sdpa") == "eager"
        #: rows run packed (no padding: see models.torch.ragged_attention) where the model uses sdpa attention
        self.packed = getattr(config, "_attn_implementation", None) == "sdpa" and ragged_attention.install()

    @property
    def cache_bytes(self) -> int:
        return self.cache.nbytes

    @property
    def can_restrict_head(self) -> bool:
        return self.hf.can_restrict_head

    @property
    def head_prefix(self) -> int:
        return self.hf.head_prefix

    def _mask(self, starts: torch.Tensor, width: int, span: int, dtype: torch.dtype) -> torch.Tensor:
        """[B, 1, W, span]: query w of row b sees keys at positions <= starts[b] + w."""
        query_pos = starts[:, None] + torch.arange(width, device=starts.device)[None, :]  # [B, W]
        keys = torch.arange(span, device=starts.device)
        allowed = keys[None, None, :] <= query_pos[:, :, None]  # [B, W, span]
        if not self._eager:
            return allowed[:, None]
        return torch.zeros(allowed.shape, dtype=dtype, device=starts.device).masked_fill(~allowed, torch.finfo(dtype).min)[:, None]

    @torch.inference_mode()
    def forward(self, calls: list[RowCall]) -> list[torch.Tensor | None]:
        if not calls:
            return []
        if len({c.slot for c in calls}) != len(calls):
            raise ValueError("a batched forward runs each slot at most once")
        for c in calls:
            if not c.tokens:
                raise ValueError("a row call needs at least one token")
            if c.start < 0 or c.start + len(c.tokens) > self.max_length:
                raise ValueError(f"slot {c.slot}: positions {c.start}..{c.start + len(c.tokens)} exceed {self.max_length}")
        base = self.hf.model.base_model
        twin = getattr(self.hf, "_prefill_twin", None)  # the model's prefill weights (HFModel.set_prefill), if any
        if twin is not None and all(c.head == "none" for c in calls):
            base = twin  # a prompt: the same weights as a one-at-a-time prefill, so rows decode alike
        if self.packed:
            return self._forward_packed(calls, base)
        width = max(len(c.tokens) for c in calls)
        device = self.device
        ids = torch.zeros((len(calls), width), dtype=torch.long)
        for b, c in enumerate(calls):
            ids[b, : len(c.tokens)] = torch.tensor(c.tokens, dtype=torch.long)
        starts = torch.tensor([c.start for c in calls], dtype=torch.long, device=device)
        positions = (starts[:, None] + torch.arange(width, device=device)[None, :]).clamp(max=self.cache.capacity - 1)
        span = max(c.start + len(c.tokens) for c in calls)
        rows = torch.tensor([c.slot for c in calls], dtype=torch.long, device=device)
        self.cache.prepare(rows, positions, span)
        dtype = self.cache.keys[0].dtype
        hidden = base(input_ids=ids.to(device), attention_mask=self._mask(starts, width, span, dtype),
                      position_ids=positions, use_cache=True, **cache_kwarg(base, self.cache)).last_hidden_state  # [B, W, H]
        return self._heads(calls, [hidden[b, : len(c.tokens)] for b, c in enumerate(calls)])

    def _forward_packed(self, calls: list[RowCall], base: Any) -> list[torch.Tensor | None]:
        """The rows as one unpadded sequence: position ids per token, attention per row."""
        device = self.device
        ids = torch.tensor([t for c in calls for t in c.tokens], dtype=torch.long, device=device)[None]
        positions = torch.tensor([c.start + i for c in calls for i in range(len(c.tokens))], dtype=torch.long, device=device)
        slots = torch.tensor([c.slot for c in calls for _ in c.tokens], dtype=torch.long, device=device)
        self.cache.prepare_packed(slots, positions)
        rows = ragged_attention.PackedRows.build(self.cache.keys, self.cache.values, [c.slot for c in calls],
                                                 [c.start for c in calls], [len(c.tokens) for c in calls])
        placeholder = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=device)  # a 4D mask transformers passes through unread
        with ragged_attention.packed_rows(rows):
            hidden = base(input_ids=ids, attention_mask=placeholder, position_ids=positions[None],
                          use_cache=True, **cache_kwarg(base, self.cache)).last_hidden_state[0]  # [N, H]
        return self._heads(calls, [hidden[o : o + w] for o, w in zip(rows.offsets, rows.widths)])

    def _heads(self, calls: list[RowCall], hidden: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """Each call's logits from its hidden states [len(tokens), H]; every ``"all"`` row in one head matmul."""
        out: list[torch.Tensor | None] = [None] * len(calls)
        full = [b for b, c in enumerate(calls) if c.head == "all"]
        if full:
            states = torch.cat([hidden[b] for b in full])
            logits = self.hf.model.get_output_embeddings()(states)[:, : self.vocab_size].float()
            offset = 0
            for b in full:
                n = len(calls[b].tokens)
                out[b] = logits[offset : offset + n]
                offset += n
        head = self.hf.model.get_output_embeddings()
        for b, c in enumerate(calls):
            last = hidden[b][-1]
            if c.head == "restricted":
                assert c.allowed_ids is not None
                ids = c.allowed_ids.to(self.device)
                sub = head.weight.index_select(0, ids).to(last.dtype) @ last
                if head.bias is not None:
                    sub = sub + head.bias.index_select(0, ids)
                logits = torch.full((self.vocab_size,), float("-inf"), device=self.device)
                logits[ids] = sub.float()
                out[b] = logits
            elif c.head == "prefix":
                prefix_head = self.hf._prefix_head
                if prefix_head is None:
                    raise ValueError("a 'prefix' call needs a head prefix set (set_head_prefix)")
                sub = prefix_head(last[None])[0].float()
                logits = torch.full((self.vocab_size,), float("-inf"), device=self.device)
                logits[: sub.shape[0]] = sub
                out[b] = logits
        return out

    def read_prefix(self, slot: int, length: int) -> Any:
        return self.cache.read(slot, length)

    def write_prefix(self, slot: int, saved: Any, length: int) -> None:
        self.cache.write(slot, saved, length)

    def reusable_prefix(self, tokens: Sequence[int], stored: Sequence[int], length: int) -> int:
        return length  # a position's keys and values depend on tokens 0..i alone, however the prompt was split

    def copy_rows(self, source: int, dest: int, length: int) -> None:
        self.cache.copy(source, dest, length)
