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
import statistics

from benchmarks.precision import _greedy, agreement, alternated_campaigns, campaigns_detail
from benchmarks.rows import row

TRIALS, REPEATS = (int(x) for x in os.environ.get("REWARDBOX_BENCH_PACKED", "1,2").split(","))
WAYS = ("packed", "plain")


def run() -> list[dict]:
    import torch

    from benchmarks.peak_memory import checkpoint
    from rewardbox.config.profile import load_profile
    from rewardbox.policy import packed_linear
    from rewardbox.policy.local import LocalPolicy
    from rewardbox.tasks.sources import load_benchmark, load_candidates

    if not packed_linear.available(torch.bfloat16, "cpu"):
        return [
            row("packed bf16 weights: not measured (no bf16 packing on this CPU)", 0.0, "", None)
        ]
    profile = load_profile("demo")
    tasks = load_candidates(profile.tasks).tasks + load_benchmark(profile.tasks).tasks
    policies = {
        way: LocalPolicy(
            checkpoint(),
            max_batch_size=profile.policy.max_batch_size,
            seed=profile.policy.seed,
            kv_cache_mib=profile.policy.kv_cache_mib,
            dtype="bfloat16",
            pack_weights=way == "packed",
        )
        for way in WAYS
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
    packed, plain = runs["packed"], runs["plain"]

    def median(rs, key):
        return statistics.median(r[key] for r in rs)

    wall = statistics.median(a["wall_s"] / b["wall_s"] for a, b in zip(packed, plain))
    agree = agreement(greedy["packed"], greedy["plain"])
    detail = campaigns_detail(runs)
    detail |= {"greedy": agree, "tasks": tasks, "trials": TRIALS}
    label = "plain F.linear, alternated in this process"
    return [
        row(
            f"packed vs plain bf16: demo tasks campaign wall (packed/plain median {wall:.2f})",
            median(packed, "wall_s"),
            "s",
            median(plain, "wall_s"),
            label,
            detail=detail,
        ),
        row(
            "packed vs plain bf16: decode rows per second of decode time",
            median(packed, "decode_rows_per_s"),
            "rows/s",
            median(plain, "decode_rows_per_s"),
            label,
        ),
        row(
            "packed vs plain bf16: prefill columns per second of prefill time",
            median(packed, "prefill_columns_per_s"),
            "columns/s",
            median(plain, "prefill_columns_per_s"),
            label,
        ),
        row(
            f"packed vs plain bf16: greedy first turns token-identical ({agree['identical']} of {agree['n']})",
            agree["identical"] / max(agree["n"], 1),
            "",
            None,
            detail={"prefix_fraction": agree["prefix_fraction"]},
        ),
    ]
