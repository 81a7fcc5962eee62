"""The local policy's decode primitives: one prefill, then one forward pass per token.

``transformers``' ``generate`` is general: every step it rebuilds its model
inputs, runs its logits processors and stopping criteria through generic
lists, and, when sampling, draws a softmax and a multinomial over the whole
batch from the global RNG, which the per-row sampler then has to override.
On CPU with short prompts that per-step overhead is a visible share of a
step (a step of SmolLM2-135M for 8 rows is a few tens of ms), so the policy
decodes with these primitives instead. Per step it does only:

1. one forward pass for the active rows (logits of the last position only);
2. the tool-call guide on the rows writing a tool name or key;
3. ``PerRowSampler.draw``: temperature, the row's own generator, the token's
   log-probability (greedy rows take the argmax, log-prob 0);
4. rows that produced a stop token or used their budget leave the batch: their
   KV is dropped (``Cache.batch_select_indices``), so the rest of the batch does
   not keep paying for them.

The KV cache is preallocated for the prompt width plus the largest budget and
written in place (``kv_cache``), not concatenated (copied) every step. Two
``Rows`` decoding apart can be merged into one (``merge_rows``: continuous
batching, ``running``): each side's columns are right-aligned in one buffer and
the columns a row never had are masked out.

A batch may carry ``SharedPrefix`` objects (``attention``): the prefix-cache entries its rows' prompts
start with, each kept once at batch 1, while each row's cache holds only its own columns; attention
reads each prefix once per step for all its rows (shared-prefix, or cascade, attention). ``prefill``
takes one for rows that came from one cached prefix; ``merge_rows`` keeps the prefixes of both sides,
and folds two into what they have in common when that reads fewer columns per step (two tasks'
extensions of one domain prefix), moving the rest into the rows' own columns (``rebase``).

A batch without padding (equal prompt lengths, or a shared prefix with equal
suffixes) runs without an attention mask: causal attention alone is exact
there, and no per-step mask is built.

Positions follow ``generate``'s convention (the attention mask's cumulative
sum, pads at 0), so the trainer's scoring of the same tokens sees the same
positions. A row's tokens depend only on its prompt, its seed and its
settings, not on which rows share the batch or when they join or leave it (up
to the float rounding of batched matrix products, as with ``generate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import DynamicCache

from rewardbox.policy.attention import SharedPrefix, concatenate
from rewardbox.policy.episode_kv import common_len
from rewardbox.policy.kv_cache import (
    PreallocatedLayer,
    merge_caches,
    preallocated_cache,
    prepend_columns,
    trim_left,
)
from rewardbox.policy.sampling import PerRowSampler


class RowGuide(Protocol):
    """A per-row logits mask (``guided.ToolCallGuide``) applied to the active rows."""

    def apply(
        self, completions: Sequence[list[int]], scores: torch.Tensor, rows: Sequence[int]
    ) -> torch.Tensor:
        """Masked scores (shape of ``scores``); ``completions[i]`` is row ``rows[i]``'s tokens so far."""
        ...


@dataclass
class Rows:
    """The tensors of rows that decode together.

    Attributes:
        slots: the caller's id of each batch row, in batch order.
        cache: their KV cache (``B`` rows, ``cache.get_seq_length()`` columns).
        mask: ``[B, columns]`` attention mask, or None when no row has padding.
        next_position: ``[B, 1]`` position id of each row's next token.
        last: ``[B]`` each row's latest token (fed at the next step), or None before the first draw.
        shared: the prefixes rows attend to before their own columns (a row's cache and mask hold
            only the columns after its prefix), each row in at most one; empty: none.
    """

    slots: list[int]
    cache: Any
    mask: torch.Tensor | None
    next_position: torch.Tensor
    last: torch.Tensor | None = None
    shared: list[SharedPrefix] = field(default_factory=list)

    @property
    def mergeable(self) -> bool:
        """Whether other rows can join (the cache is written in place; sliding windows cannot)."""
        return all(isinstance(layer, PreallocatedLayer) for layer in self.cache.layers)


def prompt_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded batch, as ``generate`` derives them (shape: mask's; pads get 0)."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 0)


def prefill(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    cache: Any | None,
    capacity: int,
    slots: list[int],
    shared: SharedPrefix | None = None,
) -> tuple[Rows, torch.Tensor]:
    """Run the prompts' uncached columns; returns the rows and the last position's logits ``[B, 1, V]``.

    Args:
        input_ids, attention_mask: ``[B, W]`` left-padded prompts (``[prefix | pad | suffix]`` with a cache).
        cache: a KV cache already holding the first ``cache.get_seq_length()`` columns (a shared prefix), or None.
        capacity: KV positions to reserve: ``W`` + the largest token budget.
        slots: the caller's id of each row.
        shared: the prefix every row starts with, its ``P <= cache.get_seq_length()`` columns held once
            (``attention.SharedPrefix``; the model must take it, ``attention.takes_shared_prefix``): the
            rows' own cache starts at column ``P``. None: every cached column is copied into each row.
    """
    columns = 0 if shared is None else shared.length
    if shared is not None and (cache is None or cache.get_seq_length() < columns):
        raise ValueError("a shared prefix needs a cache holding at least its columns")
    cache = _decode_cache(model.config, cache, capacity - columns, start=columns)
    cached = columns + cache.get_seq_length()
    positions = prompt_positions(attention_mask)
    own = attention_mask[:, columns:]
    mask = None if bool(own.all()) else own
    prefixes = [] if shared is None else [shared]
    logits = _forward(model, input_ids[:, cached:], mask, positions[:, cached:], cache, prefixes)
    return Rows(list(slots), cache, mask, positions[:, -1:] + 1, shared=prefixes), logits


def advance(model: Any, rows: Rows) -> torch.Tensor:
    """Feed each row's ``last`` token; returns logits ``[B, 1, V]`` (the cache, mask and positions move on)."""
    if rows.mask is not None:
        rows.mask = torch.cat([rows.mask, rows.mask.new_ones((len(rows.slots), 1))], dim=-1)
    logits = _forward(
        model, rows.last[:, None], rows.mask, rows.next_position, rows.cache, rows.shared
    )
    rows.next_position = rows.next_position + 1
    return logits


def keep_rows(rows: Rows, keep: list[int]) -> None:
    """Keep only batch rows ``keep`` (indexes, in order); leading columns no kept row uses are dropped."""
    if len(keep) == len(rows.slots):
        return
    index = torch.tensor(keep, device=rows.next_position.device)
    rows.cache.batch_select_indices(index)
    rows.slots = [rows.slots[i] for i in keep]
    rows.next_position, rows.last = rows.next_position[index], rows.last[index]
    if rows.shared:
        rows.shared = [p for p in (prefix.select(index) for prefix in rows.shared) if p is not None]
    if rows.mask is None:
        return
    rows.mask = rows.mask[index]
    _trim_unused(rows)


def _trim_unused(rows: Rows) -> None:
    """Drop the leading columns no row uses (``kv_cache.trim_left``); a mask of all ones becomes None."""
    unused = int(rows.mask.any(dim=0).long().argmax()) if rows.slots else 0
    if unused and rows.mergeable:
        trim_left(rows.cache, unused)
        rows.mask = rows.mask[:, unused:]
    if bool(rows.mask.all()):
        rows.mask = None


def merge_rows(a: Rows, b: Rows, capacity: int) -> Rows:
    """One batch of ``a``'s rows then ``b``'s, columns right-aligned, ``capacity`` KV positions reserved.

    Shared prefixes: both sides' are kept, the same tokens made one; two that ``fold_plan`` folds
    first have their rows take the columns beyond their common part into their own (``rebase``)."""
    plan = fold_plan(
        [(p.tokens, int(p.using(len(a.slots)).sum())) for p in a.shared]
        + [(p.tokens, int(p.using(len(b.slots)).sum())) for p in b.shared],
        len(a.slots) + len(b.slots),
    )
    before = max(a.cache.get_seq_length(), b.cache.get_seq_length())
    for side, keeps in ((a, plan[: len(a.shared)]), (b, plan[len(a.shared) :])):
        for index in reversed(range(len(side.shared))):
            rebase(side, index, keeps[index])
    la, lb = a.cache.get_seq_length(), b.cache.get_seq_length()
    width = max(la, lb)
    capacity += width - before  # the columns rebase moved in: the budget left is the same
    if a.mask is None and b.mask is None and la == lb:
        mask = None
    else:
        mask = torch.cat([_padded_mask(a, la, width), _padded_mask(b, lb, width)])
    return Rows(
        a.slots + b.slots,
        merge_caches(a.cache, b.cache, capacity),
        mask,
        torch.cat([a.next_position, b.next_position]),
        torch.cat([a.last, b.last]),
        concatenate([(a.shared, len(a.slots)), (b.shared, len(b.slots))]),
    )


FOLD_MIN_TOKENS = 64
"""Two prefixes fold only into a common part at least this long (the prefix cache's default
``min_tokens``): a few common tokens (a chat template's opening) save nothing for the rows' widening."""


def fold_plan(prefixes: list[tuple[tuple[int, ...], int]], batch_rows: int) -> list[int]:
    """How many of its columns each prefix keeps shared when the prefixes of two batches meet.

    Args:
        prefixes: ``(tokens, rows using it)`` per prefix.
        batch_rows: rows of the merged batch.

    Returns:
        Per prefix, the columns it keeps (its own length where it stays as it is). Two prefixes fold
        into their common first ``c`` tokens when that reads fewer columns per decode step. Kept,
        a step reads ``P1 + P2``. Folded, it reads ``c`` once, and the columns beyond it become their
        rows' own, right-aligned in the batch's one buffer: in the worst case every row of the batch
        is padded to them, ``c + batch_rows x max(P1 - c, P2 - c)``. The same tokens fold for free.
        Two tasks' extensions of one domain prefix (``c`` about 1,000, 5-60 columns beyond it, 8
        rows: 1,480 against 2,110) fold; two domains (``c``: a chat template's first few tokens,
        under ``FOLD_MIN_TOKENS``) never do. Greedy: the pair that saves the most folds first, then again, until no fold saves
        a column.
    """
    tokens = [t for t, _ in prefixes]
    keep = [len(t) for t in tokens]
    alive = list(range(len(prefixes)))  # one index per distinct prefix left
    members = {i: [i] for i in alive}
    while True:
        best, pair = 0, None
        for x in range(len(alive)):
            for y in range(x + 1, len(alive)):
                i, j = alive[x], alive[y]
                common = common_len(tokens[i][: keep[i]], tokens[j][: keep[j]])
                if common < min(FOLD_MIN_TOKENS, keep[i], keep[j]):
                    continue
                folded = common + batch_rows * max(keep[i] - common, keep[j] - common)
                saving = keep[i] + keep[j] - folded
                if saving > best:
                    best, pair = saving, (i, j, common)
        if pair is None:
            break
        i, j, common = pair
        for member in members[i] + members[j]:
            keep[member] = common
        members[i] += members.pop(j)
        alive.remove(j)
    return keep


def rebase(rows: Rows, index: int, keep: int) -> None:
    """Keep only the first ``keep`` (>= 1) columns of ``rows.shared[index]`` shared: each of its rows
    takes the prefix's columns ``keep..P`` as its own first columns (placed just before its own, so its
    columns stay in token order); leading columns no row uses then go. No-op when ``keep`` is all of it."""
    shared = rows.shared[index]
    if keep >= shared.length:
        return
    if keep < 1:
        raise ValueError("a rebased prefix keeps at least one column (fold_plan never folds to 0)")
    batch, width = len(rows.slots), rows.cache.get_seq_length()
    moved = shared.length - keep
    using = shared.using(batch)
    old = rows.mask if rows.mask is not None else rows.next_position.new_ones((batch, width))
    first = torch.where(old.any(-1), old.long().argmax(-1), torch.full((batch,), width))
    mask = torch.cat([old.new_zeros((batch, moved)), old], dim=-1)
    starts: dict[int, list[int]] = {}
    for row in using.nonzero().flatten().tolist():
        start = int(first[row])
        mask[row, start : start + moved] = 1
        starts.setdefault(start, []).append(row)
    prepend_columns(
        rows.cache,
        moved,
        [(start, torch.tensor(rows_at)) for start, rows_at in starts.items()],
        [tuple(t[:, :, keep:] for t in shared.layer(i)) for i in range(len(rows.cache.layers))],
    )
    rows.shared[index] = shared.crop(keep)
    rows.mask = mask
    _trim_unused(rows)


def _padded_mask(rows: Rows, columns: int, width: int) -> torch.Tensor:
    mask = (
        rows.mask
        if rows.mask is not None
        else rows.next_position.new_ones((len(rows.slots), columns))
    )
    return torch.cat([mask.new_zeros((len(rows.slots), width - columns)), mask], dim=-1)


def choose_tokens(
    logits: torch.Tensor,
    slots: Sequence[int],
    completions: Any,
    sampler: PerRowSampler,
    guides: Sequence[RowGuide] = (),
) -> torch.Tensor:
    """Each row's next token ``[B]`` (guides, then the sampler); ``completions[slot]`` is its tokens so far."""
    scores = logits[:, -1].float()
    for guide in guides:
        scores = guide.apply([completions[s] for s in slots], scores, slots)
    return sampler.draw(scores, slots)


def decode_batch(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    budgets: Sequence[int],
    stop_token_ids: Sequence[int],
    sampler: PerRowSampler,
    guides: Sequence[RowGuide] = (),
    cache: Any | None = None,
) -> list[list[int]]:
    """Generate each row's completion: until a stop token (kept) or ``budgets[row]`` tokens.

    Args:
        model: a causal LM whose forward takes ``cache`` and ``logits_to_keep``
            (``transformers`` 5 models).
        input_ids: ``[B, W]`` left-padded prompts (``[prefix | pad | suffix]`` with a prefix cache).
        attention_mask: ``[B, W]``, 1 on real tokens.
        budgets: per row, most new tokens (>= 1).
        stop_token_ids: tokens that end a row (the stop token ends its completion).
        sampler: chooses each row's token and records its log-prob (``sampler.logprobs``).
        guides: per-row masks applied before sampling.
        cache: a KV cache already holding the first ``cache.get_seq_length()`` columns
            of every row (the shared-prefix cache), or None.

    Returns:
        Per row, the new token ids in order (length <= its budget). A model fault
        propagates (the caller turns it into a system error).
    """
    stops = {int(t) for t in stop_token_ids}
    completions: list[list[int]] = [[] for _ in budgets]
    rows, logits = prefill(
        model,
        input_ids,
        attention_mask,
        cache,
        input_ids.shape[1] + max(budgets),
        list(range(len(budgets))),
    )
    while True:
        rows.last = choose_tokens(logits, rows.slots, completions, sampler, guides)
        keep = []
        for i, (slot, token) in enumerate(zip(rows.slots, rows.last.tolist())):
            completions[slot].append(token)
            if token not in stops and len(completions[slot]) < budgets[slot]:
                keep.append(i)
        if not keep:
            return completions
        keep_rows(rows, keep)
        logits = advance(model, rows)


def full_attention(config: Any) -> bool:
    """Whether every layer of the model is full attention: its decode cache is written in place and
    ``Rows`` of it can be merged (sliding-window layers keep ``DynamicCache``, which cannot)."""
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    return all(t == "full_attention" for t in layer_types)


def _decode_cache(config: Any, cache: Any | None, capacity: int, start: int = 0) -> Any:
    """A cache written in place (``kv_cache.preallocated_cache``, the prefix's columns from ``start`` on
    copied in once) for full-attention models; ``transformers``' ``DynamicCache`` for others (sliding
    windows keep their layers; ``start`` must be 0 there)."""
    if full_attention(config) and (cache is None or isinstance(cache, DynamicCache)):
        return preallocated_cache(config, capacity, cache, start=start)
    if start:
        raise ValueError("only a full-attention model's cache can leave a shared prefix out")
    return cache if cache is not None else DynamicCache(config=config)


def _forward(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor,
    cache: Any,
    shared: list[SharedPrefix] | None = None,
) -> torch.Tensor:
    """Logits of the last position only (``[B, 1, V]``), the cache extended in place."""
    extra = {"shared_prefix": shared} if shared else {}
    return model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        cache=cache,
        use_cache=True,
        logits_to_keep=1,
        **extra,
    ).logits
