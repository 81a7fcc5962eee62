"""In-process sandbox, one episode: create + init + 10 calls + effects + teardown, retail (issue #13).

The same episode as ``sandbox_overhead`` (its calls), with a task-like init
(a data patch and a golden trajectory) as real tasks have. Anchor: cloning and
dumping a small SQLite database (measured here: SQLite backup-API copy of the
seeded retail database plus one canonical dump). Goal: < 25 ms median (the
issue measured 60 ms idle, 99 ms loaded).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time

from benchmarks.rows import row
from benchmarks.sandbox_overhead import CALLS, SERVER
from rewardbox.domains.database import EpisodeDatabase
from rewardbox.domains.retail.domain import DOMAIN
from rewardbox.sandbox.inprocess import InProcessSandbox

ISSUE_IDLE_MS = 60.0
GOAL_MS = 25.0
WORLD_STATE = {
    SERVER: {
        "data_patch": {"orders": [{"order_id": "ORD-1002", "status": "processing"}]},
        "golden_test_case": {
            "tool_interactions": [{"tool": "cancel_order", "parameters": {"order_id": "ORD-1002"}}]
        },
    }
}


async def episode() -> dict[str, float]:
    t0 = time.perf_counter()
    sandbox = InProcessSandbox()
    await sandbox.start(WORLD_STATE, sorted({name for name, _ in CALLS} | {"cancel_order"}))
    t1 = time.perf_counter()
    for name, args in CALLS:
        await sandbox.call_tool(name, args)
    t2 = time.perf_counter()
    effects = await sandbox.get_effects()
    t3 = time.perf_counter()
    await sandbox.close()
    t4 = time.perf_counter()
    assert effects[SERVER]["golden_db_hash"], "effects missing"
    return {
        "create_init_ms": (t1 - t0) * 1e3,
        "calls_10_ms": (t2 - t1) * 1e3,
        "effects_ms": (t3 - t2) * 1e3,
        "teardown_ms": (t4 - t3) * 1e3,
        "total_ms": (t4 - t0) * 1e3,
    }


def anchor_ms(repeats: int = 50) -> float:
    """Median of: copy the seeded retail database (backup API) and dump it canonically."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        db = EpisodeDatabase(DOMAIN)
        db.dump()
        db.dispose()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run(episodes: int = 200) -> list[dict]:
    """Median per phase over ``episodes`` episodes (one warm-up first), the anchor, ratios and load."""

    async def all_episodes() -> list[dict[str, float]]:
        await episode()  # warm-up: builds the task image and golden state once, as a campaign's first episode does
        return [await episode() for _ in range(episodes)]

    rows = asyncio.run(all_episodes())
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    anchor = anchor_ms()
    result = {
        **medians,
        "episodes": episodes,
        "anchor_clone_dump_ms": anchor,
        "ratio_total_vs_anchor": medians["total_ms"] / anchor,
        "issue_idle_ms": ISSUE_IDLE_MS,
        "ratio_vs_issue_idle": medians["total_ms"] / ISSUE_IDLE_MS,
        "goal_ms": GOAL_MS,
        "loadavg": os.getloadavg(),
    }
    print(
        f"in-process episode n={episodes}: median {medians['total_ms']:.1f} ms (create+init "
        f"{medians['create_init_ms']:.1f}, 10 calls {medians['calls_10_ms']:.1f}, effects {medians['effects_ms']:.1f}, "
        f"teardown {medians['teardown_ms']:.1f}); goal < {GOAL_MS} ms; issue {ISSUE_IDLE_MS} ms idle (ratio "
        f"{result['ratio_vs_issue_idle']:.2f}); anchor clone + dump {anchor:.2f} ms (ratio "
        f"{result['ratio_total_vs_anchor']:.1f}); load {result['loadavg']}"
    )
    return [
        row(
            f"in-process episode (create, init, 10 calls, effects, teardown), median of {episodes}",
            medians["total_ms"],
            "ms",
            anchor,
            "clone + canonical dump of the database, this run",
            goal=f"< {GOAL_MS} ms (issue: {ISSUE_IDLE_MS} ms idle before)",
            detail=result,
        )
    ]
