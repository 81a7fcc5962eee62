"""Per-episode overhead on a stateful server that indexes at start-up (issue #25), isolation checked.

The server is ``tests/fixtures/servers/kv_server.py`` with ``KV_KEEP_STATE=1`` (its init keeps the
store, so a reused process leaks the previous episode's writes) and ``KV_INDEX_DOCS=INDEX_DOCS``
(it builds an inverted index before it serves). One episode = start (+ init) + ``get_status`` of
both orders (the isolation check: both must read ``open``, the seed) + one write + effects (the
result must hold only this episode's write) + close. Paths, in one run:

- ``fresh``: one new interpreter per episode (``start: fresh``), as upstream does;
- ``template``: a child forked per episode from the server's template (``start: template``, the
  default), the first episode's template start and canary included in the mean;
- ``proxy``: an upstream-style Session Proxy of ours (HTTP, one fresh process per session) on the
  same server, through :class:`~rewardbox.sandbox.proxy_client.ProxySandbox`.

Goal: template ≥ 10× faster than fresh (median per episode) with 0 state leaks on every path.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from pathlib import Path

from benchmarks.rows import row
from rewardbox.sandbox.external import ExternalSandbox
from rewardbox.sandbox.pool import ExternalSandboxFactory
from rewardbox.sandbox.proxy_client import ProxySandbox
from rewardbox.sandbox.servers_config import parse_servers_config

KV = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "servers" / "kv_server.py"
INDEX_DOCS = 20000
TARGET_SPEEDUP = 10.0
SEED = {"order-1": "open", "order-2": "open"}


def config(start: str):
    server = {
        "type": "mcp-process",
        "command": f"{{python}} {KV}",
        "start": start,
        "env": {"KV_KEEP_STATE": "1", "KV_INDEX_DOCS": str(INDEX_DOCS)},
    }
    return parse_servers_config({"servers": {"kv": server}}, source="stateful-bench")


async def episode(make, i: int) -> tuple[float, bool]:
    """One timed episode: (ms, leaked). Writes ``order-1`` or ``order-2`` closed, alternately."""
    key = f"order-{1 + i % 2}"
    sandbox = make()
    t0 = time.perf_counter()
    try:
        await sandbox.start({"kv": {"data_patch": {}}}, ["get_status", "set_status"])
        seen = {
            k: json.loads(await sandbox.call_tool("get_status", {"key": k}))["status"] for k in SEED
        }
        await sandbox.call_tool("set_status", {"key": key, "status": "closed"})
        effects = (await sandbox.get_effects())["kv"]
    finally:
        await sandbox.close()
    leaked = seen != SEED or effects.get("result") != {**SEED, key: "closed"}
    return (time.perf_counter() - t0) * 1e3, leaked


async def campaign(make, n: int) -> list[tuple[float, bool]]:
    try:
        return [await episode(make, i) for i in range(n)]
    finally:
        if hasattr(make, "aclose"):
            await make.aclose()


class _Proxy:
    """An upstream-style Session Proxy: HTTP endpoints, one fresh process per server per session."""

    def __init__(self):
        import uvicorn
        from starlette.applications import Starlette
        from starlette.routing import Route

        self.sessions: dict[str, ExternalSandbox] = {}
        names = ["session_create", "list_tools", "call_tool", "get_effects", "session_destroy"]
        app = Starlette(routes=[Route(f"/{n}", self.handle, methods=["POST"]) for n in names])
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    async def handle(self, request):
        from starlette.responses import JSONResponse

        endpoint, body = request.url.path.strip("/"), await request.json()
        sid = body["session_id"]
        if endpoint == "session_create":
            self.sessions[sid] = ExternalSandbox(config("fresh"), session_id=sid)
            value = await self.sessions[sid].start(body["server_config"], body["available_tools"])
        elif endpoint == "list_tools":
            specs = await self.sessions[sid].list_tools()
            value = {
                "tools": {
                    s.name: {"description": s.description, "inputSchema": s.input_schema}
                    for s in specs
                }
            }
        elif endpoint == "call_tool":
            value = await self.sessions[sid].call_tool(body["tool_name"], body["arguments"])
        elif endpoint == "get_effects":
            value = await self.sessions[sid].get_effects()
        else:
            await self.sessions.pop(sid).close()
            value = "Ok"
        kind = "string" if isinstance(value, str) else "object"
        return JSONResponse({"success": True, "content": {"type": kind, "value": value}})

    def close(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


def _stats(path: str, results: list[tuple[float, bool]]) -> dict[str, float]:
    ms = [m for m, _ in results]
    out = {
        "median_ms": statistics.median(ms),
        "mean_ms": statistics.fmean(ms),
        "episodes": len(ms),
        "leaks": sum(leaked for _, leaked in results),
    }
    print(
        f"  {path:9s} n={len(ms)}: median {out['median_ms']:.1f} ms, mean {out['mean_ms']:.1f} ms, "
        f"leaks {out['leaks']}"
    )
    return out


def run(
    episodes_fresh: int = 5, episodes_template: int = 30, episodes_proxy: int = 5
) -> list[dict]:
    """Rows: fresh process per episode (anchor: the proxy, same run) and template (anchor: fresh)."""
    proxy = _Proxy()
    try:
        measured = {
            "proxy": _stats(
                "proxy", asyncio.run(campaign(lambda: ProxySandbox(proxy.url), episodes_proxy))
            )
        }
    finally:
        proxy.close()
    measured["fresh"] = _stats(
        "fresh", asyncio.run(campaign(ExternalSandboxFactory(config("fresh")), episodes_fresh))
    )
    template = ExternalSandboxFactory(config("template"))
    measured["template"] = _stats("template", asyncio.run(campaign(template, episodes_template)))
    measured["template"]["report"] = template.report()
    leaks = sum(m["leaks"] for m in measured.values())
    speedup = measured["fresh"]["median_ms"] / measured["template"]["median_ms"]
    return [
        row(
            "stateful server, fresh process per episode (median)",
            measured["fresh"]["median_ms"],
            "ms",
            measured["proxy"]["median_ms"],
            "upstream-style proxy ms, this run",
            detail=measured["fresh"],
            ok=measured["fresh"]["leaks"] == 0 and measured["proxy"]["leaks"] == 0,
            goal="0 leaks",
        ),
        row(
            "stateful server, template fork per episode (median)",
            measured["template"]["median_ms"],
            "ms",
            measured["fresh"]["median_ms"],
            "fresh process ms, this run",
            detail=measured,
            ok=speedup >= TARGET_SPEEDUP and leaks == 0,
            goal=f"fresh/template >= {TARGET_SPEEDUP:.0f}: {speedup:.1f}, leaks {leaks}",
        ),
    ]


if __name__ == "__main__":
    for r in run():
        print(
            r["row"],
            f"{r['value']:.1f} {r['unit']}",
            f"ratio {r['ratio']:.3f}",
            r["goal"],
            r["load"],
        )
