"""Each episode's own KV, kept from one turn to the next so a turn prefills only what is new.

At turn k an episode's prompt is the domain prefix (system prompt, tool schemas: the ``PrefixCache``'s
entries), the user query and turns 1..k-1 (assistant completions, tool results). The domain prefix
comes from the prefix cache, but everything after it was prefilled again at every turn: issue 28's
profile of the ``learn`` base evaluation spent 43% of the model worker in prefill, mostly this.

When a row finishes, ``RunningBatch`` hands its KV here (``EpisodeKV.keep``): the tokens it holds
(prompt + completion minus the last token, which was never fed) and the keys/values of its columns
beyond the prefix-cache entry it started from. The entry keeps a reference to that prefix entry
instead of a second copy of the domain prefix (about 1,000 of 1,500 tokens), so a kept turn costs its
own columns only. The same episode's next request, whose prompt starts with those token ids as far
as the chat template re-renders them alike (matched on ids only, ``take``), prefills only the new
tokens: the rest of the completion, the tool results and the next assistant header.

Bounds (docs/performance.md, "Each episode's own KV"):

* single use: ``take`` removes the entry it serves (the next turn keeps its own);
* ``max_bytes`` (default 512 MiB) over the entries' own columns plus the prefix entries they still
  hold that the prefix cache dropped, and ``max_entries``; oldest first goes: the last turn of an
  episode that ended is never taken, so it ages out as new turns arrive;
* weights: ``PrefixCache.invalidate`` clears this store, and an entry computed before the last
  invalidation is refused (``keep(generation=)``), so KV from old weights is never reused;
* sliding-window models keep nothing (their cache may have dropped columns; ``RunningBatch``).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from rewardbox.policy.kv_cache import cache_storages


@dataclass
class EpisodeEntry:
    """One finished row's KV at batch 1: ``base``'s first ``base_len`` columns (a prefix-cache entry,
    shared, never written) then ``suffix`` (per layer ``(keys, values)``, ``[1, H, n, D]``, its own)."""

    base: Any | None
    base_len: int
    suffix: list[tuple[torch.Tensor, torch.Tensor]]

    def cache(self, length: int) -> DynamicCache:
        """A ``DynamicCache`` of the first ``length`` columns at batch 1 (new tensors, or views of the
        kept ones: read them, never write them in place; ``decode.prefill`` copies them once)."""
        own = length - self.base_len
        out = DynamicCache()
        out.layers = []
        for index, (keys, values) in enumerate(self.suffix):
            layer = DynamicLayer()
            layer.device, layer.is_initialized = keys.device, True
            if self.base is None:
                layer.keys, layer.values = keys[:, :, :length], values[:, :, :length]
            elif own <= 0:
                base = self.base.layers[index]
                layer.keys, layer.values = base.keys[:, :, :length], base.values[:, :, :length]
            else:
                base = self.base.layers[index]
                layer.keys = torch.cat([base.keys[:, :, : self.base_len], keys[:, :, :own]], dim=2)
                layer.values = torch.cat(
                    [base.values[:, :, : self.base_len], values[:, :, :own]], dim=2
                )
            out.layers.append(layer)
        return out


class EpisodeKV:
    """Finished rows' KV, keyed by their token ids, each taken at most once (module doc).

    Args:
        max_bytes: most bytes the entries hold (own columns plus prefix entries only they keep
            alive); None: no bound. 46,080 bytes per token for SmolLM2-135M fp32.
        max_entries: most entries kept.
    """

    def __init__(self, max_bytes: int | None = 512 << 20, max_entries: int = 64) -> None:
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self._entries: OrderedDict[tuple[int, ...], EpisodeEntry] = OrderedDict()
        self.generation = 0
        self.kept = self.taken = self.evicted = 0
        self.peak_bytes = 0  # the most ``nbytes(shared)`` held after a ``keep`` (a measurement)

    def clear(self) -> None:
        """Drop every entry and refuse those computed before now (the weights changed)."""
        self._entries.clear()
        self.generation += 1

    def __len__(self) -> int:
        return len(self._entries)

    def match(self, tokens: list[int]) -> int:
        """Leading tokens of ``tokens`` the best entry holds (0: none)."""
        return max((common_len(key, tokens) for key in self._entries), default=0)

    def take(self, tokens: list[int], at_least: int) -> tuple[int, EpisodeEntry] | None:
        """The entry sharing the most leading tokens with ``tokens``, removed, when it shares more
        than ``at_least``; returns (tokens shared, entry) or None."""
        best, length = None, at_least
        for key in self._entries:
            common = common_len(key, tokens)
            if common > length:
                best, length = key, common
        if best is None:
            return None
        self.taken += 1
        return length, self._entries.pop(best)

    def keep(
        self, tokens: list[int], entry: EpisodeEntry, generation: int, shared: list | None = None
    ) -> None:
        """Keep ``entry`` for ``tokens`` (its columns) unless it predates the last ``clear``; then evict
        the oldest until within the bounds (an entry over the byte budget by itself is not kept).
        ``shared``: caches whose bytes are counted elsewhere (the prefix cache's own entries)."""
        if generation != self.generation or not tokens:
            return
        if self.max_bytes is not None and self._nbytes([entry], shared) > self.max_bytes:
            return
        self._entries[tuple(tokens)] = entry
        self._entries.move_to_end(tuple(tokens))
        self.kept += 1
        while len(self._entries) > self.max_entries or (
            self.max_bytes is not None and self.nbytes(shared) > self.max_bytes
        ):
            self._entries.popitem(last=False)
            self.evicted += 1
        self.peak_bytes = max(self.peak_bytes, self.nbytes(shared))

    def nbytes(self, shared: list | None = None) -> int:
        """Bytes the entries hold: their own columns and their prefix entries (each storage once),
        less the storages of ``shared`` (caches counted elsewhere, the prefix cache's entries)."""
        return self._nbytes(list(self._entries.values()), shared)

    def bases(self) -> list:
        """The prefix-cache entries the kept entries refer to."""
        return [e.base for e in self._entries.values() if e.base is not None]

    @staticmethod
    def _nbytes(entries: list[EpisodeEntry], shared: list | None = None) -> int:
        skip = {ptr for ptr, _ in cache_storages(shared or [])}
        seen = dict(cache_storages([e.base for e in entries if e.base is not None]))
        for entry in entries:
            for pair in entry.suffix:
                for tensor in pair:
                    storage = tensor.untyped_storage()
                    seen[storage.data_ptr()] = storage.nbytes()
        return sum(n for ptr, n in seen.items() if ptr not in skip)


def row_entry(
    rows, index: int, columns: int, base: Any | None, base_len: int, offset: int = 0
) -> EpisodeEntry:
    """The KV of batch row ``index`` of ``rows`` (``decode.Rows`` over ``PreallocatedLayer``s): of its
    ``columns`` columns, those from the ``base_len``-th on, copied out at batch 1. The row's cache holds
    its columns from the ``offset``-th on (mask 1; the ones before are its batch's shared prefix,
    ``offset <= base_len``)."""
    width = rows.cache.get_seq_length()
    if rows.mask is None:
        real = torch.arange(width, device=rows.next_position.device)
    else:
        real = rows.mask[index].nonzero().flatten()
    if real.numel() != columns - offset or base_len > columns or offset > base_len:
        raise ValueError(f"row holds {real.numel()} real columns, expected {columns - offset}")
    own = real[base_len - offset :]
    suffix = [
        (
            layer.keys[index : index + 1].index_select(2, own),
            layer.values[index : index + 1].index_select(2, own),
        )
        for layer in rows.cache.layers
    ]
    return EpisodeEntry(base, base_len, suffix)


def common_len(a, b) -> int:
    """How many leading items ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
