"""Shared-prefix attention against a copy of the prefix in every row, on the demo's tasks (issue 28).

A decode batch's rows mostly start with one domain prefix (about 1,000 of 1,100 tokens). With a copy
of it in every row's KV cache, each decode step read it once per row; the attention kernel's time
grows with the keys it reads, and it was most of a bf16 decode step (docs/performance.md,
"Shared-prefix attention"). ``LocalPolicy`` keeps the prefix once per batch by default
(``shared_prefix``; ``rewardbox/policy/attention.py``). This benchmark measures what that changes
where a user waits for it: the demo profile's tasks (its 12 training candidates and 6 benchmark
tasks) x ``trials`` through two ``LocalPolicy`` objects in this process (``policy.dtype: auto``, the
demo's ``max_batch_size``, ``kv_cache_mib`` and ``episode.concurrency``, in-process MCP servers, the
scripted user, the grading workers), one with ``shared_prefix=False``, alternated ``repeats`` times,
each from a cold prefix cache:

- campaign wall seconds, decode rows and prefill columns per second of model time;
- every first-turn prompt of the first campaign decoded greedily by both: how many completions are
  token-identical (the merge of the two attention parts rounds differently from one softmax, so a
  near-tie may flip; ``benchmarks.precision.agreement`` reports how far they agree).

Sizes: ``REWARDBOX_BENCH_SHARED_PREFIX="trials,repeats"`` (default ``1,2``): about 5 minutes on 2 cores.
"""

from __future__ import annotations

import asyncio
import os

from benchmarks.precision import _greedy, alternated_campaigns, demo_policy, setting_rows

TRIALS, REPEATS = (
    int(x) for x in os.environ.get("REWARDBOX_BENCH_SHARED_PREFIX", "1,2").split(",")
)
WAYS = {"shared prefix": True, "a copy per row": False}


def run() -> list[dict]:
    from rewardbox.config.profile import load_profile
    from rewardbox.tasks.sources import load_benchmark, load_candidates

    profile = load_profile("demo")
    tasks = load_candidates(profile.tasks).tasks + load_benchmark(profile.tasks).tasks
    policies = {way: demo_policy(profile, shared_prefix=on) for way, on in WAYS.items()}
    try:
        runs = alternated_campaigns(policies, profile, tasks, TRIALS, REPEATS)
        first_turns = runs["shared prefix"][0]["first_turns"]
        greedy = {way: _greedy(policy, first_turns) for way, policy in policies.items()}
        dtype = str(policies["shared prefix"].dtype).replace("torch.", "")
    finally:
        for policy in policies.values():
            asyncio.run(policy.aclose())
    return setting_rows(
        runs,
        greedy,
        len(tasks),
        TRIALS,
        f"shared prefix vs a copy per row ({dtype})",
        "a copy of the prefix per row, alternated in this process",
    )
