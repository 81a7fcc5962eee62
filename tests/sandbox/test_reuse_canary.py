"""The reuse canary (issue #25): a reused process is checked once against a fresh one, never assumed.

Real stdio servers: ``tests/fixtures/servers/kv_server.py`` (keeps state with ``KV_KEEP_STATE=1``,
reports no hashes with ``KV_NO_HASH=1``) and the embedded retail server (resets on init).
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from rewardbox.sandbox.canary import canary_verdict
from rewardbox.sandbox.factory import build_sandbox_factory
from rewardbox.sandbox.servers_config import parse_servers_config

KV = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "kv_server.py"


def kv_factory(episodes_per_process: int = 10, start: str = "fresh", **env: str):
    server = {
        "type": "mcp-process",
        "command": f"{{python}} {KV}",
        "episodes_per_process": episodes_per_process,
        "start": start,
        "env": env,
    }
    reuse_unchecked = env.pop("_reuse_unchecked", None)
    if reuse_unchecked:
        server["reuse_unchecked"] = True
    return build_sandbox_factory(
        "external", servers=parse_servers_config({"servers": {"kv": server}})
    )


async def kv_episode(make, writes: dict[str, str]) -> dict:
    """One episode: init, the writes, then the effects and the pid that served it."""
    sandbox = make()
    try:
        await sandbox.start({"kv": {"data_patch": {}, "golden_test_case": None}}, None)
        for key, status in writes.items():
            await sandbox.call_tool("set_status", {"key": key, "status": status})
        effects = (await sandbox.get_effects())["kv"]
        pid = json.loads(await sandbox.call_tool("search", {"word": "w1"}))["pid"]
    finally:
        await sandbox.close()
    return {"effects": effects, "pid": pid, "events": list(sandbox.events)}


def test_verdict_names_the_differing_hash_and_refuses_unchecked_servers():
    same = {"result_db_hash": "a", "golden_db_hash": "g"}
    assert canary_verdict(same, dict(same)) is None
    assert "result_db_hash 'b'" in canary_verdict({**same, "result_db_hash": "b"}, same)
    assert "no result_db_hash/golden_db_hash" in canary_verdict({"orders": {}}, {"orders": {}})
    assert canary_verdict({"orders": {}}, {"orders": {}}, unchecked_ok=True) is None


def test_canary_retires_reuse_of_a_server_that_keeps_state_with_one_warning(caplog):
    make = kv_factory(KV_KEEP_STATE="1")

    async def campaign():
        try:
            return [
                await kv_episode(make, w)
                for w in ({"order-1": "closed"}, {"order-2": "closed"}, {}, {})
            ]
        finally:
            await make.aclose()

    with caplog.at_level(logging.WARNING, logger="rewardbox.sandbox.canary"):
        episodes = asyncio.run(campaign())
    # every episode starts from the seed: only its own write shows
    assert [e["effects"]["result"] for e in episodes] == [
        {"order-1": "closed", "order-2": "open"},
        {"order-1": "open", "order-2": "closed"},
        {"order-1": "open", "order-2": "open"},
        {"order-1": "open", "order-2": "open"},
    ]
    assert len({e["pid"] for e in episodes}) == 4  # reuse retired: a fresh process per episode
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert (
        len(warnings) == 1
        and "server kv: reuse retired" in warnings[0]
        and "result_db_hash" in warnings[0]
    )
    assert make.pool.ledger.report() == {"kv": "retired"}
    assert [len(e["events"]) for e in episodes] == [
        0,
        1,
        0,
        0,
    ]  # recorded once, in the canary's episode
    assert episodes[1]["events"][0].startswith(
        "sandbox: server kv: reuse retired by the canary: right after"
    )


def test_canary_trusts_a_server_that_resets_on_init():
    make = kv_factory()

    async def campaign():
        try:
            return [
                await kv_episode(make, w)
                for w in ({"order-1": "closed"}, {}, {"order-2": "closed"})
            ]
        finally:
            await make.aclose()

    episodes = asyncio.run(campaign())
    assert episodes[1]["effects"]["result"] == {"order-1": "open", "order-2": "open"}
    assert (
        len({e["pid"] for e in episodes}) == 1
    )  # the canary passed: one warm process served all three
    assert make.pool.ledger.report() == {"kv": "trusted"}


def test_server_without_hashes_is_not_reused_unless_servers_yaml_says_so():
    async def campaign(make):
        try:
            return [await kv_episode(make, {}) for _ in range(3)]
        finally:
            await make.aclose()

    checked = kv_factory(KV_NO_HASH="1")
    assert len({e["pid"] for e in asyncio.run(campaign(checked))}) == 3
    assert "no result_db_hash" in checked.pool.ledger.retired["kv"]
    allowed = kv_factory(KV_NO_HASH="1", _reuse_unchecked="1")
    assert len({e["pid"] for e in asyncio.run(campaign(allowed))}) == 1
    assert allowed.pool.ledger.report() == {"kv": "trusted"}
