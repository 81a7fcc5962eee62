"""Per-episode sandbox overhead, no model (issue #3).

One episode = session create + init + 10 tool calls + effects + teardown, on the
retail domain, for the in-process path and for an external stdio MCP process.
Baseline: the ThinkingBox Session Proxy's session create alone, 1.6 s idle on a
2-core machine (docs/thinkingbox.md, "Reference costs").
"""

from __future__ import annotations

import asyncio
import statistics
import time

from rewardbox import strict_json
from rewardbox.sandbox.external import ExternalSandbox
from rewardbox.sandbox.inprocess import InProcessSandbox
from rewardbox.sandbox.servers_config import parse_servers_config

BASELINE_CREATE_S = 1.6
SERVER = "rewardbox_retail"
CALLS = [("find_customer", {"email": "maria.santos@example.com"}), ("get_customer", {"customer_id": "CUS-1001"}),
         ("list_orders", {"customer_id": "CUS-1001"}), ("get_order", {"order_id": "ORD-1001"}),
         ("get_order", {"order_id": "ORD-1002"}), ("list_tickets", {"customer_id": "CUS-1002"}),
         ("get_customer", {"customer_id": "CUS-1003"}), ("list_orders", {"customer_id": "CUS-1003"}),
         ("get_order", {"order_id": "ORD-1003"}),
         ("create_ticket", {"customer_id": "CUS-1001", "category": "other", "description": "bench",
                            "order_id": "ORD-1001"})]


def _external():
    config = parse_servers_config({"servers": {SERVER: {"type": "mcp-process",
                                                        "command": "{python} -m rewardbox.domains.retail.server"}}})
    return ExternalSandbox(config)


async def episode(make) -> dict[str, float]:
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
    return {"create_init_ms": (t1 - t0) * 1e3, "calls_10_ms": (t2 - t1) * 1e3, "effects_ms": (t3 - t2) * 1e3,
            "teardown_ms": (t4 - t3) * 1e3, "total_ms": (t4 - t0) * 1e3,
            "effects_kb": len(strict_json.dumps(effects)) / 1024}


def run(episodes_inprocess: int = 50, episodes_external: int = 50) -> dict:
    """Median per phase for each path, and the ratio of the total to the baseline's create alone."""
    out = {}
    for path, make, n in (("inprocess", InProcessSandbox, episodes_inprocess), ("external_stdio", _external, episodes_external)):
        rows = [asyncio.run(episode(make)) for _ in range(n)]
        medians = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        medians["episodes"] = n
        medians["ratio_total_vs_tb_session_create"] = medians["total_ms"] / (BASELINE_CREATE_S * 1e3)
        out[path] = medians
        print(f"{path:15s} n={n}: total {medians['total_ms']:.1f} ms (create+init {medians['create_init_ms']:.1f}, "
              f"10 calls {medians['calls_10_ms']:.1f}, effects {medians['effects_ms']:.1f}, "
              f"teardown {medians['teardown_ms']:.1f}); ratio vs ThinkingBox session create (1.6 s): "
              f"{medians['ratio_total_vs_tb_session_create']:.3f}")
    return out
