"""What the update's memory budget costs in time: paired, interleaved, one process (issue 28).

``grpo.micro_batch_memory_mib`` (default 1024) keeps what a GRPO update holds for backward
within the budget: a shared prefix too large for it runs without a graph and is recomputed
in chunks at the block's end (one more forward of the prefix), and micro-batches hold fewer
rows (``training.shared_prefix``). This benchmark runs ``optimise_step`` on the same samples
(SmolLM2-135M fp32, LoRA r16, ``micro_batch_sequences`` 2) alternately with the default
budget and with none (the prefix's graph kept, 2 rows per micro-batch), ``REPEATS`` times
each, and prints the budgeted step's median seconds against the unbudgeted one. Sizes:
``REWARDBOX_BENCH_UPDATE="groups,group_size,prompt,completion,repeats"`` (default ``1,4,1100,64,2``).
"""

from __future__ import annotations

import os
import statistics
import time

from benchmarks.rows import row

GROUPS, GROUP_SIZE, PROMPT, COMPLETION, REPEATS = (
    int(x) for x in os.environ.get("REWARDBOX_BENCH_UPDATE", "1,4,1100,64,2").split(",")
)


def measure(model, samples) -> dict:
    """Median seconds of ``optimise_step`` with the default budget and without one, interleaved."""
    import torch

    from rewardbox.training.checkpoint import attach_lora
    from rewardbox.training.config import GRPOConfig
    from rewardbox.training.trainer import optimise_step

    configs = {
        "budget": GRPOConfig(micro_batch_sequences=2),
        "none": GRPOConfig(micro_batch_sequences=2, micro_batch_memory_mib=None),
    }
    lora = attach_lora(model, configs["budget"])
    optimizer = torch.optim.AdamW([p for p in lora.parameters() if p.requires_grad], lr=1e-6)
    times: dict[str, list[float]] = {name: [] for name in configs}
    for repeat in range(REPEATS):
        for name in ("budget", "none") if repeat % 2 == 0 else ("none", "budget"):
            t0 = time.perf_counter()
            optimise_step(lora, optimizer, samples, configs[name], pad_id=0)
            times[name].append(time.perf_counter() - t0)
    lora.unload()
    return {
        "budget_s": statistics.median(times["budget"]),
        "none_s": statistics.median(times["none"]),
        "budget_mib": configs["budget"].micro_batch_memory_mib,
        "runs": times,
    }


def run() -> list[dict]:
    from transformers import AutoModelForCausalLM

    from benchmarks.floor_model import group_samples_like_grpo
    from benchmarks.peak_memory import checkpoint
    from rewardbox.threads import apply_thread_policy

    threads = apply_thread_policy("auto").threads
    model = AutoModelForCausalLM.from_pretrained(checkpoint())
    samples = group_samples_like_grpo(
        GROUPS, GROUP_SIZE, PROMPT, COMPLETION, model.config.vocab_size
    )
    figures = measure(model, samples) | {"threads": threads, "samples": len(samples)}
    return [
        row(
            f"GRPO update, {len(samples)} samples of {PROMPT}+{COMPLETION}, memory budget "
            f"{figures['budget_mib']} MiB",
            figures["budget_s"],
            "s",
            figures["none_s"],
            "no budget (prefix graph kept, 2 rows per micro-batch), interleaved",
            detail=figures,
        )
    ]
