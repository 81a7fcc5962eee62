"""Micro-batches of one optimiser step, with each shared prompt prefix encoded once per step.

A group's G rollouts start from the same first-turn prompt (about 1,100 tokens in
the embedded domains, of which ~900 are the domain's system prompt, tool list and
worked example). Scored micro-batch by micro-batch, that prompt would run once
per micro-batch (G / ``micro_batch_sequences`` times per group, issue 23 item 5).
Here the step's samples (sorted by prompt) are arranged into **blocks** of
samples sharing a prefix, nested where a later turn's prompt extends an earlier
one (``prefix_blocks.plan_blocks``: a dynamic programme over the prompts' trie
that minimises the tokens the decoder runs). Each block's prefix runs once
(batch 1, with gradients; a nested one only its extension, on top of its
parent's states); its key/value
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

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from rewardbox.training import logprobs as _logprobs
from rewardbox.training.logprobs import Sample, SharedPrefix, completion_logprobs, run_decoder
from rewardbox.training.prefix_blocks import Block, plan_blocks, tokens_run

__all__ = [
    "Block",
    "activation_bytes_per_token",
    "plan_blocks",
    "prefix_plan",
    "scored_micro_batches",
    "state_bytes_per_token",
    "tokens_run",
]


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


def state_bytes_per_token(model) -> int:
    """Bytes an encoded prefix holds per column while its block is open: its keys and values in every
    layer (``kv_cache.kv_bytes_per_position``, the model's dtype) and their gradient, the same again.
    A nested prefix holds every column of its prefix, those below it included."""
    from rewardbox.policy.kv_cache import kv_bytes_per_position

    return 2 * kv_bytes_per_position(model.config, next(model.parameters()).dtype)


def prefix_plan(model, block: Block, budget_bytes: int | None, encoded: int = 0) -> PrefixPlan:
    """Keep the graph of the block's prefix extension (its tokens after the ``encoded`` ones below it)
    when it, the prefix's states and the largest row under it fit ``budget_bytes``; else recompute it
    in chunks.

    Estimates from ``activation_bytes_per_token`` (attention context: the prefix for the prefix, the
    row's length for a row) and ``state_bytes_per_token`` (the prefix's keys and values with their
    gradient, every column, kept either way). A row counts its tokens after its own block's prefix,
    the deepest under this one, so a block whose rows all nest deeper counts their short remainders;
    a nested block then decides with what this one left (``row_budget_bytes``), which still holds
    that row. Without a budget, or with nothing to encode, the graph is kept.
    """
    if budget_bytes is None or block.prefix_len <= encoded:
        return PrefixPlan(None, budget_bytes)
    p, extension = block.prefix_len, block.prefix_len - encoded
    states = p * state_bytes_per_token(model)
    prefix_bytes = extension * activation_bytes_per_token(model, p)
    if states + prefix_bytes + _largest_row_bytes(model, block) <= budget_bytes:
        return PrefixPlan(None, budget_bytes - states - prefix_bytes)
    left = max(0, budget_bytes - states)
    return PrefixPlan(max(1, left // activation_bytes_per_token(model, p)), left)


def _largest_row_bytes(model, block: Block) -> int:
    """The most any one row under ``block`` keeps: its tokens after its own block's prefix."""
    return max(
        (
            (len(s.prompt_ids) + len(s.completion_ids) - nested.prefix_len)
            * activation_bytes_per_token(model, len(s.prompt_ids) + len(s.completion_ids))
            for nested in block.walk()
            for s in nested.samples
        ),
        default=0,
    )


@dataclass
class _Recompute:
    """What a chunked prefix's backward needs: chunk size, each chunk's RNG state (dropout), and the
    prefix it extends (its columns' gradients go back to that prefix's states)."""

    chunk_tokens: int
    rng_states: list[torch.Tensor]
    below: SharedPrefix | None = None


def _cache_of(prefix: SharedPrefix | None, trains: bool = True):
    """A ``DynamicCache`` holding ``prefix``'s states (None: no cache); ``trains`` False detaches them."""
    from transformers import DynamicCache

    if prefix is None:
        return None
    return DynamicCache([(k, v) if trains else (k.detach(), v.detach()) for k, v in prefix.kv])


def _encode_prefix(
    model, ids: list[int], chunk_tokens: int | None = None, below: SharedPrefix | None = None
) -> tuple[SharedPrefix, list[tuple[torch.Tensor, torch.Tensor]] | _Recompute]:
    """Run the prefix once, on top of the encoded prefix ``below`` (its first tokens; None: from the
    start): (its states, all ``len(ids)`` columns, as leaf tensors for the micro-batches; what its
    backward needs: the states with their graph, which reaches ``below``'s leaves, or with
    ``chunk_tokens`` a :class:`_Recompute`)."""
    device = next(model.parameters()).device
    tokens = torch.tensor([ids], dtype=torch.long, device=device)
    start = 0 if below is None else below.length
    if chunk_tokens is None:
        out = _run_chunk(model, tokens, start, len(ids) - start, _cache_of(below))
        graph = [(layer.keys, layer.values) for layer in out.cache.layers]
        leaves = [
            (k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
            for k, v in graph
        ]
        return SharedPrefix(list(ids), leaves), graph
    cache, states = _cache_of(below, trains=False), []
    with torch.no_grad():
        for chunk in range(start, len(ids), chunk_tokens):
            states.append(torch.get_rng_state())
            cache = _run_chunk(model, tokens, chunk, chunk_tokens, cache).cache
    trains = any(p.requires_grad for p in model.parameters())
    leaves = [
        (layer.keys.detach().requires_grad_(trains), layer.values.detach().requires_grad_(trains))
        for layer in cache.layers
    ]
    return SharedPrefix(list(ids), leaves), _Recompute(chunk_tokens, states, below)


def _run_chunk(model, tokens: torch.Tensor, start: int, chunk_tokens: int, cache):
    """The decoder on ``tokens[:, start:start + chunk_tokens]`` after ``cache``'s ``start`` columns."""
    end = min(tokens.shape[1], start + chunk_tokens)
    positions = torch.arange(start, end, device=tokens.device)[None]
    return run_decoder(
        model,
        input_ids=tokens[:, start:end],
        position_ids=positions,
        cache=cache,
        use_cache=True,
    )


def _backward_prefix(
    model, prefix: SharedPrefix, graph: list[tuple[torch.Tensor, torch.Tensor]] | _Recompute
) -> None:
    """Back-propagate the leaves' accumulated gradients through the prefix's forward, once; the share
    of the prefix below it lands in that prefix's leaves."""
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
    equals back-propagating the whole prefix graph. The columns of the prefix below (``plan.below``)
    collect the same way and are added to its leaves' gradients at the end. Dropout draws the
    chunk's forward RNG state.
    """
    from transformers import DynamicCache

    if all(leaf.grad is None for pair in prefix.kv for leaf in pair):
        return
    grads = [
        [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in pair]
        for pair in prefix.kv
    ]
    tokens = torch.tensor([prefix.ids], dtype=torch.long, device=prefix.kv[0][0].device)
    below = 0 if plan.below is None else plan.below.length
    starts = list(range(below, prefix.length, plan.chunk_tokens))
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
    if plan.below is not None:
        for leaves, pair in zip(plan.below.kv, grads):
            for leaf, grad in zip(leaves, pair):
                if leaf.requires_grad:
                    part = grad[:, :, :below]
                    leaf.grad = part.clone() if leaf.grad is None else leaf.grad + part


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

    Blocks come from :func:`plan_blocks`; a nested block encodes its prefix's extension on top of
    its parent's states, and its gradient reaches the parent's through them. With
    ``memory_budget_bytes`` what the open blocks keep for backward stays within it (estimates:
    ``activation_bytes_per_token``, ``state_bytes_per_token``): a prefix's graph is kept only when it,
    its states and the largest row under it fit what the blocks below it left (else it is recomputed in chunks that fit, :func:`prefix_plan`), and
    micro-batches hold only as many rows as fit what is left (``micro_batch_rows``), so long
    later-turn samples run in smaller micro-batches than short first-turn ones.

    The caller back-propagates each micro-batch's loss before asking for the next
    one (as ``trainer.optimise_step`` does); after a block's last micro-batch (and its children's)
    the block's prefix is back-propagated here, so the gradients are complete once
    the iterator is exhausted (stopping early drops the prefixes' share).

    Raises:
        ValueError: ``micro_batch_sequences < 1`` or a sample ``completion_logprobs`` refuses.
    """
    if micro_batch_sequences < 1:
        raise ValueError(f"micro_batch_sequences must be >= 1, got {micro_batch_sequences}")
    min_shared = _logprobs.MIN_SHARED_PREFIX_TOKENS if min_shared is None else min_shared
    score = functools.partial(
        completion_logprobs,
        model,
        pad_id=pad_id,
        temperature=temperature,
        min_shared_prefix_tokens=min_shared,
    )
    for block in plan_blocks(samples, min_shared):
        yield from _scored_block(
            model, block, None, memory_budget_bytes, score, micro_batch_sequences
        )


def _scored_block(
    model,
    block: Block,
    below: SharedPrefix | None,
    budget_bytes: int | None,
    score,
    micro_batch_sequences: int,
) -> Iterator[tuple[list[Sample], torch.Tensor, torch.Tensor]]:
    """The micro-batches of ``block`` (its rows, then its children's) over the encoded prefix
    ``below``, scored by ``score(batch, prefix=...)``; its own prefix extension is encoded first
    and back-propagated last."""
    encoded = 0 if below is None else below.length
    plan = prefix_plan(model, block, budget_bytes, encoded)
    prefix, graph = below, None
    if block.prefix_len > encoded:
        ids = block.all_samples()[0].prompt_ids[: block.prefix_len]
        prefix, graph = _encode_prefix(model, ids, plan.chunk_tokens, below)
    if block.samples:
        longest = max(len(s.prompt_ids) + len(s.completion_ids) for s in block.samples)
        per_token = activation_bytes_per_token(model, longest)
        rows = micro_batch_rows(
            block.samples, block.prefix_len, micro_batch_sequences, plan.row_budget_bytes, per_token
        )
        for start in range(0, len(block.samples), rows):
            batch = block.samples[start : start + rows]
            logprobs, mask = score(batch, prefix=prefix)
            yield batch, logprobs, mask
    for child in block.children:
        yield from _scored_block(
            model, child, prefix, plan.row_budget_bytes, score, micro_batch_sequences
        )
    if graph is not None:
        _backward_prefix(model, prefix, graph)
