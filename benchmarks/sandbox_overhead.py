"""Per-episode sandbox overhead, no model (issues #3 and #13).

One episode = session create + init + 10 tool calls + effects + teardown, on the
retail domain (``python -m rewardbox.domains.server retail`` for the external
paths). Paths, measured in one run:

- ``inprocess``: the embedded servers in this process;
- ``external_fresh``: one fresh stdio process per episode, which is what
  upstream's session proxy does (the anchor of the external row);
- ``external_pooled``: a warm pool (``rewardbox.sandbox.pool``), processes reused
  through ``__reserved__teardown``/``__reserved__init``, ``episodes_per_process``
  = ``POOL_CAP``; the first spawn and every retirement are counted, so the median
  and the mean are both amortised figures.

Goal (issue #13): pooled ≥ 10× faster per episode than one fresh process per session.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from benchmarks.rows import load, row
from rewardbox import strict_json
from rewardbox.sandbox.inprocess import InProcessSandbox
from rewardbox.sandbox.pool import ExternalSandboxFactory
from rewardbox.sandbox.servers_config import parse_servers_config

BASELINE_CREATE_S = 1.6
UPSTREAM_EPISODE_S = (
    2.5  # issue #13: upstream's session proxy on the same servers, one process per session
)
TARGET_SPEEDUP = 10.0
POOL_CAP = 50
SERVER = "rewardbox_retail"
CALLS = [
    ("find_customer", {"email": "maria.santos@example.com"}),
    ("get_customer", {"customer_id": "CUS-1001"}),
    ("list_orders", {"customer_id": "CUS-1001"}),
    ("get_order", {"order_id": "ORD-1001"}),
    ("get_order", {"order_id": "ORD-1002"}),
    ("list_tickets", {"customer_id": "CUS-1002"}),
    ("get_customer", {"customer_id": "CUS-1003"}),
    ("list_orders", {"customer_id": "CUS-1003"}),
    ("get_order", {"order_id": "ORD-1003"}),
    (
        "create_ticket",
        {
            "customer_id": "CUS-1001",
            "category": "other",
            "description": "bench",
            "order_id": "ORD-1001",
        },
    ),
]


def _external(episodes_per_process: int) -> ExternalSandboxFactory:
    server = {
        "type": "mcp-process",
        "command": "{python} -m rewardbox.domains.server retail",
        "episodes_per_process": episodes_per_process,
    }
    return ExternalSandboxFactory(parse_servers_config({"servers": {SERVER: server}}))


async def episode(make) -> dict[str, float]:
    """One timed episode; phases in ms."""
    sandbox = make()
    t0 = time.perf_counter()
    await sandbox.start({SERVER: {}}, sorted({name for name, _ in CALLS}))
    t1 = time.perf_counter()
    for name, args in CALLS:
        await sandbox.call_tool(name, args)
    t2 = time.perf_counter()
    effects = await sandbox.get_effects()
    t3 = time.perf_counter()
    await sandbox.close()
    t4 = time.perf_counter()
    assert effects[SERVER]["result_db_hash"], "effects missing"
    return {
        "create_init_ms": (t1 - t0) * 1e3,
        "calls_10_ms": (t2 - t1) * 1e3,
        "effects_ms": (t3 - t2) * 1e3,
        "teardown_ms": (t4 - t3) * 1e3,
        "total_ms": (t4 - t0) * 1e3,
        "effects_kb": len(strict_json.dumps(effects)) / 1024,
    }


async def _campaign(make, n: int) -> list[dict[str, float]]:
    try:
        return [await episode(make) for _ in range(n)]
    finally:
        if hasattr(make, "aclose"):
            await make.aclose()


def _summary(path: str, rows: list[dict[str, float]]) -> dict[str, float]:
    medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    medians["mean_total_ms"] = statistics.fmean(r["total_ms"] for r in rows)
    medians["episodes"] = len(rows)
    print(
        f"  {path:16s} n={len(rows)}: median {medians['total_ms']:.1f} ms, mean {medians['mean_total_ms']:.1f} "
        f"(create+init {medians['create_init_ms']:.1f}, 10 calls {medians['calls_10_ms']:.1f}, effects "
        f"{medians['effects_ms']:.1f}, teardown {medians['teardown_ms']:.1f})"
    )
    return medians


def run(
    episodes_inprocess: int = 50, episodes_fresh: int = 10, episodes_pooled: int = 100
) -> list[dict]:
    """Per-episode cost of each path, as rows (see ``benchmarks.__main__``).

    Rows: in-process episode (anchor: the 25 ms goal of issue #13), fresh external
    episode (anchor: upstream's 2.5 s), pooled external episode, mean over the run
    (anchor: the fresh median measured here; ratio = speedup, goal ≥ 10).
    """
    measured = {}
    for path, make, n in (
        ("inprocess", InProcessSandbox, episodes_inprocess),
        ("external_fresh", _external(1), episodes_fresh),
        ("external_pooled", _external(POOL_CAP), episodes_pooled),
    ):
        measured[path] = _summary(path, asyncio.run(_campaign(make, n)))
    fresh_ms, pooled_ms = (
        measured["external_fresh"]["total_ms"],
        measured["external_pooled"]["mean_total_ms"],
    )
    speedup = fresh_ms / pooled_ms
    return [
        row(
            "in-process sandbox, one episode (median)",
            measured["inprocess"]["total_ms"],
            "ms",
            25.0,
            "goal ms",
            detail=measured["inprocess"],
        ),
        row(
            "external stdio, fresh process per episode (median)",
            fresh_ms,
            "ms",
            UPSTREAM_EPISODE_S * 1e3,
            "upstream proxy ms (issue #13)",
            detail=measured["external_fresh"],
        ),
        row(
            f"external stdio, warm pool cap {POOL_CAP} (mean, amortised)",
            pooled_ms,
            "ms",
            fresh_ms,
            "fresh process ms, this run",
            detail=measured["external_pooled"],
            ok=speedup >= TARGET_SPEEDUP,
            goal=f"fresh/pooled >= {TARGET_SPEEDUP:.0f}: {speedup:.1f}",
        ),
    ]


if __name__ == "__main__":
    for r in run():
        print(r["row"], f"{r['value']:.1f} {r['unit']}", f"ratio {r['ratio']:.3f}", load())
