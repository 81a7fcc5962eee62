"""The local policy's batched decode loop: one prefill, then one forward pass per token.

``transformers``' ``generate`` is general: every step it rebuilds its model
inputs, runs its logits processors and stopping criteria through generic
lists, and, when sampling, draws a softmax and a multinomial over the whole
batch from the global RNG, which the per-row sampler then has to override.
On CPU with short prompts that per-step overhead is a visible share of a
step (a step of SmolLM2-135M for 8 rows is a few tens of ms), so the policy
decodes with this loop instead. Per step it does only:

1. one forward pass for the active rows (logits of the last position only);
2. the tool-call guide on the rows writing a tool name or key;
3. ``PerRowSampler.draw``: temperature, the row's own generator, the token's
   log-probability (greedy rows take the argmax, log-prob 0);
4. rows that produced a stop token or used their budget leave the batch: their
   KV is dropped (``Cache.batch_select_indices``), so the rest of the batch does
   not keep paying for them.

The KV cache is preallocated for the prompt width plus the largest budget and
written in place (``kv_cache``), not concatenated (copied) every step.

A batch without padding (equal prompt lengths, or a shared prefix with equal
suffixes) runs without an attention mask: causal attention alone is exact
there, and no per-step mask is built.

Positions follow ``generate``'s convention (the attention mask's cumulative
sum, pads at 0), so the trainer's scoring of the same tokens sees the same
positions. A row's tokens depend only on its prompt, its seed and its
settings, not on which rows share the batch or when they leave it (up to the
float rounding of batched matrix products, as with ``generate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from transformers import DynamicCache

from rewardbox.policy.kv_cache import preallocated_cache
from rewardbox.policy.sampling import PerRowSampler


class RowGuide(Protocol):
    """A per-row logits mask (``guided.ToolCallGuide``) applied to the active rows."""

    def apply(self, completions: Sequence[list[int]], scores: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
        """Masked scores (shape of ``scores``); ``completions[i]`` is row ``rows[i]``'s tokens so far."""
        ...


def prompt_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids of a left-padded batch, as ``generate`` derives them (shape: mask's; pads get 0)."""
    positions = attention_mask.long().cumsum(-1) - 1
    return positions.masked_fill(attention_mask == 0, 0)


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
    rows, stops = list(range(input_ids.shape[0])), {int(t) for t in stop_token_ids}
    completions: list[list[int]] = [[] for _ in rows]
    cache = _decode_cache(model.config, cache, input_ids.shape[1] + max(budgets))
    cached = cache.get_seq_length()  # columns the cache already holds (a shared prefix)
    positions = prompt_positions(attention_mask)
    if bool(attention_mask.all()):  # no padding: causal attention needs no mask (none is built per step)
        attention_mask = None
    logits = _forward(model, input_ids[:, cached:], attention_mask, positions[:, cached:], cache)
    next_position = positions[:, -1:] + 1
    while True:
        scores = logits[:, -1].float()
        for guide in guides:
            scores = guide.apply([completions[r] for r in rows], scores, rows)
        tokens = sampler.draw(scores, rows)
        keep = []
        for i, (row, token) in enumerate(zip(rows, tokens.tolist())):
            completions[row].append(token)
            if token not in stops and len(completions[row]) < budgets[row]:
                keep.append(i)
        if not keep:
            return completions
        if len(keep) < len(rows):
            index = torch.tensor(keep, device=tokens.device)
            cache.batch_select_indices(index)
            tokens, next_position = tokens[index], next_position[index]
            attention_mask = None if attention_mask is None else attention_mask[index]
            rows = [rows[i] for i in keep]
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, attention_mask.new_ones((len(rows), 1))], dim=-1)
        logits = _forward(model, tokens[:, None], attention_mask, next_position, cache)
        next_position = next_position + 1


def _decode_cache(config: Any, cache: Any | None, capacity: int) -> Any:
    """A cache written in place (``kv_cache.preallocated_cache``, the prefix's columns copied in once) for
    full-attention models; ``transformers``' ``DynamicCache`` for others (sliding windows keep their layers)."""
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if all(t == "full_attention" for t in layer_types) and (cache is None or isinstance(cache, DynamicCache)):
        return preallocated_cache(config, capacity, cache)
    return cache if cache is not None else DynamicCache(config=config)


def _forward(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor,
             cache: Any) -> torch.Tensor:
    """Logits of the last position only (``[B, 1, V]``), the cache extended in place."""
    return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                 use_cache=True, logits_to_keep=1).logits
