"""Micro-batches of one optimiser step, with each shared prompt prefix encoded once per step.

A group's G rollouts start from the same first-turn prompt (about 1,100 tokens in
the embedded domains, of which ~900 are the domain's system prompt, tool list and
worked example). Scored micro-batch by micro-batch, that prompt would run once
per micro-batch (G / ``micro_batch_sequences`` times per group, issue 23 item 5).
Here the step's samples (sorted by prompt) are cut into **blocks** of
consecutive samples sharing a prefix, the cut chosen by dynamic programming to
minimise the tokens the decoder runs (a block of ``m`` samples with prefix ``P``
costs ``P + sum(len_i - P)``; prefixes shorter than ``min_shared`` are not
shared). Each block's prefix runs once (batch 1, with gradients); its key/value
states are detached into leaf tensors that every micro-batch of the block
reuses, and their gradients, accumulated over the block's micro-batches, are
back-propagated through the prefix once when the block ends. The gradient is
the same as scoring every row in full (the prefix's states do not depend on what
follows; the chain rule through the leaves sums the rows' contributions), which
``tests/training/test_shared_prefix.py`` checks numerically.

Memory: a block holds the prefix's activations (batch 1) for the whole block
and one micro-batch's at a time, less than a micro-batch that re-encodes the prefix
for every row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from rewardbox.policy.prefix_cache import common_prefix_len
from rewardbox.training import logprobs as _logprobs
from rewardbox.training.logprobs import Sample, SharedPrefix, completion_logprobs


@dataclass
class Block:
    """Consecutive samples scored against one shared prefix of ``prefix_len`` tokens (0: none)."""

    samples: list[Sample]
    prefix_len: int


def plan_blocks(samples: Sequence[Sample], min_shared: int | None = None) -> list[Block]:
    """Cut samples (in the given order, sorted by prompt) into blocks that run the fewest tokens.

    Returns:
        Blocks covering every sample once, in order. A block's ``prefix_len`` is
        the prompt prefix all its samples share (each keeps >= 1 own prompt token),
        0 for singletons and prefixes shorter than ``min_shared`` (None: ``logprobs.MIN_SHARED_PREFIX_TOKENS``).
    """
    min_shared = _logprobs.MIN_SHARED_PREFIX_TOKENS if min_shared is None else min_shared
    n = len(samples)
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
    adjacent = [
        common_prefix_len([samples[i].prompt_ids, samples[i + 1].prompt_ids]) for i in range(n - 1)
    ]
    best = [0] + [
        None
    ] * n  # best[j]: fewest tokens for samples[:j]; cut[j]: start of its last block
    cut, shared = [0] * (n + 1), [0] * (n + 1)
    for j in range(1, n + 1):
        prefix, total = 1 << 62, 0
        for i in range(j - 1, -1, -1):  # last block = samples[i:j]
            total += lengths[i]
            if i < j - 1:
                prefix = min(prefix, adjacent[i])
            p = prefix if j - i > 1 and prefix >= min_shared else 0
            cost = best[i] + total - (j - i - 1) * p
            if best[j] is None or cost < best[j]:
                best[j], cut[j], shared[j] = cost, i, p
    blocks, j = [], n
    while j > 0:
        blocks.append(Block(list(samples[cut[j] : j]), shared[j]))
        j = cut[j]
    return blocks[::-1]


def activation_bytes_per_token(model) -> int:
    """Estimated bytes autograd keeps per scored token of a Llama-style decoder (forward for backward).

    Per layer: about 16 hidden-width tensors (norms, q/k/v/o inputs and outputs,
    residuals, LoRA inputs) and 4 MLP-width ones (gate, up, their product, the
    activation), in the model's dtype; the estimate behind ``micro_batch_rows``.
    """
    config = model.config
    itemsize = next(model.parameters()).element_size()
    return int(
        config.num_hidden_layers
        * (16 * config.hidden_size + 4 * config.intermediate_size)
        * itemsize
    )


def micro_batch_rows(
    samples: Sequence[Sample],
    prefix_len: int,
    most_rows: int,
    budget_bytes: int | None,
    bytes_per_token: int,
) -> int:
    """Rows per micro-batch of a block: at most ``most_rows``, and (with a budget) as many of its longest
    rows (tokens after the shared prefix) as fit ``budget_bytes``; at least 1."""
    if budget_bytes is None:
        return most_rows
    longest = max(len(s.prompt_ids) + len(s.completion_ids) - prefix_len for s in samples)
    return max(1, min(most_rows, budget_bytes // max(1, bytes_per_token * longest)))


def _encode_prefix(
    model, ids: list[int]
) -> tuple[SharedPrefix, list[tuple[torch.Tensor, torch.Tensor]]]:
    """Run the prefix once: (its states as leaf tensors for the micro-batches, the states with their graph)."""
    device = next(model.parameters()).device
    out = model.get_decoder()(
        input_ids=torch.tensor([ids], dtype=torch.long, device=device), use_cache=True
    )
    graph = [(layer.keys, layer.values) for layer in out.cache.layers]
    leaves = [
        (k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
        for k, v in graph
    ]
    return SharedPrefix(list(ids), leaves), graph


def _backward_prefix(prefix: SharedPrefix, graph: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Back-propagate the leaves' accumulated gradients through the prefix's forward, once."""
    outputs, grads = [], []
    for (leaf_k, leaf_v), (k, v) in zip(prefix.kv, graph):
        for leaf, tensor in ((leaf_k, k), (leaf_v, v)):
            if leaf.grad is not None and tensor.requires_grad:
                outputs.append(tensor)
                grads.append(leaf.grad)
    if outputs:
        torch.autograd.backward(outputs, grads)


def scored_micro_batches(
    model,
    samples: Sequence[Sample],
    pad_id: int,
    temperature: float,
    micro_batch_sequences: int,
    min_shared: int | None = None,
    memory_budget_bytes: int | None = None,
) -> Iterator[tuple[list[Sample], torch.Tensor, torch.Tensor]]:
    """Yield ``(batch, logprobs [B, T], mask [B, T])`` for micro-batches of at most ``micro_batch_sequences`` rows.

    With ``memory_budget_bytes`` a block's micro-batches hold only as many rows as
    fit it (``micro_batch_rows``, ``activation_bytes_per_token``), so long
    later-turn samples run in smaller micro-batches than short first-turn ones.

    The caller back-propagates each micro-batch's loss before asking for the next
    one (as ``trainer.optimise_step`` does); after a block's last micro-batch the
    block's prefix is back-propagated here, so the gradients are complete once
    the iterator is exhausted (stopping early drops the prefix's share).

    Raises:
        ValueError: ``micro_batch_sequences < 1`` or a sample ``completion_logprobs`` refuses.
    """
    if micro_batch_sequences < 1:
        raise ValueError(f"micro_batch_sequences must be >= 1, got {micro_batch_sequences}")
    min_shared = _logprobs.MIN_SHARED_PREFIX_TOKENS if min_shared is None else min_shared
    per_token = activation_bytes_per_token(model) if memory_budget_bytes is not None else 0
    for block in plan_blocks(samples, min_shared):
        rows = micro_batch_rows(
            block.samples, block.prefix_len, micro_batch_sequences, memory_budget_bytes, per_token
        )
        prefix, graph = (None, None)
        if block.prefix_len:
            prefix, graph = _encode_prefix(model, block.samples[0].prompt_ids[: block.prefix_len])
        for start in range(0, len(block.samples), rows):
            batch = block.samples[start : start + rows]
            logprobs, mask = completion_logprobs(
                model,
                batch,
                pad_id,
                temperature,
                min_shared_prefix_tokens=min_shared,
                prefix=prefix,
            )
            yield batch, logprobs, mask
        if prefix is not None:
            _backward_prefix(prefix, graph)
