"""run_campaign: bounded workers, key order, and nothing kept of a result but what ``collect`` returns."""

from __future__ import annotations

import asyncio
import gc
import weakref

from rewardbox.episode.campaign import ROW_SCHEMA, result_row, rows_frame, run_campaign
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.tasks.schema import Task


class _Task:
    def __init__(self, uid: str):
        self.uid, self.domain = uid, "retail"


def test_workers_bound_concurrency_keep_key_order_and_drop_full_results():
    tasks = [_Task(f"t{i}") for i in range(5)]
    keys = [(t.uid, trial) for t in tasks for trial in range(4)]
    in_flight, peak, refs, seen = 0, 0, [], []

    async def attempt(task: Task, trial: int) -> EpisodeResult:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.001 * ((trial * 7 + len(task.uid)) % 3))  # finish out of order
        in_flight -= 1
        result = EpisodeResult(
            uid=task.uid,
            trial=trial,
            reward=1.0,
            passed=True,
            effects={"srv": {"result_db_state": {"t": [{"x": trial}] * 100}}},
        )
        refs.append(weakref.ref(result))
        return result

    rows = asyncio.run(
        run_campaign(
            tasks,
            keys,
            attempt,
            concurrency=3,
            on_result=lambda r: seen.append(r.uid),
            collect=lambda r: result_row(r, {"t0": "retail"}),
        )
    )
    gc.collect()
    assert peak == 3 and len(seen) == len(keys)
    assert [(r["uid"], r["trial"]) for r in rows] == keys  # key order, whatever the finishing order
    assert all(ref() is None for ref in refs)  # no full result outlives its row
    frame = rows_frame(rows)
    assert frame.schema == ROW_SCHEMA and frame.height == len(keys)


def test_default_keeps_results_and_an_empty_campaign_returns_nothing():
    async def attempt(task, trial):
        return EpisodeResult(uid=task.uid, trial=trial)

    out = asyncio.run(run_campaign([_Task("a")], [("a", 0), ("a", 1)], attempt, concurrency=8))
    assert [type(r) for r in out] == [EpisodeResult, EpisodeResult] and out[1].trial == 1
    assert asyncio.run(run_campaign([], [], attempt)) == []
