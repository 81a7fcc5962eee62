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
and one micro-batch's at a time. With a budget (``grpo.micro_batch_memory_mib``) the
prefix's graph is kept only when it and one row fit; otherwise the prefix runs
without a graph and each chunk of it is recomputed with gradients when the block
ends (``prefix_plan``; one more forward of the prefix), so what a block keeps for
backward stays within the budget (docs/performance.md, "Memory").
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


def activation_bytes_per_token(model, context_tokens: int = 0) -> int:
    """Estimated bytes autograd keeps per scored token of a Llama-style decoder (forward for backward).

    Per layer: about 16 hidden-width tensors (norms, q/k/v/o inputs and outputs,
    residuals, LoRA inputs) and 4 MLP-width ones (gate, up, their product, the
    activation), plus the attention kernel's scores and probabilities, ``2 x heads x
    context_tokens`` per token (CPU attention with a padding mask runs torch's math
    path, which keeps both for backward), in the model's dtype. Measured on SmolLM2-135M
    (docs/performance.md, "Memory"): a micro-batch of 2 rows x 264 tokens after a
    900-token prefix kept ~1.7 GiB, which the hidden/MLP terms alone put at 0.9 GiB.
    """
    config = model.config
    itemsize = next(model.parameters()).element_size()
    width = 16 * config.hidden_size + 4 * config.intermediate_size
    return int(
        config.num_hidden_layers
        * (width + 2 * config.num_attention_heads * context_tokens)
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


@dataclass
class PrefixPlan:
    """How a block's prefix keeps what its backward needs, from the memory budget.

    Attributes:
        chunk_tokens: None keeps the prefix's whole graph (its activations) until the block ends;
            a count runs the prefix without a graph in chunks of this many tokens and recomputes
            each chunk with gradients, last chunk first, when the block ends (one more forward of
            the prefix; only one chunk's activations live at a time).
        row_budget_bytes: what the block's micro-batches may keep (None: no budget).
    """

    chunk_tokens: int | None
    row_budget_bytes: int | None


def prefix_plan(model, block: Block, budget_bytes: int | None) -> PrefixPlan:
    """Keep the prefix's graph when it and one row of the block fit ``budget_bytes``; else recompute.

    Estimates from ``activation_bytes_per_token`` (attention context: the prefix for the prefix,
    the longest row for the rows). Without a budget, or without a shared prefix, the graph is kept.
    """
    if budget_bytes is None or not block.prefix_len:
        return PrefixPlan(None, budget_bytes)
    p = block.prefix_len
    prefix_bytes = p * activation_bytes_per_token(model, p)
    longest = max(len(s.prompt_ids) + len(s.completion_ids) for s in block.samples)
    one_row = (longest - p) * activation_bytes_per_token(model, longest)
    if prefix_bytes + one_row <= budget_bytes:
        return PrefixPlan(None, budget_bytes - prefix_bytes)
    return PrefixPlan(max(1, budget_bytes // activation_bytes_per_token(model, p)), budget_bytes)


@dataclass
class _Recompute:
    """What the chunked prefix's backward needs: chunk size and each chunk's RNG state (dropout)."""

    chunk_tokens: int
    rng_states: list[torch.Tensor]


def _encode_prefix(
    model, ids: list[int], chunk_tokens: int | None = None
) -> tuple[SharedPrefix, list[tuple[torch.Tensor, torch.Tensor]] | _Recompute]:
    """Run the prefix once: (its states as leaf tensors for the micro-batches, what its backward needs:
    the states with their graph, or with ``chunk_tokens`` a :class:`_Recompute`)."""
    device = next(model.parameters()).device
    tokens = torch.tensor([ids], dtype=torch.long, device=device)
    if chunk_tokens is None:
        out = model.get_decoder()(input_ids=tokens, use_cache=True)
        graph = [(layer.keys, layer.values) for layer in out.cache.layers]
        leaves = [
            (k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
            for k, v in graph
        ]
        return SharedPrefix(list(ids), leaves), graph
    cache, states = None, []
    with torch.no_grad():
        for start in range(0, len(ids), chunk_tokens):
            states.append(torch.get_rng_state())
            cache = _run_chunk(model, tokens, start, chunk_tokens, cache).cache
    trains = any(p.requires_grad for p in model.parameters())
    leaves = [
        (layer.keys.detach().requires_grad_(trains), layer.values.detach().requires_grad_(trains))
        for layer in cache.layers
    ]
    return SharedPrefix(list(ids), leaves), _Recompute(chunk_tokens, states)


def _run_chunk(model, tokens: torch.Tensor, start: int, chunk_tokens: int, cache):
    """The decoder on ``tokens[:, start:start + chunk_tokens]`` after ``cache``'s ``start`` columns."""
    end = min(tokens.shape[1], start + chunk_tokens)
    positions = torch.arange(start, end, device=tokens.device)[None]
    return model.get_decoder()(
        input_ids=tokens[:, start:end], position_ids=positions, cache=cache, use_cache=True
    )


def _backward_prefix(
    model, prefix: SharedPrefix, graph: list[tuple[torch.Tensor, torch.Tensor]] | _Recompute
) -> None:
    """Back-propagate the leaves' accumulated gradients through the prefix's forward, once."""
    if isinstance(graph, _Recompute):
        _backward_in_chunks(model, prefix, graph)
        return
    outputs, grads = [], []
    for (leaf_k, leaf_v), (k, v) in zip(prefix.kv, graph):
        for leaf, tensor in ((leaf_k, k), (leaf_v, v)):
            if leaf.grad is not None and tensor.requires_grad:
                outputs.append(tensor)
                grads.append(leaf.grad)
    if outputs:
        torch.autograd.backward(outputs, grads)


def _backward_in_chunks(model, prefix: SharedPrefix, plan: _Recompute) -> None:
    """Recompute the prefix chunk by chunk, last first, each with gradients, and back-propagate.

    A chunk's keys/values receive the micro-batches' gradients plus those later chunks sent back
    through their attention (added into the leaves' ``.grad`` before the chunk runs), so the result
    equals back-propagating the whole prefix graph. Dropout draws the chunk's forward RNG state.
    """
    from transformers import DynamicCache

    if all(leaf.grad is None for pair in prefix.kv for leaf in pair):
        return
    grads = [
        [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in pair]
        for pair in prefix.kv
    ]
    tokens = torch.tensor([prefix.ids], dtype=torch.long, device=prefix.kv[0][0].device)
    starts = list(range(0, prefix.length, plan.chunk_tokens))
    with torch.random.fork_rng(devices=[]):
        for start, state in reversed(list(zip(starts, plan.rng_states))):
            torch.set_rng_state(state)
            past = [
                [leaf[:, :, :start].detach().requires_grad_(True) for leaf in pair]
                for pair in prefix.kv
            ]
            cache = DynamicCache([tuple(pair) for pair in past]) if start else None
            out = _run_chunk(model, tokens, start, plan.chunk_tokens, cache)
            end = min(prefix.length, start + plan.chunk_tokens)
            outputs, wanted = [], []
            for layer, pair in zip(out.cache.layers, grads):
                for tensor, grad in ((layer.keys, pair[0]), (layer.values, pair[1])):
                    if tensor.requires_grad:
                        outputs.append(tensor[:, :, start:end])
                        wanted.append(grad[:, :, start:end])
            if outputs:
                torch.autograd.backward(outputs, wanted)
            for leaves, pair in zip(past, grads):
                for leaf, grad in zip(leaves, pair):
                    if leaf.grad is not None:
                        grad[:, :, :start] += leaf.grad


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

    With ``memory_budget_bytes`` what a block keeps for backward stays within it (estimates:
    ``activation_bytes_per_token``): the prefix's graph is kept only when it and one row fit
    (else it is recomputed in chunks that fit, :func:`prefix_plan`), and micro-batches hold only
    as many rows as fit what is left (``micro_batch_rows``), so long later-turn samples run in
    smaller micro-batches than short first-turn ones.

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
    for block in plan_blocks(samples, min_shared):
        plan = prefix_plan(model, block, memory_budget_bytes)
        longest = max(len(s.prompt_ids) + len(s.completion_ids) for s in block.samples)
        per_token = activation_bytes_per_token(model, longest)
        rows = micro_batch_rows(
            block.samples, block.prefix_len, micro_batch_sequences, plan.row_budget_bytes, per_token
        )
        prefix, graph = (None, None)
        if block.prefix_len:
            ids = block.samples[0].prompt_ids[: block.prefix_len]
            prefix, graph = _encode_prefix(model, ids, plan.chunk_tokens)
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
            _backward_prefix(model, prefix, graph)
