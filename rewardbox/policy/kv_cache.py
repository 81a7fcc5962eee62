"""A key/value cache written in place: no per-step copy of the whole cache.

``transformers``' ``DynamicLayer.update`` appends a step's keys and values with
``torch.cat``, which copies every layer's whole cache each decode step (issue 28
measured a cache that is not rewritten 1.2-1.5x faster per decode step).
``PreallocatedLayer`` keeps a buffer of ``capacity`` positions per layer, writes
each step's columns into it, and hands attention a view of the filled part; the
values are the same tensors ``torch.cat`` would build, so the tokens are too
(``tests/policy/test_decode.py`` checks greedy rows against plain ``generate``).
The buffer grows by doubling if a row ever outruns it, and rows leaving the batch
(``batch_select_indices``) copy only the rows kept, as before.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys/values live in a ``[B, H, capacity, D]`` buffer written in place."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = max(1, int(capacity))
        self._length = 0
        self._keys = self._values = None

    def _views(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys, self.values = (
            self._keys[:, :, : self._length],
            self._values[:, :, : self._length],
        )
        return self.keys, self.values

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the new columns after the filled ones; returns views of every filled column."""
        new = key_states.shape[-2]
        if not self.is_initialized:
            self.device, self.is_initialized = key_states.device, True
            shape = (*key_states.shape[:2], max(self.capacity, new), key_states.shape[-1])
            self._keys = key_states.new_empty(shape)
            self._values = value_states.new_empty((*shape[:3], value_states.shape[-1]))
        if self._length + new > self._keys.shape[2]:
            self._grow(max(2 * self._keys.shape[2], self._length + new))
        self._keys[:, :, self._length : self._length + new] = key_states
        self._values[:, :, self._length : self._length + new] = value_states
        self._length += new
        return self._views()

    def _grow(self, capacity: int) -> None:
        keys = self._keys.new_empty((*self._keys.shape[:2], capacity, self._keys.shape[-1]))
        values = self._values.new_empty((*self._values.shape[:2], capacity, self._values.shape[-1]))
        keys[:, :, : self._length] = self._keys[:, :, : self._length]
        values[:, :, : self._length] = self._values[:, :, : self._length]
        self._keys, self._values = keys, values

    def get_seq_length(self) -> int:
        return self._length if self.is_initialized else 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self._views()

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self._keys = self._keys.repeat_interleave(repeats, dim=0)
            self._values = self._values.repeat_interleave(repeats, dim=0)
            self._views()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of tokens to remove")
        if self.is_initialized and tokens_to_remove:
            self._length = max(0, self._length + tokens_to_remove)
            self._views()

    def reset(self) -> None:
        self._length, self._keys, self._values = 0, None, None
        super().reset()


def kv_bytes_per_position(config, dtype: torch.dtype) -> int:
    """Bytes one row's keys and values take per position, all layers (46,080 for SmolLM2-135M fp32:
    30 layers x 2 x 3 KV heads x 64 x 4 bytes)."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    itemsize = torch.empty((), dtype=dtype).element_size()
    return int(config.num_hidden_layers * 2 * heads * head_dim * itemsize)


def cache_storages(caches: list):
    """``(storage pointer, bytes)`` of every key/value tensor of ``caches`` (``DynamicCache``-like; a
    storage shared by several tensors is yielded once per tensor: callers key by the pointer)."""
    for cache in caches:
        for layer in cache.layers:
            for name in ("_keys", "_values", "keys", "values"):
                tensor = getattr(layer, name, None)
                if isinstance(tensor, torch.Tensor):
                    storage = tensor.untyped_storage()
                    yield storage.data_ptr(), storage.nbytes()


def preallocated_cache(
    config, capacity: int, source: DynamicCache | None = None, start: int = 0
) -> DynamicCache:
    """A cache of ``PreallocatedLayer`` (one per decoder layer) of ``capacity`` positions.

    Args:
        config: the model's config (``num_hidden_layers``).
        capacity: positions to reserve: prompt width + the largest token budget.
        source: a filled cache (the shared-prefix cache) whose columns are copied in once.
        start: the first of ``source``'s columns to copy (those before it are a ``SharedPrefix``'s).
    """
    cache = DynamicCache()
    cache.layers = [PreallocatedLayer(capacity) for _ in range(config.num_hidden_layers)]
    if source is not None:
        for layer, filled in zip(cache.layers, source.layers):
            if filled.is_initialized and filled.get_seq_length() > start:
                layer.update(filled.keys[:, :, start:], filled.values[:, :, start:])
    return cache


def prepend_columns(
    cache: DynamicCache,
    columns: int,
    placements: list[tuple[int, torch.Tensor]],
    sources: list[tuple[torch.Tensor, torch.Tensor]],
) -> None:
    """Widen every ``PreallocatedLayer`` of ``cache`` by ``columns`` on the left and write ``sources``'
    columns into some rows (``decode.rebase``: a shared prefix's columns becoming rows' own).

    Args:
        cache: ``B`` rows of ``W`` columns; afterwards ``W + columns``, the old columns moved right by
            ``columns`` (new columns elsewhere are zeros, for the caller to mask out).
        placements: ``(start, rows)``: write the source's columns at ``start..start + columns`` of
            batch rows ``rows`` (a ``[n]`` index tensor); ``start`` is in the new layout.
        sources: per layer ``(keys, values)``, ``[1, kv_heads, columns, head_dim]``.
    """
    for layer, (keys, values) in zip(cache.layers, sources):
        if not layer.is_initialized:
            continue
        length = layer._length
        capacity = max(layer._keys.shape[2], length) + columns
        for name, source in (("_keys", keys), ("_values", values)):
            old = getattr(layer, name)
            new = old.new_zeros((*old.shape[:2], capacity, old.shape[-1]))
            new[:, :, columns : columns + length] = old[:, :, :length]
            for start, rows in placements:
                new[rows, :, start : start + columns] = source.expand(len(rows), -1, -1, -1)
            setattr(layer, name, new)
        layer._length = length + columns
        layer._views()


def merge_caches(a: DynamicCache, b: DynamicCache, capacity: int) -> DynamicCache:
    """One cache of ``a``'s rows then ``b``'s (both of ``PreallocatedLayer``), columns right-aligned.

    The result has ``max(len a, len b)`` columns; the shorter side's leading columns are zeros, which the
    caller masks out (``decode.merge_rows``). ``capacity`` positions are reserved (at least the width).
    ``a`` and ``b`` are consumed: each layer's buffers are released as soon as that layer is merged, so
    the merge holds one layer's old buffers beside the new ones, not a second copy of the whole cache
    (docs/performance.md, "Memory").
    """
    width = max(a.get_seq_length(), b.get_seq_length())
    out = DynamicCache()
    out.layers = [
        _merged_layer(x, y, width, max(capacity, width)) for x, y in zip(a.layers, b.layers)
    ]
    return out


def _merged_layer(
    a: PreallocatedLayer, b: PreallocatedLayer, width: int, capacity: int
) -> PreallocatedLayer:
    layer = PreallocatedLayer(capacity)
    rows = a._keys.shape[0] + b._keys.shape[0]
    layer._keys = a._keys.new_zeros((rows, a._keys.shape[1], capacity, a._keys.shape[-1]))
    layer._values = a._values.new_zeros((rows, a._values.shape[1], capacity, a._values.shape[-1]))
    for buffer, source in ((layer._keys, a._keys), (layer._values, a._values)):
        buffer[: source.shape[0], :, width - a._length : width] = source[:, :, : a._length]
    for buffer, source in ((layer._keys, b._keys), (layer._values, b._values)):
        buffer[a._keys.shape[0] :, :, width - b._length : width] = source[:, :, : b._length]
    layer.device, layer.is_initialized, layer._length = a.device, True, width
    layer._views()
    a.reset()
    b.reset()
    return layer


def trim_left(cache: DynamicCache, columns: int) -> None:
    """Drop the first ``columns`` columns of every ``PreallocatedLayer`` (no row attends to them any more)."""
    for layer in cache.layers:
        if layer.is_initialized and columns > 0:
            keys, values = layer._keys, layer._values
            layer._keys = keys.new_empty((*keys.shape[:2], keys.shape[2] - columns, keys.shape[-1]))
            layer._values = values.new_empty(
                (*values.shape[:2], values.shape[2] - columns, values.shape[-1])
            )
            layer._length -= columns
            layer._keys[:, :, : layer._length] = keys[:, :, columns : columns + layer._length]
            layer._values[:, :, : layer._length] = values[:, :, columns : columns + layer._length]
            layer._views()
