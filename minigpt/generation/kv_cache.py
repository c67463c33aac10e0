"""A key/value cache that grows without copying at every token.

transformers' `DynamicCache` appends each decoding step's keys and values with `torch.cat`, which
copies the whole cache: O(S) work per token (S cached positions) and, at the sizes MiniGPT runs
on a CPU, the single most expensive operation of a decoding step at batch 1 (8 concatenations
per token at 4 layers, ~15% of the step). `GrowingCache` keeps each layer's keys and values in a
buffer with room to spare, writes the new positions into it, and hands the attention views of
the filled part, (B, nh, S, hs) as before. When the room runs out the buffer doubles, so copies
are O(1) per token on average; sized with the run's total length up front, it never copies.

It is a `DynamicCache` in every other respect (cropping, reordering beams, `get_seq_length`), so
`generate()` and any transformers model that accepts a `Cache` take it.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedConfig
from transformers.cache_utils import DynamicLayer


class GrowingLayer(DynamicLayer):
    """One layer's keys and values: views of the first S positions of (B, nh, capacity, hs) buffers.

    `self.keys`/`self.values` stay what `DynamicLayer` makes them, the (B, nh, S, hs) cached
    states, so every inherited method works on them; when one of those methods replaces them with
    new tensors (beam reordering, batch selection), the next update copies them into a new buffer.
    """

    def __init__(self, capacity: int = 0):
        super().__init__()
        self.capacity = capacity  # positions to allocate at the first update (at least its length)
        self.key_buffer: torch.Tensor | None = None  # (B, nh, capacity, hs)
        self.value_buffer: torch.Tensor | None = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # key_states, value_states: (B, nh, T, hs), the T new positions
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.get_seq_length()
        end = start + key_states.shape[-2]
        if not self._has_room_for(key_states, end):
            self._reallocate(key_states, value_states, start, end)
        self.key_buffer[:, :, start:end].copy_(key_states)
        self.value_buffer[:, :, start:end].copy_(value_states)
        self.keys = self.key_buffer[:, :, :end]  # (B, nh, S, hs) views, no copy
        self.values = self.value_buffer[:, :, :end]
        return self.keys, self.values

    def reset(self) -> None:
        self.key_buffer = self.value_buffer = None
        super().reset()

    def _has_room_for(self, key_states: torch.Tensor, end: int) -> bool:
        """Are the cached states still the start of the buffers, which fit `end` positions?"""
        buffer = self.key_buffer
        if buffer is None or self.keys.dim() != 4:
            return False
        return (
            end <= buffer.shape[2]
            and self.keys.data_ptr() == buffer.data_ptr()
            and self.keys.stride() == buffer.stride()
            and self.values.data_ptr() == self.value_buffer.data_ptr()
            and buffer.shape[:2] == key_states.shape[:2]
            and buffer.shape[3] == key_states.shape[3]
            and buffer.dtype == key_states.dtype
            and buffer.device == key_states.device
        )

    def _reallocate(self, key_states: torch.Tensor, value_states: torch.Tensor, start: int, end: int) -> None:
        """New buffers, the cached states copied in: twice the old room when `end` outgrew it, else the
        same room (states replaced by beam reordering, every step of a beam search), at least
        `end` and the capacity."""
        old_room = self.key_buffer.shape[2] if self.key_buffer is not None else 0
        room = max(end, self.capacity, 2 * old_room if end > old_room else old_room)
        B, nh, _, hs = key_states.shape
        self.key_buffer = key_states.new_empty(B, nh, room, hs)
        self.value_buffer = value_states.new_empty(B, nh, room, value_states.shape[3])
        if start > 0:
            self.key_buffer[:, :, :start].copy_(self.keys)
            self.value_buffer[:, :, :start].copy_(self.values)


class GrowingCache(DynamicCache):
    """A `DynamicCache` whose layers grow into spare room (`GrowingLayer`) instead of concatenating.

    `capacity`: positions to allocate per layer at the first update, typically prompt + new
    tokens; 0 allocates exactly the prompt and doubles from there.
    """

    def __init__(self, config: PreTrainedConfig, capacity: int = 0):
        super().__init__(config=config)  # one DynamicLayer per full-attention layer
        if not self.layers or any(type(layer) is not DynamicLayer for layer in self.layers):
            kinds = sorted({type(layer).__name__ for layer in self.layers})
            raise ValueError(f"GrowingCache replaces full-attention layers only; this config has {kinds}")
        self.layers = [GrowingLayer(capacity) for _ in self.layers]


__all__ = ["GrowingCache", "GrowingLayer"]
