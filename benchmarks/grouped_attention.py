"""Grouped query blocks against repeated key/value heads, paired in one process (issue 28).

A masked attention call of several query positions (a suffix prefilled over its cached prefix, a
row the GRPO update scores on top of an encoded prefix) used to repeat each key/value head for its
query heads (transformers' ``repeat_kv``); it now stacks each key/value head's query heads as one
query block against the unrepeated keys (``rewardbox.policy.attention.grouped_query_attention``,
docs/performance.md "Grouped query blocks"). Rows, each the median of ``REPEATS`` alternated runs:

* the attention call alone, forward and backward, at the shapes of `make demo`'s GRPO step (rows of
  49-170 positions over a 1,146-token prefix and their own columns) and forward alone at a decode
  batch's suffix prefill (8 rows x 100 over 1,000), in the local policy's dtype;
* the whole update (``optimise_step``, the wide team) on a multi-turn step shaped like the demo's
  (``benchmarks.floor_model.group_samples_like_grpo`` with ``MULTI_TURN`` turns), the grouped path
  switched off for the anchor.

Sizes: ``REWARDBOX_BENCH_GROUPED="groups,group_size,prompt,completion,repeats"`` (default
``2,4,1100,40,3``); ``REWARDBOX_BENCH_GROUPED_SHAPES`` = ``"B:L:P,..."`` for the kernel rows.
"""

from __future__ import annotations

import functools
import os
import statistics
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import torch

from benchmarks.generation import paired_ratio
from benchmarks.rows import alternated, row

GROUPS, GROUP_SIZE, PROMPT, COMPLETION, REPEATS = (
    int(x) for x in os.environ.get("REWARDBOX_BENCH_GROUPED", "2,4,1100,40,3").split(",")
)
SHAPES = tuple(
    tuple(int(v) for v in shape.split(":"))
    for shape in os.environ.get(
        "REWARDBOX_BENCH_GROUPED_SHAPES", "1:132:1146,2:49:1146,1:170:1278"
    ).split(",")
)
"""``(rows, positions, prefix columns)`` of the forward-and-backward kernel rows."""
PREFILL_SHAPE = (8, 100, 1000)
KERNEL_PAIRS = 9
"""Alternated pairs per kernel row (a call takes tens of milliseconds)."""


def repeated_heads():
    """The anchor: every call as before, SDPA over repeated key/value heads (a context manager)."""
    from rewardbox.policy import attention

    return mock.patch.object(attention, "_groups_queries", lambda *args: False)


def _inputs(shape, heads: int, kv_heads: int, dim: int, dtype: torch.dtype):
    batch, length, prefix = shape
    columns = prefix + length
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(batch, heads, length, dim, generator=gen).to(dtype)
    keys = torch.randn(batch, kv_heads, columns, dim, generator=gen).to(dtype)
    values = torch.randn(batch, kv_heads, columns, dim, generator=gen).to(dtype)
    mask = torch.ones(batch, 1, length, columns, dtype=torch.bool)
    mask[:, :, :, prefix:] = torch.ones(length, length, dtype=torch.bool).tril()
    return query, keys, values, mask


def attention_call_seconds(module, shape, config, dtype, backward: bool) -> float:
    """One masked call of the policy's attention (``attention_forward``), seconds, with its backward
    when ``backward`` (a random upstream gradient), on random inputs of ``shape``."""
    from rewardbox.policy.attention import attention_forward

    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    dim = config.hidden_size // heads
    query, keys, values, mask = _inputs(shape, heads, kv_heads, dim, dtype)
    upstream = torch.randn(shape[0], shape[1], heads, dim).to(dtype)
    leaves = [t.requires_grad_(backward) for t in (query, keys, values)]
    t0 = time.perf_counter()
    with torch.set_grad_enabled(backward):
        out, _ = attention_forward(module, *leaves, mask, scaling=dim**-0.5)
        if backward:
            out.backward(upstream)
    return time.perf_counter() - t0


def paired(measure, repeats: int = REPEATS) -> dict[str, list[float]]:
    """``measure()`` seconds, grouped and with repeated heads, alternated ``repeats`` times each."""

    def within(scope) -> float:
        with scope():
            return measure()

    scopes = {"grouped": nullcontext, "repeated": repeated_heads}
    return alternated(
        {way: functools.partial(within, scope) for way, scope in scopes.items()}, repeats
    )


def _paired_row(name: str, runs: dict[str, list[float]], unit_scale: float, unit: str) -> dict:
    ratios = [a / b for a, b in zip(runs["grouped"], runs["repeated"])]
    median = paired_ratio(runs["grouped"], runs["repeated"])
    return row(
        f"{name} (paired ratios {', '.join(f'{r:.2f}' for r in ratios)}; median {median:.2f})",
        statistics.median(runs["grouped"]) * unit_scale,
        unit,
        statistics.median(runs["repeated"]) * unit_scale,
        "repeated key/value heads (SDPA over repeat_kv), alternated in this run",
        detail={"runs_s": runs, "ratios": ratios, "paired_ratio": median},
    )


def _policy_model():
    """SmolLM2-135M as the local policy loads it: ``policy.dtype: auto``'s dtype, its attention."""
    from transformers import AutoModelForCausalLM

    from rewardbox.policy.attention import implementation_for
    from rewardbox.policy.checkpoint import convert_gguf_to_safetensors
    from rewardbox.policy.precision import resolve_dtype
    from rewardbox.threads import apply_thread_policy

    dtype = resolve_dtype("auto")
    apply_thread_policy("auto", dtype)
    checkpoint = convert_gguf_to_safetensors(Path(tempfile.gettempdir()) / "rewardbox-bench-base")
    return AutoModelForCausalLM.from_pretrained(
        checkpoint, dtype=dtype, attn_implementation=implementation_for(torch.device("cpu"), dtype)
    )


def _kernel_rows(model, label: str) -> list[dict]:
    """The attention call alone: forward and backward at ``SHAPES``, forward at ``PREFILL_SHAPE``."""
    from rewardbox.threads import wide_team

    config, module = model.config, model.model.layers[0].self_attn
    dtype = next(model.parameters()).dtype
    cases = [(shape, True, "forward+backward, {} x {} positions over {} + own") for shape in SHAPES]
    cases.append((PREFILL_SHAPE, False, "forward, suffix prefill {} x {} over {}"))
    rows = []
    with wide_team():
        for shape, backward, name in cases:

            def measure(shape=shape, backward=backward) -> float:
                return attention_call_seconds(module, shape, config, dtype, backward)

            runs = paired(measure, KERNEL_PAIRS)
            rows.append(_paired_row(f"attention {name.format(*shape)}, {label}", runs, 1e3, "ms"))
    return rows


def _update_row(model, label: str) -> dict:
    """``optimise_step`` on a multi-turn step, seconds per scored sample, paired."""
    from benchmarks.floor_model import MULTI_TURN, group_samples_like_grpo
    from rewardbox.threads import wide_team
    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.trainer import optimise_step

    grpo = GRPOConfig(micro_batch_sequences=2, micro_batch_memory_mib=3072)
    lora = attach_lora(model, grpo)
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=0.0)
    samples = group_samples_like_grpo(
        GROUPS, GROUP_SIZE, PROMPT, COMPLETION, model.config.vocab_size, MULTI_TURN
    )

    def update() -> float:
        t0 = time.perf_counter()
        with wide_team():
            optimise_step(lora, optimizer, samples, grpo, pad_id=0)
        return (time.perf_counter() - t0) / len(samples)

    name = (
        f"GRPO update s per scored sample, {GROUPS} x {GROUP_SIZE} x {MULTI_TURN} turns, "
        f"{PROMPT}+{COMPLETION}, {label}"
    )
    return _paired_row(name, paired(update), 1.0, "s")


def run() -> list[dict]:
    model = _policy_model()
    label = str(next(model.parameters()).dtype).replace("torch.", "")
    return [*_kernel_rows(model, label), _update_row(model, label)]
