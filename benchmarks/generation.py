"""Batched generation throughput of the embedded model on CPU (issue #2).

Baseline: measured when the issue was filed, about 13 tokens/s at batch 1 and
68 tokens/s at batch 8 for SmolLM2-135M-Instruct in float32 on 2 cores.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

BASELINE_TOKENS_PER_S = {1: 13.0, 8: 68.0}


def _throughput(policy, batch: int, new_tokens: int) -> float:
    from rewardbox.policy.base import ChatRequest

    requests = [ChatRequest(messages=[{"role": "user", "content": f"Write a short note number {i} about tea."}],
                            tools=[], max_new_tokens=new_tokens, temperature=1.0, seed=i) for i in range(batch)]

    async def go():
        return await asyncio.gather(*(policy.complete(r) for r in requests))

    t0 = time.perf_counter()
    completions = asyncio.run(go())
    seconds = time.perf_counter() - t0
    return sum(c.output_tokens for c in completions) / seconds


def run(repeats: int = 3, new_tokens: int = 64, checkpoint: str | None = None) -> dict:
    from rewardbox.policy.checkpoint import convert_gguf_to_safetensors
    from rewardbox.policy.local import LocalPolicy

    ckpt = Path(checkpoint) if checkpoint else convert_gguf_to_safetensors(Path(tempfile.gettempdir()) / "rewardbox-bench-base")
    policy = LocalPolicy(ckpt, max_batch_size=8, seed=0)
    out = {}
    for batch in (1, 8):
        rates = [_throughput(policy, batch, new_tokens) for _ in range(repeats)]
        median = statistics.median(rates)
        out[f"batch_{batch}"] = {"tokens_per_s": median, "ratio_vs_baseline": median / BASELINE_TOKENS_PER_S[batch]}
        print(f"generation batch {batch}: median {median:.1f} tokens/s over {repeats} runs; "
              f"ratio vs baseline ({BASELINE_TOKENS_PER_S[batch]:.0f} tokens/s): {median / BASELINE_TOKENS_PER_S[batch]:.2f}")
    asyncio.run(policy.aclose())
    return out
