"""Decode step with the LoRA adapter merged vs unmerged, paired in one process (issue 28).

On-policy GRPO samples its rollouts from the model being trained, a peft LoRA model.
Unmerged, every adapted linear adds ``s B (A x)`` (two small matmuls); merged
(``training.merged_sampling``), the layer is the base matmul alone, at the cost of one
merge and one unmerge per GRPO step. This benchmark loads SmolLM2-135M fp32 with a LoRA
adapter as GRPO attaches it (r16, every linear, ``B != 0``), fills a KV cache of
``CONTEXT`` tokens for ``ROWS`` rows, and times decode steps (the policy's own
``decode.advance``) in interleaved blocks: unmerged, merged, merged, unmerged, ... so
both modes see the same context lengths and the same machine moments; medians per mode.
It also times one merge + unmerge and prints the break-even: decode steps per GRPO step
above which merging pays (``switch / (unmerged - merged)``). Sizes:
``REWARDBOX_BENCH_MERGED="rows,context,pairs,steps_per_block"`` (default ``8,1100,8,3``);
weights' dtype ``REWARDBOX_BENCH_MERGED_DTYPE`` (default ``float32``; ``bfloat16`` times the
restoring merge of ``merged_sampling``, as GRPO runs on a CPU with bf16 units).
"""

from __future__ import annotations

import os
import statistics
import time

from benchmarks.rows import row

ROWS, CONTEXT, PAIRS, STEPS = (
    int(x) for x in os.environ.get("REWARDBOX_BENCH_MERGED", "8,1100,8,3").split(",")
)
DTYPE = os.environ.get("REWARDBOX_BENCH_MERGED_DTYPE", "float32")


def _model(path):
    import torch
    from transformers import AutoModelForCausalLM

    from rewardbox.policy.attention import implementation_for
    from rewardbox.training.checkpoint import trainable
    from rewardbox.training.config import GRPOConfig

    dtype = getattr(torch, DTYPE)
    base = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation=implementation_for(torch.device("cpu"), dtype)
    )
    model = trainable(base, GRPOConfig())
    torch.manual_seed(0)
    for name, param in model.named_parameters():
        if "lora_B" in name:  # a trained adapter, so the merge changes the weights
            param.data.normal_(0, 1e-3)
    return model.eval()


def _filled_rows(model):
    """``ROWS`` rows of a ``CONTEXT``-token prompt, prefilled once at batch 1 and repeated."""
    import torch

    from rewardbox.policy.decode import prefill

    ids = torch.randint(10, model.config.vocab_size, (1, CONTEXT))
    rows, logits = prefill(
        model, ids, torch.ones_like(ids), None, CONTEXT + 2 * PAIRS * STEPS + 2, [0]
    )
    rows.cache.batch_repeat_interleave(ROWS)
    rows.slots = list(range(ROWS))
    rows.next_position = rows.next_position.repeat(ROWS, 1)
    rows.last = logits[:, -1].argmax(-1).repeat(ROWS)
    return rows


def measure(model) -> dict:
    """Median decode step seconds per mode, median merge+unmerge seconds, in one process."""
    import torch

    from rewardbox.policy.decode import advance
    from rewardbox.training.merged_sampling import SamplingWeights

    weights = SamplingWeights(model, merge=True)
    times: dict[str, list[float]] = {"merged": [], "unmerged": []}
    switch: dict[str, list[float]] = {"merged": [], "unmerged": []}  # merge / unmerge seconds
    with torch.inference_mode():
        rows = _filled_rows(model)
        for pair in range(PAIRS):
            order = ("unmerged", "merged") if pair % 2 == 0 else ("merged", "unmerged")
            for mode in order:
                before, t0 = weights.merged, time.perf_counter()
                weights.for_rollouts() if mode == "merged" else weights.for_update()
                if weights.merged != before:
                    switch[mode].append(time.perf_counter() - t0)
                for _ in range(STEPS):
                    t0 = time.perf_counter()
                    rows.last = advance(model, rows)[:, -1].argmax(-1)
                    times[mode].append(time.perf_counter() - t0)
    return {
        "merged_s": statistics.median(times["merged"]),
        "unmerged_s": statistics.median(times["unmerged"]),
        "merge_s": statistics.median(switch["merged"]),
        "unmerge_s": statistics.median(switch["unmerged"]),
        "steps_per_mode": len(times["merged"]),
    }


def run() -> list[dict]:
    import torch

    from benchmarks.peak_memory import checkpoint
    from rewardbox.threads import apply_thread_policy

    policy = apply_thread_policy("auto", getattr(torch, DTYPE))
    figures = measure(_model(checkpoint()))
    saved = figures["unmerged_s"] - figures["merged_s"]
    switch = figures["merge_s"] + figures["unmerge_s"]
    figures |= {"threads": policy.threads, "rows": ROWS, "context": CONTEXT, "dtype": DTYPE}
    figures["break_even_decode_steps"] = switch / saved if saved > 0 else None
    return [
        row(
            f"decode step, LoRA merged, {ROWS} rows, {CONTEXT}-token context, {DTYPE}",
            figures["merged_s"] * 1e3,
            "ms",
            figures["unmerged_s"] * 1e3,
            "unmerged adapter, same process, interleaved",
            goal="merged <= unmerged (ratio < 1: merged sampling is cheaper per step)",
            detail=figures,
        ),
        row(
            "merge + unmerge of the adapter (once per GRPO step)",
            switch * 1e3,
            "ms",
            None,
            detail=figures,
        ),
    ]
