"""Campaign bookkeeping: the scripted golden policy on the in-process sandbox, 10,140 episodes (issue #13).

No model runs, so the figure is the campaign machinery itself: episode loop,
sandbox, grading, result rows. Goal: 10,140 episodes in < 180 s on 2 cores with
flat memory (the issue measured 35 episodes/s and +245 KiB per episode).
Memory is the resident set of this process (``VmRSS``), sampled as results
arrive; growth per episode is the least-squares slope over the second half.
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from pathlib import Path

import numpy as np

from benchmarks.rows import row
from rewardbox.config.profile import load_profile
from rewardbox.episode.run import run_trials_async
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.runtime.compose import campaign_parts
from rewardbox.tasks.sources import load_benchmark, load_candidates

ISSUE_EPISODES_PER_S = 35.0
ISSUE_KIB_PER_EPISODE = 245.0
GOAL_S = 180.0


def rss_kib() -> int:
    """Resident set size of this process in KiB (Linux ``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("VmRSS not found in /proc/self/status")


def _cpu_s() -> float:
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def campaign_setup(episodes: int, concurrency: int):
    """The full profile's 190 tasks, keys (uid, trial) round-robin up to ``episodes``, a golden-replay profile."""
    profile = load_profile("full")
    tasks = load_benchmark(profile.tasks).tasks + load_candidates(profile.tasks).tasks
    longest = max(len(t.golden_interactions()) for t in tasks)
    episode = profile.episode.model_copy(
        update={
            "concurrency": concurrency,
            "max_agent_turns": longest + 2,
            "max_agent_steps_per_user_turn": longest + 2,
        }
    )
    profile = profile.model_copy(update={"episode": episode})
    keys = [(tasks[i % len(tasks)].uid, i // len(tasks)) for i in range(episodes)]
    return profile, tasks, keys


def run(episodes: int = 10_140, concurrency: int = 8, keep_results: bool = False) -> list[dict]:
    """Episodes per second, total seconds and memory growth per episode, with the machine load.

    ``keep_results=True`` also keeps every full episode result, as the code
    before issue #13 always did (and as a campaign that exports them still does).
    """
    profile, tasks, keys = campaign_setup(episodes, concurrency)
    samples: list[tuple[int, int]] = []  # (episodes done, RSS KiB), every 10 episodes

    done = [0]

    def on_result(_result) -> None:
        done[0] += 1
        if done[0] % 10 == 0:
            samples.append((done[0], rss_kib()))

    start_kib = rss_kib()
    cpu0 = _cpu_s()
    t0 = time.perf_counter()
    rows, _results = asyncio.run(
        run_trials_async(
            tasks,
            1,
            GoldenReplayPolicy(),
            campaign_parts(profile),
            keys=keys,
            on_result=on_result,
            **({} if keep_results else {"keep_results": False}),
        )
    )
    total_s = time.perf_counter() - t0
    cpu_s = (
        _cpu_s() - cpu0
    )  # this process and its finished children (the grading workers): load-independent
    half = [s for s in samples if s[0] >= episodes // 2]
    slope = (
        float(np.polyfit([s[0] for s in half], [s[1] for s in half], 1)[0])
        if len(half) > 2
        else float("nan")
    )
    result = {
        "episodes": rows.height,
        "keep_results": keep_results,
        "total_s": total_s,
        "episodes_per_s": rows.height / total_s,
        "kib_per_episode": slope,
        "rss_start_kib": start_kib,
        "rss_end_kib": rss_kib(),
        "passed_frac": float(rows["passed"].mean() or 0.0),
        "system_errors": int(rows["system_error"].is_not_null().sum()),
        "issue_episodes_per_s": ISSUE_EPISODES_PER_S,
        "ratio_vs_issue_rate": rows.height / total_s / ISSUE_EPISODES_PER_S,
        "cpu_s": cpu_s,
        "goal_s": GOAL_S,
        "loadavg": os.getloadavg(),
    }
    print(
        f"campaign {rows.height:,} episodes (golden replay, in-process): {total_s:.1f} s, "
        f"{result['episodes_per_s']:.1f} episodes/s (issue: {ISSUE_EPISODES_PER_S}/s, ratio "
        f"{result['ratio_vs_issue_rate']:.2f}); memory {slope:+.1f} KiB/episode over the second half "
        f"(issue: +{ISSUE_KIB_PER_EPISODE}); RSS {start_kib / 1024:.0f} -> {result['rss_end_kib'] / 1024:.0f} MiB; "
        f"passed {result['passed_frac']:.3f}; system errors {result['system_errors']}; CPU {cpu_s:.1f} s (this process "
        f"and the grading workers); load {result['loadavg']}"
    )
    return [
        row(
            f"campaign bookkeeping, {rows.height:,} golden episodes",
            result["episodes_per_s"],
            "episodes/s",
            ISSUE_EPISODES_PER_S,
            "before, issue #13 (idle)",
            goal=f"{episodes:,} in < {GOAL_S} s: {total_s:.0f} s",
            detail=result,
        ),
        row(
            "campaign memory growth per episode",
            slope,
            "KiB",
            ISSUE_KIB_PER_EPISODE,
            "before, issue #13",
            detail={"rss_start_kib": start_kib, "rss_end_kib": result["rss_end_kib"]},
        ),
    ]


def write_rows(path: str, trials: int = 3) -> None:
    """The 190 tasks x ``trials`` with the scripted golden-or-null mix; rows (uid, trial, reward, ...) to Parquet.

    Run it on two checkouts and compare the files: the same rows mean no behaviour change.
    """
    from rewardbox.policy import build_policy
    from rewardbox.policy.config import PolicyConfig

    profile, tasks, _ = campaign_setup(0, 8)
    keys = [(t.uid, trial) for t in tasks for trial in range(trials)]
    policy = build_policy(PolicyConfig(kind="scripted_mix", golden_frac=0.5))
    rows, _ = asyncio.run(
        run_trials_async(tasks, trials, policy, campaign_parts(profile), keys=keys)
    )
    rows.select(
        "uid", "trial", "reward", "passed", "system_error", "termination_reason", "turns"
    ).sort("uid", "trial").write_parquet(path)
    print(f"{rows.height} rows -> {path}")


if __name__ == "__main__":
    import sys

    write_rows(sys.argv[1])
