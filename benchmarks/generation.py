"""Batched generation throughput of the embedded model on CPU (issues #2 and #13).

Two prompt sets of 8, each sent as 8 concurrent ``LocalPolicy.complete`` calls
(the product) and, on the same prompts, as ONE plain left-padded
``model.generate`` call (the anchor), interleaved ``repeats`` times (the
retail set, whose plain prefill is slow, ``retail_repeats`` times):

- ``short``: 8 distinct one-line prompts, no tools (no shared prefix to cache):
  the product must batch them anyway;
- ``retail``: 8 retail tasks as an episode's first turn (system prompt, tool
  list, user query): about 1,000 tokens each with a long shared prefix.

Both sides decode greedily with the same token budget and stop tokens, and
guided tool calls are off, so they do the same work (the detail says how many
rows came out token for token identical). Throughput = generated tokens (up
to and including the stop token) / wall seconds. Each repeat runs the product
and then plain ``generate`` back to back, so the pair shares the machine's load
of that moment; the verdict is the median of the per-pair ratios
(``paired_ratio``). The row FAILS (``make bench`` exits 1) when that median is
below 1.0: the product must never be slower than plain ``generate``.
Anchors from the issues: 68-70 tokens/s for a real batch of 8 (SmolLM2-135M,
float32, 2 cores), 13 tokens/s at batch 1.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.rows import row

REAL_BATCH_TOKENS_PER_S = 70.0
MIN_RATIO = 1.0  # the product fails below this x plain generate (median of paired runs)
SHORT = [f"Write a short note number {i} about tea." for i in range(8)]


def _short_requests(new_tokens: int) -> list:
    from rewardbox.policy.base import ChatRequest

    return [
        ChatRequest(
            messages=[{"role": "user", "content": text}],
            tools=[],
            max_new_tokens=new_tokens,
            temperature=0.0,
        )
        for text in SHORT
    ]


def _retail_requests(new_tokens: int) -> list:
    """The first turn of 8 retail tasks, as the episode runner builds it."""
    from rewardbox.domains.registry import dataset_dir
    from rewardbox.policy.base import ChatRequest
    from rewardbox.sandbox.inprocess import InProcessSandbox
    from rewardbox.tasks.thinkingbox import load_dataset

    tasks = load_dataset(dataset_dir("retail")).tasks[:8]

    async def tools(task):
        sandbox = InProcessSandbox()
        try:
            await sandbox.start(task.world_state, task.available_tools)
            return await sandbox.list_tools()
        finally:
            await sandbox.close()

    requests = []
    for task in tasks:
        messages = [{"role": "system", "content": task.system_instructions}]
        if task.bot_instructions:
            messages.append({"role": "system", "content": task.bot_instructions})
        messages.append({"role": "user", "content": task.query})
        requests.append(
            ChatRequest(
                messages=messages,
                tools=asyncio.run(tools(task)),
                max_new_tokens=new_tokens,
                temperature=0.0,
            )
        )
    return requests


def _product(policy, requests) -> tuple[float, list[list[int]], list[int]]:
    async def go():
        return await asyncio.gather(*(policy.complete(r) for r in requests))

    t0 = time.perf_counter()
    completions = asyncio.run(go())
    seconds = time.perf_counter() - t0
    rows = [list(c.completion_token_ids) for c in completions]
    return sum(map(len, rows)) / seconds, rows, [c.extra.get("batch_size") for c in completions]


def _plain(policy, requests, new_tokens: int) -> tuple[float, list[list[int]]]:
    """One left-padded greedy ``model.generate`` on the same prompts (tokenising included)."""
    from rewardbox.policy.chat_template import render_prompt

    t0 = time.perf_counter()
    texts = [render_prompt(r.messages, r.tools) for r in requests]
    enc = policy.tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt")
    with policy.generation_lock, torch.inference_mode():
        out = policy.model.generate(
            **enc,
            max_new_tokens=new_tokens,
            do_sample=False,
            eos_token_id=policy.stop_token_ids,
            pad_token_id=policy.pad_token_id,
        )
    seconds = time.perf_counter() - t0
    stops = set(policy.stop_token_ids)
    rows = []
    for generated in out[:, enc["input_ids"].shape[1] :].tolist():
        end = next((i + 1 for i, t in enumerate(generated) if t in stops), len(generated))
        rows.append(generated[:end])
    return sum(map(len, rows)) / seconds, rows


def _compare(policy, name: str, requests, new_tokens: int, repeats: int) -> dict:
    product, plain, same = [], [], 0
    for _ in range(repeats):
        rate, product_rows, batch_sizes = _product(policy, requests)
        product.append(rate)
        rate, plain_rows = _plain(policy, requests, new_tokens)
        plain.append(rate)
        same = sum(a == b for a, b in zip(product_rows, plain_rows))
    result = {
        "product_tokens_per_s": statistics.median(product),
        "plain_tokens_per_s": statistics.median(plain),
        "paired_ratio": paired_ratio(product, plain),
        "product_runs": product,
        "plain_runs": plain,
        "identical_rows": same,
        "rows": len(requests),
        "new_tokens": new_tokens,
        "batch_sizes": batch_sizes,
    }
    print(
        f"  {name}: product {result['product_tokens_per_s']:.1f} tokens/s, plain generate "
        f"{result['plain_tokens_per_s']:.1f} tokens/s (medians of {repeats}), paired ratio "
        f"x{result['paired_ratio']:.3f}; identical rows {same}/{len(requests)}; batch size per request {batch_sizes}"
    )
    return result


def paired_ratio(product: list[float], plain: list[float]) -> float:
    """Median of ``product[i] / plain[i]`` over the repeats (each pair measured back to back).

    Raises:
        ValueError: no runs, or the lists differ in length.
    """
    if not product or len(product) != len(plain):
        raise ValueError(f"need equal, non-empty run lists, got {len(product)} and {len(plain)}")
    return statistics.median(a / b for a, b in zip(product, plain))


def verdict(measured: dict) -> tuple[bool, str]:
    """Whether a prompt set meets the goal (paired ratio >= ``MIN_RATIO``), and the goal in words."""
    ratio = measured["paired_ratio"]
    return ratio >= MIN_RATIO, f"never below plain generate: x{ratio:.3f} (median of paired runs)"


def run(
    repeats: int = 5, retail_repeats: int = 2, new_tokens: int = 24, checkpoint: str | None = None
) -> list[dict]:
    """Product vs plain ``generate`` throughput on 8 short and 8 retail prompts (rows; see ``benchmarks.__main__``)."""
    from rewardbox.policy.checkpoint import convert_gguf_to_safetensors
    from rewardbox.policy.local import LocalPolicy

    ckpt = (
        Path(checkpoint)
        if checkpoint
        else convert_gguf_to_safetensors(Path(tempfile.gettempdir()) / "rewardbox-bench-base")
    )
    policy = LocalPolicy(ckpt, max_batch_size=8, seed=0, guided_tool_calls=False)
    policy.tokenizer.pad_token_id = policy.pad_token_id
    try:
        _product(
            policy, _short_requests(2)
        )  # warm-up, untimed: first-call allocations and lazy set-up
        _plain(policy, _short_requests(2), 2)
        measured = {
            name: _compare(policy, name, make(new_tokens), new_tokens, n)
            for name, make, n in (
                ("short", _short_requests, repeats),
                ("retail", _retail_requests, retail_repeats),
            )
        }
    finally:
        asyncio.run(policy.aclose())
    rows = []
    for name, label in (
        ("short", "8 short prompts, no shared prefix"),
        ("retail", "8 retail first turns"),
    ):
        m = measured[name]
        ok, goal = verdict(m)
        rows.append(
            row(
                f"local generation, batch of {label}",
                m["product_tokens_per_s"],
                "tokens/s",
                m["plain_tokens_per_s"],
                "plain generate, same prompts, this run",
                ok=ok,
                goal=goal,
                detail=m,
            )
        )
    short = measured["short"]["product_tokens_per_s"]
    rows.append(
        row(
            "local generation, batch of 8 short prompts vs issue anchor",
            short,
            "tokens/s",
            REAL_BATCH_TOKENS_PER_S,
            "a real batch of 8 (issue #13)",
        )
    )
    return rows
