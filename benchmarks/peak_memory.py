"""Peak resident memory of the demo's model stages, each in a fresh process (issue 28: <= 4 GiB).

``make demo`` runs every Dagster step in its own process; the two that hold the model are
a campaign (probe, evaluation: ``LocalPolicy`` decoding for 16 concurrent episodes) and
GRPO (the same sampling, then the update). Each stage here runs demo-shaped work in a fresh
process and reports that process's ``ru_maxrss`` (``rewardbox.process_memory``) and wall time:

* ``sampling``: SmolLM2-135M fp32, ``max_batch_size`` 16, 16 requests arriving 50 ms apart,
  ~1,200-token prompts sharing all but their last ~30 tokens, 64 new tokens at temperature 0.7;
  ``detail`` has the model's bytes, the prefix cache's and the largest running KV cache's.
* ``grpo update``: one ``optimise_step`` on 2 groups x 4 samples of 1,100 prompt + 64 completion
  tokens (LoRA r16, ``micro_batch_sequences`` 2, the default ``micro_batch_memory_mib``).
* ``grpo step``: what a GRPO stage's process does, in one process: the policy's model with a LoRA
  adapter, merged for the rollouts (``training.merged_sampling``), the ``sampling`` stage's
  requests, then the update on their completions (unmerged; half the rows advantage +1, half -1).

The goal is 4 GiB in any process (``ok`` False above it). Sizes:
``REWARDBOX_BENCH_MEMORY="requests,new_tokens"`` (default ``16,64``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.rows import row
from rewardbox import strict_json

GOAL_MIB = 4096
REQUESTS, NEW_TOKENS = (
    int(x) for x in os.environ.get("REWARDBOX_BENCH_MEMORY", "16,64").split(",")
)
STAGES = ("sampling", "grpo update", "grpo step")


def checkpoint() -> Path:
    """The converted SmolLM2-135M checkpoint (``benchmarks.floor`` makes the same one)."""
    from rewardbox.policy.checkpoint import convert_gguf_to_safetensors

    return convert_gguf_to_safetensors(Path(tempfile.gettempdir()) / "rewardbox-bench-base")


def _sampling(path: Path, lora: bool = False) -> dict:
    import asyncio
    import threading
    import time

    from rewardbox.policy.base import ChatRequest
    from rewardbox.policy.local import LocalPolicy
    from rewardbox.policy.prefix_cache import cache_nbytes

    policy = LocalPolicy(path, max_batch_size=16, seed=0, guided_tool_calls=False)
    weights = _lora_for_rollouts(policy) if lora else None
    model_bytes = sum(p.numel() * p.element_size() for p in policy.model.parameters())
    system = " ".join(
        f"Rule {i}: check order {i} against the ledger before any refund." for i in range(70)
    )
    largest_kv, done = [0], threading.Event()

    def watch() -> None:  # the running batch's KV cache, sampled every 20 ms
        while not done.wait(0.02):
            rows = getattr(policy._batch, "rows", None)
            if rows is not None:
                largest_kv[0] = max(largest_kv[0], cache_nbytes([rows.cache]))

    async def one(i: int):
        await asyncio.sleep(i * 0.05)
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Customer {i} wants a refund for order {i * 7}."},
        ]
        return await policy.complete(
            ChatRequest(messages=messages, tools=[], max_new_tokens=NEW_TOKENS, temperature=0.7)
        )

    async def go():
        try:
            return await asyncio.gather(*(one(i) for i in range(REQUESTS)))
        finally:
            await policy.aclose()

    threading.Thread(target=watch, daemon=True).start()
    t0 = time.perf_counter()
    out = asyncio.run(go())
    done.set()
    update = {} if weights is None else _update_on(policy, weights, out)
    return update | {
        "wall_s": time.perf_counter() - t0,
        "prompt_tokens": out[0].input_tokens,
        "cached_tokens": out[0].cached_input_tokens,
        "new_tokens": sum(c.output_tokens for c in out),
        "model_mib": model_bytes / 2**20,
        "prefix_cache_mib": policy.prefix_cache.nbytes() / 2**20,
        "largest_running_kv_mib": largest_kv[0] / 2**20,
    }


def _lora_for_rollouts(policy):
    from rewardbox.training.checkpoint import trainable
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.merged_sampling import SamplingWeights

    policy.model = trainable(policy.model, GRPOConfig())
    weights = SamplingWeights(policy.model, policy, merge=True)
    weights.for_rollouts()
    return weights


def _update_on(policy, weights, completions) -> dict:
    """One ``optimise_step`` on ``completions`` (unmerged first), as GRPO's step does after rollouts."""
    import time

    import torch

    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.logprobs import Sample
    from rewardbox.training.trainer import optimise_step

    weights.for_update()
    samples = [
        Sample(c.prompt_token_ids, c.completion_token_ids, (-1.0) ** i, c.completion_logprobs)
        for i, c in enumerate(completions)
    ]
    config = GRPOConfig(micro_batch_sequences=2, temperature=0.7)
    params = [p for p in policy.model.parameters() if p.requires_grad]
    t0 = time.perf_counter()
    stats = optimise_step(policy.model, torch.optim.AdamW(params, lr=1e-6), samples, config, 0)
    return {"update_s": time.perf_counter() - t0, "logprob_gap_max": stats.logprob_gap_max}


def _grpo_update(path: Path) -> dict:
    import time

    import torch
    from transformers import AutoModelForCausalLM

    from benchmarks.floor_model import group_samples_like_grpo
    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.trainer import optimise_step

    model = AutoModelForCausalLM.from_pretrained(path)
    samples = group_samples_like_grpo(2, 4, 1100, 64, model.config.vocab_size)
    config = GRPOConfig(micro_batch_sequences=2)
    lora = attach_lora(model, config)
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-5)
    t0 = time.perf_counter()
    optimise_step(lora, optimizer, samples, config, pad_id=0)
    return {
        "wall_s": time.perf_counter() - t0,
        "samples": len(samples),
        "micro_batch_memory_mib": config.micro_batch_memory_mib,
    }


def child(stage: str, path: str) -> None:
    """Run one stage in this (fresh) process; print its figures and peak RSS as JSON on the last line."""
    import rewardbox  # noqa: F401  (the thread policy's environment before torch loads)
    from rewardbox.process_memory import peak_rss_mib

    if stage == "grpo update":
        figures = _grpo_update(Path(path))
    else:
        figures = _sampling(Path(path), lora=stage == "grpo step")
    print(strict_json.dumps({**figures, "peak_rss_mib": peak_rss_mib()}))


def run() -> list[dict]:
    path = checkpoint()
    rows = []
    for stage in STAGES:
        code = f"from benchmarks.peak_memory import child; child({stage!r}, {str(path)!r})"
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        figures = strict_json.loads(done.stdout.strip().splitlines()[-1])
        peak = figures["peak_rss_mib"]
        rows.append(
            row(
                f"peak resident memory, {stage} (demo shape, own process)",
                peak / 1024,
                "GiB",
                GOAL_MIB / 1024,
                "goal",
                ok=peak <= GOAL_MIB,
                goal=f"<= 4 GiB in any process: {peak / 1024:.2f} GiB",
                detail=figures,
            )
        )
    return rows
