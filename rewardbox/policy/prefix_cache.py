"""Shared-prefix KV cache for batched generation on CPU.

Every prompt of a domain starts with the same long prefix (agent system
prompt, policy text, tool list, worked example: about 900 of 1,000 tokens in the
embedded domains). Prefill dominates CPU generation cost, so the prefix's
key/value cache is computed once (batch 1), copied and expanded for each batch,
and only the per-row suffixes are prefilled. Rows are laid out as
``[prefix | padding | suffix]`` with the padding masked out; position ids come
from the attention mask's cumulative sum (transformers' generation does this),
so every real token keeps the position it would have without the cache.

The cache is keyed by the prefix tokens and a weights version: call
``invalidate()`` whenever the model's weights change (a training step).

Memory (docs/performance.md, "Memory"): entries are kept within ``max_bytes``
(the entry cheapest to compute again goes first, ``PrefixCache._evict_one``; an
entry larger than the budget is used once and not kept, evicting nothing), and a
batch gets the entry's tensors as expanded views, not B copies: the decode buffer
(``kv_cache.preallocated_cache``) copies them in once.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable

import torch

from rewardbox.policy.episode_kv import EpisodeEntry, EpisodeKV, common_len
from rewardbox.policy.kv_cache import cache_storages


def common_prefix_len(prompts: list[list[int]]) -> int:
    """Length of the longest token prefix shared by every prompt, leaving each row >= 1 own token."""
    if not prompts:
        return 0
    limit = min(len(p) for p in prompts) - 1
    first = prompts[0]
    n = 0
    while n < limit and all(p[n] == first[n] for p in prompts):
        n += 1
    return max(n, 0)


class PrefixCache:
    """Prefix KV caches (batch 1), expanded per batch; when full, the cheapest to recompute goes.

    Args:
        min_tokens: shorter shared prefixes are not cached (no gain).
        max_entries: prefixes kept (one per domain prompt is typical).
        max_bytes: most bytes the kept entries' tensors take together (None: no bound); SmolLM2-135M
            in fp32 keeps 46,080 bytes per cached token (30 layers x 2 x 3 KV heads x 64 x 4 bytes).
    """

    def __init__(
        self,
        min_tokens: int = 64,
        max_entries: int = 4,
        max_bytes: int | None = 256 << 20,
        episode_max_bytes: int | None = 512 << 20,
    ) -> None:
        self.min_tokens = min_tokens
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, ...], object] = OrderedDict()
        self.episodes = EpisodeKV(episode_max_bytes)
        self.hits = 0
        self.misses = 0

    def cached_len(self, tokens: list[int]) -> int:
        """Leading tokens of ``tokens`` a cached entry already holds (0: none, or fewer than ``min_tokens``)."""
        _, length = self._longest_match(tokens)
        return length if length >= self.min_tokens else 0

    def own_cached_len(self, tokens: list[int]) -> int:
        """``cached_len``, or more when a kept turn of the same episode holds more (``episode_kv``): what a
        prefill call of this row alone reuses."""
        length = max(self.cached_len(tokens), self.episodes.match(tokens))
        return length if length >= self.min_tokens else 0

    def keep_episode(self, tokens: list[int], entry: EpisodeEntry, generation: int) -> None:
        """Keep a finished row's KV for its episode's next turn (``EpisodeKV.keep``; the prefix cache's
        own entries are counted in its own budget, not the episodes')."""
        self.episodes.keep(tokens, entry, generation, shared=list(self._entries.values()))

    def _longest_match(self, tokens: list[int]) -> tuple[tuple[int, ...] | None, int]:
        """The kept entry sharing the most leading tokens with ``tokens``, and how many (None, 0: none)."""
        best, length = None, 0
        for key in self._entries:
            common = common_len(key, tokens)
            if common > length:
                best, length = key, common
        return best, length

    def invalidate(self) -> None:
        """Drop every cached prefix and every kept episode turn (the weights changed)."""
        self._entries.clear()
        self.episodes.clear()

    def prepare(
        self, model, prompts: list[list[int]], pad_id: int, device
    ) -> tuple[dict, int] | None:
        """Inputs for ``model.generate`` that reuse a cached prefix, or None when not worth it.

        Returns:
            (``{input_ids, attention_mask, cache}``, full input width) where
            ``input_ids`` ``[B, P + L]`` is ``[prefix | pad | suffix]`` and the cache holds
            the prefix's P positions expanded to batch B (views of the kept entry: read them,
            never write them in place).
        """
        prepared = self.prepare_rows(model, prompts, pad_id, device)
        return None if prepared is None else prepared[:2]

    def prepare_rows(
        self, model, prompts: list[list[int]], pad_id: int, device
    ) -> tuple[dict, int, tuple] | None:
        """``prepare``, plus the root: ``(prefix entry or None, its columns used)``, the kept prefix a
        finished row's own KV continues (``keep_episode``). A call of one row takes its episode's kept
        turn instead of a prefix entry when that holds more of its prompt (``episode_kv``; used up)."""
        n = common_prefix_len(prompts)
        if n < self.min_tokens:
            return None
        key, cache, root = self._source(model, prompts, n, device)
        n = len(key)
        batch_cache = expanded(cache, len(prompts))
        width = max(len(p) for p in prompts) - n
        ids = torch.full((len(prompts), n + width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        ids[:, :n] = torch.tensor(key)
        mask[:, :n] = 1
        for row, prompt in enumerate(prompts):
            suffix = prompt[n:]
            ids[row, n + width - len(suffix) :] = torch.tensor(suffix)
            mask[row, n + width - len(suffix) :] = 1
        inputs = {
            "input_ids": ids.to(device),
            "attention_mask": mask.to(device),
            "cache": batch_cache,
        }
        return inputs, n + width, root

    def _source(
        self, model, prompts: list[list[int]], n: int, device
    ) -> tuple[list[int], object, tuple]:
        """(prefix tokens, their cache at batch 1, root) for ``prepare``: a kept episode turn for a lone
        row when it holds more than the prefix entries, else ``_lookup``."""
        shared = prompts[0][:n]
        if len(prompts) == 1:
            hit = self.episodes.take(shared, max(self.cached_len(shared), self.min_tokens - 1))
            if hit is not None:
                length, entry = hit
                self.hits += 1
                return (
                    shared[:length],
                    entry.cache(length),
                    (entry.base, min(entry.base_len, length)),
                )
        key, cache = self._lookup(model, shared, device, extend=len(prompts) > 1)
        return key, cache, (cache, len(key))

    def _lookup(
        self, model, shared: list[int], device, *, extend: bool
    ) -> tuple[list[int], object]:
        """The longest cached prefix of ``shared`` (a hit), cropped and kept as its own entry when an entry
        holds more than ``shared``; extended at batch 1 to all of ``shared`` when ``extend`` (rows > 1).
        A miss computes all of ``shared``. Returns (the prefix's tokens, its cache; never modified later)."""
        best, length = self._longest_match(shared)
        if best is None or length < self.min_tokens:
            self.misses += 1
            return shared, self._store(shared, self._run(model, shared, None, device))
        self.hits += 1
        self._entries.move_to_end(best)
        cache = self._entries[best]
        if length < len(best):
            cache = copy.deepcopy(cache)
            cache.crop(length - len(best))
            self._store(shared[:length], cache)
        if extend and length < len(shared):
            return shared, self._store(
                shared, self._run(model, shared[length:], copy.deepcopy(cache), device)
            )
        return shared[:length], cache

    def _run(self, model, tokens: list[int], cache, device):
        """The KV cache of ``tokens`` at batch 1, after ``cache``'s columns (None: from the start)."""
        with torch.inference_mode():
            start = 0 if cache is None else cache.get_seq_length()
            positions = torch.arange(start, start + len(tokens), device=device)[None]
            out = model(
                input_ids=torch.tensor([tokens], device=device),
                position_ids=positions,
                cache=cache,
                use_cache=True,
            )
        return out.cache

    def _store(self, tokens: list[int], cache):
        """Keep ``cache`` as the newest entry; beyond the count or byte budget, evict (``_evict_one``).
        An entry over the byte budget by itself is returned unkept (it would evict every other first)."""
        if self.max_bytes is not None and cache_nbytes([cache]) > self.max_bytes:
            return cache
        self._entries[tuple(tokens)] = cache
        self._entries.move_to_end(tuple(tokens))
        while len(self._entries) > self.max_entries or (
            self.max_bytes is not None and self.nbytes() > self.max_bytes
        ):
            self._evict_one()
        return cache

    def _evict_one(self) -> None:
        """Drop the entry that is cheapest to compute again: the fewest tokens beyond the longest prefix it
        shares with another kept entry; the least recently used among equals. A domain prefix that a
        kept task extension of it contains costs nothing (``_lookup`` crops it out of the extension), so
        it goes first and the extension keeps serving the domain; of two extensions of one domain
        prefix the one used less recently goes, and the other still holds the prefix. Plain LRU let
        three domains' extensions evict their roots outright, each a ~1,000-token prefill to redo."""
        keys = list(self._entries)  # least recently used first

        def recompute_tokens(key: tuple[int, ...]) -> int:
            shared = (common_len(key, other) for other in keys if other is not key)
            return len(key) - max(shared, default=0)

        del self._entries[min(keys, key=recompute_tokens)]

    def nbytes(self) -> int:
        """Bytes the kept entries' key/value tensors take (each storage counted once)."""
        return cache_nbytes(list(self._entries.values()))


def cache_nbytes(caches: list) -> int:
    """Bytes of the key/value tensors of ``caches`` (``DynamicCache``-like), each storage once."""
    return sum(dict(cache_storages(caches)).values())


def expanded(cache, rows: int):
    """``cache`` (batch 1) with every layer's keys/values expanded to ``rows`` (views, no copy); the
    layers keep their kind (full or sliding-window), as a deep copy did."""
    out = copy.copy(cache)
    out.layers = []
    for layer in cache.layers:
        view = copy.copy(layer)
        if layer.is_initialized:
            view.keys = layer.keys.expand(rows, -1, -1, -1)
            view.values = layer.values.expand(rows, -1, -1, -1)
        out.layers.append(view)
    return out


def prefill_groups(
    prompts: list[list[int]],
    cached_len: Callable[[list[int]], int],
    min_tokens: int,
    call_tokens: int = 64,
    own_cached_len: Callable[[list[int]], int] | None = None,
) -> list[list[int]]:
    """Split new rows into prefill calls so that rows with different long prefixes never pad each other.

    One call over rows of two domains shares only their first few tokens, so every row would prefill
    its whole domain prefix (about 1,000 tokens) instead of its suffix. This partitions the rows,
    in lexicographic order of their prompts (rows with a common prefix are then contiguous), by dynamic
    programming over the tokens each call computes: a call of rows ``R`` whose common prefix is ``P``
    tokens computes ``|R| * (max len - P)`` padded columns, plus ``P - c`` columns at batch 1 when only
    ``c`` of them are cached (``PrefixCache.prepare`` extends the entry), plus ``call_tokens`` for the
    call itself; a call of one row reuses only what is cached (its episode's kept turn included), and a common prefix under ``min_tokens``
    is not reused at all (``prepare`` returns None).

    Args:
        prompts: the new rows' prompt ids (each >= 1 token).
        cached_len: leading tokens of a prompt the prefix cache holds (``PrefixCache.cached_len``).
        min_tokens: the prefix cache's ``min_tokens``.
        call_tokens: the cost of one more forward call, in prompt columns (>= 0).
        own_cached_len: leading tokens a call of this row alone reuses (``PrefixCache.own_cached_len``:
            its episode's kept turn counts there, ``episode_kv``); None: ``cached_len``.

    Returns:
        Groups of indexes into ``prompts``, each ascending; every index in exactly one group.
    """
    n = len(prompts)
    if n <= 1:
        return [list(range(n))]
    order = sorted(range(n), key=lambda i: prompts[i])
    cached = [min(cached_len(prompts[i]), len(prompts[i]) - 1) for i in order]
    own = own_cached_len or cached_len
    alone = [min(own(prompts[i]), len(prompts[i]) - 1) for i in order]
    adjacent = [common_len(prompts[order[k]], prompts[order[k + 1]]) for k in range(n - 1)]

    def cost(i: int, j: int) -> int:  # sorted rows i..j-1 in one call
        longest = max(len(prompts[order[k]]) for k in range(i, j))
        if j - i == 1:
            return longest - alone[i] + call_tokens
        shared = min(min(adjacent[i : j - 1]), min(len(prompts[order[k]]) for k in range(i, j)) - 1)
        if shared < min_tokens:
            return (j - i) * longest + call_tokens
        return (j - i) * (longest - shared) + max(0, shared - min(cached[i], shared)) + call_tokens

    best, cut = [0] + [None] * n, [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            total = best[i] + cost(i, j)
            if best[j] is None or total < best[j]:
                best[j], cut[j] = total, i
    groups, j = [], n
    while j > 0:
        groups.append(sorted(order[cut[j] : j]))
        j = cut[j]
    return sorted(groups)
