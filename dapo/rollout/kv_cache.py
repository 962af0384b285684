"""A transformers DynamicCache whose full-attention layers write into preallocated buffers.

transformers' DynamicLayer concatenates every step (`torch.cat` of the whole cache: O(L) copy per token,
O(L^2) per sample); on CPU that was ~25% of a decode step of the demo model. `BufferedLayer` allocates
(B, H, capacity, D) once, writes each new token in place and hands attention the filled prefix as a view.
It keeps the DynamicLayer interface the models call (update, get_seq_length, get_mask_sizes) and the
batch operations our engine uses (batch_repeat_interleave after prefill, batch_select_indices to drop
finished rows). Other layer kinds (sliding window, linear attention) are left as the model's config says.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class BufferedLayer(DynamicLayer):
    """A full-attention cache layer backed by a preallocated buffer of `capacity` positions."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0
        self._keys = self._values = torch.empty(0)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Allocate (B, H, capacity, D) buffers shaped like the first states written."""
        batch, heads = key_states.shape[:2]
        self.device = key_states.device
        self._keys = key_states.new_empty(batch, heads, self.capacity, key_states.shape[-1])
        self._values = value_states.new_empty(batch, heads, self.capacity, value_states.shape[-1])
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write (B, H, q, D) new states at the end; return the (B, H, length, D) filled views."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV buffer of {self.capacity} positions is full (need {end})")
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        return self._refresh_views()

    def get_seq_length(self) -> int:
        return self.length

    def batch_repeat_interleave(self, repeats: int) -> None:
        """Repeat every row `repeats` times, contiguously (the n samples of a prompt)."""
        if self.is_initialized:
            self._keys = _repeat_rows(self._keys, self.length, repeats)
            self._values = _repeat_rows(self._values, self.length, repeats)
            self._refresh_views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep only the rows `indices` (B',) of the batch."""
        if self.is_initialized:
            self._keys = self._keys.index_select(0, indices)
            self._values = self._values.index_select(0, indices)
            self._refresh_views()

    def _refresh_views(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Point `keys` / `values` (what attention reads) at the filled prefix of the buffers."""
        keys, values = self._keys[:, :, : self.length], self._values[:, :, : self.length]
        self.keys, self.values = keys, values
        return keys, values


def _repeat_rows(buffer: torch.Tensor, length: int, repeats: int) -> torch.Tensor:
    """(B, H, C, D) -> (B * repeats, H, C, D), rows repeated contiguously; copies the filled prefix only."""
    batch, heads, capacity, dim = buffer.shape
    out = buffer.new_empty(batch * repeats, heads, capacity, dim)
    filled = buffer[:, None, :, :length].expand(batch, repeats, heads, length, dim)
    out.view(batch, repeats, heads, capacity, dim)[:, :, :, :length] = filled
    return out


def new_cache(model: nn.Module, capacity: int | None) -> DynamicCache:
    """An empty cache for `model`; full-attention layers buffered to `capacity` positions when given.

    Falls back to a plain DynamicCache when the model's layer layout cannot be read (older transformers).
    """
    try:
        cache = DynamicCache(config=getattr(model, "config", None))
    except TypeError:  # transformers < 4.56 takes no config: plain, lazily grown layers
        return DynamicCache()
    if capacity is not None:
        cache.layers = [BufferedLayer(capacity) if type(la) is DynamicLayer else la for la in cache.layers]
    return cache
