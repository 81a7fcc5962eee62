"""Packed bf16 linear weights against plain ``F.linear`` on the demo's tasks (issue 28).

``LocalPolicy`` packs a bf16 model's linear weights once for oneDNN where the CPU has bf16 units
(``rewardbox/policy/packed_linear.py``, ``policy.pack_weights: true``). This benchmark measures
what that changes where a user waits for it, on the demo profile's tasks (its 12 training
candidates and 6 benchmark tasks) x ``trials``, with the real SmolLM2-135M weights, the demo's
``max_batch_size``, ``kv_cache_mib`` and ``episode.concurrency``, in-process MCP servers, the
scripted user and the grading workers:

- **Speed.** The same campaign with two bf16 ``LocalPolicy`` objects in this process, one packing
  and one not, alternated ``repeats`` times (packed first, then plain first, ...), each from a cold
  prefix cache: wall seconds, decode rows and prefill columns per second of model time (forward
  hooks, ``benchmarks.episode_kv.counted_campaign``).
- **Same tokens.** Every first-turn prompt of the first campaign decoded greedily by both policies
  (``benchmarks.precision.agreement``): how many completions are token-identical. Packing reorders
  the weights, not the arithmetic, so they should all be.

Without bf16 units (nothing is packed there) it returns one row saying it measured nothing. Sizes:
``REWARDBOX_BENCH_PACKED="trials,repeats"`` (default ``1,2``): about 6 minutes on 2 cores.
"""

from __future__ import annotations

import asyncio
import os

from benchmarks.precision import _greedy, alternated_campaigns, demo_policy, setting_rows
from benchmarks.rows import row

TRIALS, REPEATS = (int(x) for x in os.environ.get("REWARDBOX_BENCH_PACKED", "1,2").split(","))
WAYS = ("packed", "plain")


def run() -> list[dict]:
    import torch

    from rewardbox.config.profile import load_profile
    from rewardbox.policy import packed_linear
    from rewardbox.tasks.sources import load_benchmark, load_candidates

    if not packed_linear.available(torch.bfloat16, "cpu"):
        return [
            row("packed bf16 weights: not measured (no bf16 packing on this CPU)", 0.0, "", None)
        ]
    profile = load_profile("demo")
    tasks = load_candidates(profile.tasks).tasks + load_benchmark(profile.tasks).tasks
    policies = {
        way: demo_policy(profile, dtype="bfloat16", pack_weights=way == "packed") for way in WAYS
    }
    try:
        runs = alternated_campaigns(policies, profile, tasks, TRIALS, REPEATS)
        first_turns = runs["packed"][0]["first_turns"]
        greedy = {way: _greedy(policies[way], first_turns) for way in WAYS}
    finally:
        for policy in policies.values():
            asyncio.run(policy.aclose())
    return _rows(runs, greedy, len(tasks))


def _rows(
    runs: dict[str, list[dict]], greedy: dict[str, list[list[int]]], tasks: int
) -> list[dict]:
    return setting_rows(
        runs,
        greedy,
        tasks,
        TRIALS,
        "packed vs plain bf16",
        "plain F.linear, alternated in this process",
    )
