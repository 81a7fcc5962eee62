"""Campaigns: every (uid, trial) key run once, with coverage checks and repair.

Probes (n trials of each candidate task) and evaluations (k trials of each
benchmark task) are both campaigns. Coverage is validated before any metric
(DESIGN.md "Evaluation"): every expected key present exactly once, none
unexpected. A repair run executes only missing or system-error keys.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence

import polars as pl

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.tasks.schema import Task

AttemptFn = Callable[[Task, int], Awaitable[EpisodeResult]]

ROW_SCHEMA = {
    "uid": pl.Utf8, "domain": pl.Utf8, "trial": pl.Int64, "reward": pl.Float64, "passed": pl.Boolean,
    "system_error": pl.Utf8, "finish_reason": pl.Utf8, "turns": pl.Int64, "input_tokens": pl.Int64,
    "cached_input_tokens": pl.Int64, "output_tokens": pl.Int64, "seconds": pl.Float64, "attempts": pl.Int64,
    "truncated_turns": pl.Int64,
}


def campaign_keys(tasks: Sequence[Task], trials: int) -> list[tuple[str, int]]:
    """All ``(uid, trial)`` keys of a tasks x trials campaign, trial in ``0..trials-1``."""
    return [(t.uid, i) for t in tasks for i in range(trials)]


async def run_campaign(
    tasks: Sequence[Task],
    keys: Iterable[tuple[str, int]],
    attempt_fn: AttemptFn,
    *,
    concurrency: int = 8,
    on_result: Callable[[EpisodeResult], None] | None = None,
) -> list[EpisodeResult]:
    """Run every key with at most ``concurrency`` episodes in flight.

    Args:
        tasks: the tasks the keys refer to (by uid).
        keys: ``(uid, trial)`` pairs to run.
        attempt_fn: runs one attempt (e.g. ``partial(run_attempt, runner)``).
        concurrency: episodes in flight; a batching local policy groups their completions.
        on_result: called after each attempt (progress logging).

    Returns:
        Results in key order. System errors are rows with ``system_error`` set.
    """
    by_uid = {t.uid: t for t in tasks}
    semaphore = asyncio.Semaphore(concurrency)

    async def one(uid: str, trial: int) -> EpisodeResult:
        async with semaphore:
            result = await attempt_fn(by_uid[uid], trial)
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(uid, trial) for uid, trial in keys)))


def results_frame(results: Sequence[EpisodeResult], tasks: Sequence[Task]) -> pl.DataFrame:
    """One row per attempt (schema ``ROW_SCHEMA``), domain taken from the task."""
    domain = {t.uid: t.domain for t in tasks}
    rows = [{**r.to_row(), "domain": domain.get(r.uid, "")} for r in results]
    return pl.DataFrame(rows, schema=ROW_SCHEMA)


def coverage_problems(rows: pl.DataFrame, expected: Iterable[tuple[str, int]]) -> list[str]:
    """Every expected (uid, trial) exactly once and none unexpected; [] means complete."""
    expected = set(expected)
    seen = Counter(zip(rows["uid"].to_list(), rows["trial"].to_list()))
    problems = [f"missing {k}" for k in sorted(expected - set(seen))]
    problems += [f"duplicate {k} x{n}" for k, n in sorted(seen.items()) if n > 1]
    problems += [f"unexpected {k}" for k in sorted(set(seen) - expected)]
    return problems


def repair_keys(rows: pl.DataFrame, expected: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Keys to re-run: expected keys that are missing or whose row is a system error."""
    clean = rows.filter(pl.col("system_error").is_null())
    done = set(zip(clean["uid"].to_list(), clean["trial"].to_list()))
    return [k for k in expected if k not in done]


def merge_repair(rows: pl.DataFrame, repaired: pl.DataFrame) -> pl.DataFrame:
    """Replace rows of repaired keys by their new rows (one row per key remains)."""
    keys = repaired.select("uid", "trial")
    kept = rows.join(keys, on=["uid", "trial"], how="anti")
    return pl.concat([kept, repaired]).sort(["uid", "trial"])
