"""The decode steps' thread team, one thread against two, on the demo's tasks (issue 28).

``policy.num_threads: auto`` picks the decode steps' team size at start by timing one decode layer
(``rewardbox.threads.decode_layer_workload``: seven matmuls and the attention over 1,100 cached keys)
with each candidate team. An earlier probe timed the matmuls alone and kept one thread on the
2-core machine, where a bf16 decode step of 8 rows at that context took 97 ms on one thread and
61 ms on two. This benchmark measures what the team size changes where a user waits for it: the
demo profile's tasks (its 12 training candidates and 6 benchmark tasks) x ``trials`` through one
``LocalPolicy`` (``policy.dtype: auto``, the demo's ``max_batch_size`` and ``kv_cache_mib``,
in-process MCP servers, the scripted user, the grading workers), its decode team set to 1 and to
``usable_cores()`` (at most 2) before each campaign (``LocalPolicy.decode_threads``: the worker thread
applies it at its next turn), alternated ``repeats`` times, each from a cold prefix cache. Prefill keeps
the measured wide team (``wide_team``) in both.

Rows: campaign wall seconds, decode rows per second of decode time, and how many greedy
first-turn completions are token-identical between the two teams (a team size splits the work,
and may reorder float sums). The team ``auto`` picked at the start, and its probe timings, are in
the first row's ``detail``. On a 1-core machine it returns one row saying it measured nothing.
Sizes: ``REWARDBOX_BENCH_DECODE_TEAM="trials,repeats"`` (default ``1,2``): about 4 minutes on 2 cores.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import statistics

from benchmarks.precision import (
    _greedy,
    agreement,
    alternated_campaigns,
    campaigns_detail,
    demo_policy,
    identical_row,
)
from benchmarks.rows import row

TRIALS, REPEATS = (int(x) for x in os.environ.get("REWARDBOX_BENCH_DECODE_TEAM", "1,2").split(","))


def run() -> list[dict]:
    import torch

    from rewardbox.config.profile import load_profile
    from rewardbox.tasks.sources import load_benchmark, load_candidates
    from rewardbox.threads import usable_cores

    wide = min(usable_cores(), 2)
    if wide < 2:
        return [row("decode team 1 vs 2: not measured (1 usable core)", 0.0, "", None)]
    profile = load_profile("demo")
    tasks = load_candidates(profile.tasks).tasks + load_benchmark(profile.tasks).tasks
    policy = demo_policy(profile)
    teams = {"1 thread": 1, f"{wide} threads": wide}
    chosen = dataclasses.asdict(policy.thread_policy)

    def team(key: str) -> None:
        # the worker thread's decode team (applied at its next turn); this thread's for _greedy
        policy.decode_threads = teams[key]
        torch.set_num_threads(teams[key])

    try:
        runs = alternated_campaigns(
            {key: policy for key in teams}, profile, tasks, TRIALS, REPEATS, before_each=team
        )
        first_turns = runs["1 thread"][0]["first_turns"]
        greedy = {}
        for key in teams:
            team(key)
            greedy[key] = _greedy(policy, first_turns)
    finally:
        policy.decode_threads = policy.thread_policy.threads
        torch.set_num_threads(policy.thread_policy.threads)
        asyncio.run(policy.aclose())
    return _rows(runs, greedy, len(tasks), chosen, str(policy.dtype).replace("torch.", ""))


def _rows(runs: dict, greedy: dict, tasks: int, chosen: dict, dtype: str) -> list[dict]:
    one, many = runs.values()
    many_key = list(runs)[1]

    def median(rs, key):
        return statistics.median(r[key] for r in rs)

    wall = statistics.median(a["wall_s"] / b["wall_s"] for a, b in zip(many, one))
    agree = agreement(*greedy.values())
    detail = campaigns_detail(runs)
    detail |= {"greedy": agree, "tasks": tasks, "trials": TRIALS, "auto_chose": chosen}
    label = "decode team of 1, alternated in this process"
    return [
        row(
            f"decode team {many_key} vs 1 ({dtype}): demo tasks campaign wall "
            f"({many_key}/1 median {wall:.2f}; auto chose {chosen['threads']})",
            median(many, "wall_s"),
            "s",
            median(one, "wall_s"),
            label,
            detail=detail,
        ),
        row(
            f"decode team {many_key} vs 1: decode rows per second of decode time",
            median(many, "decode_rows_per_s"),
            "rows/s",
            median(one, "decode_rows_per_s"),
            label,
        ),
        identical_row(f"decode team {many_key} vs 1", agree),
    ]
