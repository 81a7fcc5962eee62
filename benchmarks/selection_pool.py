"""Selection end to end: 1,000,000 probe rows (125,000 tasks x 8) -> bands -> pool (issue #13).

Anchor: a plain Python loop over tasks with one ``scipy.stats.beta`` object per
task (5.3 s on the issue's machine). The benchmark also checks that the
product's bands equal the anchor's for every task.
"""

from __future__ import annotations

import os
import time

import numpy as np
import polars as pl
from scipy import stats

from benchmarks.rows import row
from rewardbox.selection import BANDS, DEFAULT_BOUNDARIES, task_difficulty, training_pool

ANCHOR_LOOP_S = 5.3
GOAL_S = 2.0


def probe_rows(tasks: int = 125_000, trials: int = 8, seed: int = 0) -> pl.DataFrame:
    """Synthetic probe rows: task rates ~ Beta(0.6, 0.9), 1 % system errors, domains retail/hotel."""
    rng = np.random.default_rng(seed)
    rate = np.repeat(rng.beta(0.6, 0.9, size=tasks), trials)
    passed = rng.random(tasks * trials) < rate
    error = rng.random(tasks * trials) < 0.01
    uid = np.repeat(np.char.add("task-", np.arange(tasks).astype(str)), trials)
    return pl.DataFrame(
        {
            "uid": uid,
            "domain": np.where(np.repeat(np.arange(tasks) % 2 == 0, trials), "retail", "hotel"),
            "trial": np.tile(np.arange(trials), tasks),
            "reward": passed.astype(float),
            "passed": passed,
            "system_error": pl.Series(np.where(error, "sandbox: fault", "")).replace("", None),
        }
    )


def anchor_bands(c: list[int], n: list[int], min_clean: int = 4) -> list[str | None]:
    """The anchor: one ``scipy.stats.beta`` per task, largest mass, ties to the harder band."""
    out: list[str | None] = []
    for ci, ni in zip(c, n):
        cdf = stats.beta(ci + 0.5, ni - ci + 0.5).cdf(DEFAULT_BOUNDARIES)
        edges = [0.0, *cdf, 1.0]
        masses = [max(0.0, edges[i + 1] - edges[i]) for i in range(len(BANDS))]
        top = max(masses)
        out.append(
            BANDS[next(i for i, m in enumerate(masses) if m >= top - 1e-12)]
            if ni >= min_clean
            else None
        )
    return out


def run(tasks: int = 125_000, trials: int = 8, anchor_sample: int = 12_500) -> list[dict]:
    """Median of 3 end-to-end runs; the anchor loop timed on a sample and scaled; bands compared for all tasks.

    The band check runs the anchor's per-task computation once per distinct
    (c, n) pair (the same function of (c, n)), so every task is compared.
    """
    rows = probe_rows(tasks, trials)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        difficulty = task_difficulty(rows)
        pool = training_pool(difficulty)
        times.append(time.perf_counter() - t0)
    product_s = sorted(times)[1]
    c, n = difficulty["c"].to_list(), difficulty["n"].to_list()
    t0 = time.perf_counter()
    anchor_bands(c[:anchor_sample], n[:anchor_sample])
    anchor_s = (time.perf_counter() - t0) * tasks / min(anchor_sample, tasks)
    pairs = sorted(set(zip(c, n)))
    by_pair = dict(zip(pairs, anchor_bands([p[0] for p in pairs], [p[1] for p in pairs])))
    same = sum(
        by_pair[(ci, ni)] == band for ci, ni, band in zip(c, n, difficulty["band"].to_list())
    )
    result = {
        "rows": rows.height,
        "tasks": tasks,
        "product_s": product_s,
        "anchor_loop_s": anchor_s,
        "anchor_sample_tasks": anchor_sample,
        "anchor_loop_issue_s": ANCHOR_LOOP_S,
        "ratio_product_vs_anchor": product_s / anchor_s,
        "same_bands": same,
        "pool_tasks": pool.height,
        "goal_s": GOAL_S,
        "loadavg": os.getloadavg(),
    }
    print(
        f"selection {rows.height:,} rows / {tasks:,} tasks: {product_s:.2f} s end to end (goal < {GOAL_S} s); "
        f"anchor loop with scipy.stats.beta {anchor_s:.2f} s (timed on {anchor_sample:,} tasks, scaled; "
        f"issue: {ANCHOR_LOOP_S} s); ratio {result['ratio_product_vs_anchor']:.3f}; same bands as the anchor "
        f"{same:,}/{tasks:,}; pool {pool.height:,}; load {result['loadavg']}"
    )
    assert same == tasks, f"bands differ from the anchor for {tasks - same} tasks"
    return [
        row(
            f"selection: {rows.height:,} probe rows -> bands -> pool",
            product_s,
            "s",
            anchor_s,
            "per-task loop with scipy.stats.beta, this run",
            ok=product_s < GOAL_S,
            goal=f"< {GOAL_S} s; same bands {same:,}/{tasks:,}",
            detail=result,
        )
    ]
