"""A preallocated KV cache of ``slots`` rows with a length per row, for batched ragged forwards.

Each layer holds keys and values as ``[slots, kv_heads, capacity, head_dim]``. A forward names the
slots it runs on and, per row, the positions its tokens take; :meth:`RaggedKVCache.update` (the
hook transformers' attention layers call) writes the new keys and values there and hands attention
the rows' keys and values up to the longest row. What a row holds past its length is never read
(the attention mask hides it) and is overwritten by the row's next tokens, so rolling a row back
is only a length change, done by the caller: this cache stores no lengths at all (gpt-fast's
static cache works this way).

``capacity`` includes a scratch margin past the longest sequence a slot may hold: the padding
columns of a ragged forward write there and nowhere else.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["RaggedKVCache"]


class RaggedKVCache:
    """Keys and values of ``slots`` sequences, ``layers`` deep, each up to ``capacity`` positions."""

    def __init__(self, layers: int, slots: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        shape = (slots, kv_heads, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.slots, self.capacity = slots, capacity
        self._rows: torch.Tensor | None = None  # slot of each batch row in the current forward
        self._positions: torch.Tensor | None = None  # [B, W] position of each new token
        self._span = 0  # keys attention reads: the longest row's end
        self._block: slice | None = None  # the rows as one slice of slots, where they are consecutive
        self._packed = False  # the next forward is packed: one sequence of every row's tokens

    @property
    def nbytes(self) -> int:
        """Bytes the preallocated tensors take."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def prepare(self, rows: torch.Tensor, positions: torch.Tensor, span: int) -> None:
        """Set up the next forward: batch row b runs on slot ``rows[b]`` and writes its tokens at
        ``positions[b]``; attention reads positions ``[0, span)`` of each row."""
        if span > self.capacity or int(positions.max()) >= self.capacity:
            raise ValueError(f"a forward reaching position {max(span, int(positions.max()) + 1)} exceeds the cache's {self.capacity}")
        self._rows, self._positions, self._span, self._packed = rows, positions, span, False
        slots = rows.tolist()
        consecutive = slots == list(range(slots[0], slots[0] + len(slots)))
        self._block = slice(slots[0], slots[0] + len(slots)) if consecutive else None

    def prepare_packed(self, slots: torch.Tensor, positions: torch.Tensor) -> None:
        """Set up a packed forward: its token t (of one sequence [1, N]) belongs to slot
        ``slots[t]`` at position ``positions[t]``; attention reads the cache itself
        (:mod:`~constrained_spec.models.torch.ragged_attention`)."""
        if int(positions.max()) >= self.capacity:
            raise ValueError(f"a forward reaching position {int(positions.max()) + 1} exceeds the cache's {self.capacity}")
        self._rows, self._positions, self._packed = slots, positions, True
        self._span = int(positions.max()) + 1

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write this forward's keys/values [B, H, W, D] at the prepared positions; return the rows'
        keys and values over ``[0, span)`` (packed: the new ones, which attention does not read)."""
        rows, positions = self._rows, self._positions
        assert rows is not None and positions is not None, "prepare() before a forward"
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        if self._packed:
            keys[rows, :, positions] = key_states[0].transpose(0, 1).to(keys.dtype)
            values[rows, :, positions] = value_states[0].transpose(0, 1).to(values.dtype)
            return key_states, value_states
        index = (rows[:, None], slice(None), positions)  # -> [B, W, H, D]
        keys[index] = key_states.transpose(1, 2).to(keys.dtype)
        values[index] = value_states.transpose(1, 2).to(values.dtype)
        block = self._block
        if block is not None:  # a view, no copy
            return keys[block, :, : self._span], values[block, :, : self._span]
        return keys[rows, :, : self._span], values[rows, :, : self._span]

    def read(self, slot: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Copies of a slot's keys and values over its first ``length`` positions, per layer."""
        return [(k[slot, :, :length].clone(), v[slot, :, :length].clone()) for k, v in zip(self.keys, self.values)]

    def write(self, slot: int, kv: list[tuple[torch.Tensor, torch.Tensor]], length: int) -> None:
        """Put the first ``length`` positions of ``kv`` (as :meth:`read` gives) into ``slot``."""
        for (k, v), keys, values in zip(kv, self.keys, self.values):
            keys[slot, :, :length] = k[:, :length]
            values[slot, :, :length] = v[:, :length]

    def copy(self, source: int, dest: int, length: int) -> None:
        """Slot ``dest``'s first ``length`` positions become a copy of slot ``source``'s (a fork)."""
        for keys, values in zip(self.keys, self.values):
            keys[dest, :, :length] = keys[source, :, :length]
            values[dest, :, :length] = values[source, :, :length]

    # transformers asks these of a cache object in some code paths
    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._span

    def __len__(self) -> int:
        return len(self.keys)
