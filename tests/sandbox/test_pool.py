"""Warm server pools: reuse through teardown/init, episode cap, health check, isolation.

Real stdio MCP servers: the embedded retail domain (``python -m
rewardbox.domains.server retail``) and ``tests/fixtures/servers/reaper_server.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
from pathlib import Path

import psutil
import pytest

from rewardbox.errors import SandboxError
from rewardbox.sandbox.config import SandboxTimeouts
from rewardbox.sandbox.factory import build_sandbox_factory
from rewardbox.sandbox.pool import ExternalSandboxFactory
from rewardbox.sandbox.servers_config import parse_servers_config

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "reaper_server.py"
RETAIL = "rewardbox_retail"


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _fixture_factory(
    tmp_path: Path, episodes_per_process: int, **env: str
) -> ExternalSandboxFactory:
    # the fixture reports no hashes, so the reuse canary cannot check it: reuse is allowed explicitly
    server = {
        "type": "mcp-process",
        "command": f"{{python}} {FIXTURE}",
        "episodes_per_process": episodes_per_process,
        "reuse_unchecked": True,
        "env": {"REAPER_TEARDOWN_MARKER": str(tmp_path / "teardown.txt"), **env},
    }
    config = parse_servers_config({"servers": {"a": server}}, source="pool-servers.yaml")
    return build_sandbox_factory("external", servers=config, timeouts={"tool_s": 1.5})


async def _fixture_episode(
    make, world: dict | None = None, items: tuple[str, ...] = ("lamp",)
) -> dict:
    sandbox = make()
    try:
        await sandbox.start({"a": world or {}}, ["add_item", "whoami"])
        added = [json.loads(await sandbox.call_tool("add_item", {"name": n})) for n in items]
        effects = (await sandbox.get_effects())["a"]
        pid = json.loads(await sandbox.call_tool("whoami", {}))["pid"]
    finally:
        await sandbox.close()
    return {"pid": pid, "added": added, "effects": effects, "session_id": sandbox.session_id}


def test_retail_process_is_reused_and_no_state_carries_over():
    config = parse_servers_config({"use_internal_servers": True})
    make = build_sandbox_factory("external", servers=config)
    ticket = {
        "customer_id": "CUS-1001",
        "category": "other",
        "description": "pool isolation probe",
        "order_id": "ORD-1001",
    }

    async def episode(write: bool) -> dict:
        sandbox = make()
        try:
            await sandbox.start({RETAIL: {}}, ["create_ticket", "list_tickets"])
            before = json.loads(
                await sandbox.call_tool("list_tickets", {"customer_id": "CUS-1001"})
            )["tickets"]
            if write:
                await sandbox.call_tool("create_ticket", ticket)
            after = json.loads(
                await sandbox.call_tool("list_tickets", {"customer_id": "CUS-1001"})
            )["tickets"]
            effects = (await sandbox.get_effects())[RETAIL]
        finally:
            await sandbox.close()
        return {"pids": sandbox.pids, "before": before, "after": after, "effects": effects}

    async def campaign():
        try:
            return [await episode(write) for write in (True, False, True)], make.pool.idle_pids()
        finally:
            await make.aclose()

    (first, second, third), idle = asyncio.run(campaign())
    assert first["pids"] == second["pids"] == third["pids"] == idle  # one process served all three
    assert len(first["after"]) == len(first["before"]) + 1
    # no golden actions: the golden state is the initial state
    assert first["effects"]["result_db_hash"] != first["effects"]["golden_db_hash"]
    assert second["before"] == second["after"] == first["before"]  # episode 1's ticket is gone
    assert third["after"] == first["after"]  # the same write gets the same ticket id again
    assert second["effects"]["initial_db_state"] == first["effects"]["initial_db_state"]
    assert (
        second["effects"]["result_db_hash"]
        == second["effects"]["golden_db_hash"]
        == first["effects"]["golden_db_hash"]
    )
    assert (
        third["effects"]["result_db_hash"] == first["effects"]["result_db_hash"]
    )  # same write, same state
    assert make.pool.counts == {"spawned": 1, "reused": 2, "retired": 1}
    assert all(_gone(pid) for pid in idle)


def test_episode_cap_teardown_each_episode_and_isolation(tmp_path):
    make = _fixture_factory(tmp_path, episodes_per_process=2)

    async def campaign():
        try:
            return [
                await _fixture_episode(make, {"seed": i}, items)
                for i, items in enumerate([("lamp", "desk"), ("chair",), ("rug",)])
            ]
        finally:
            await make.aclose()

    first, second, third = asyncio.run(campaign())
    assert first["pid"] == second["pid"] != third["pid"]  # cap of 2 episodes per process
    assert second["added"] == [{"id": 1, "name": "chair"}]  # no item of episode 1 carried over
    assert second["effects"]["items"] == [{"id": 1, "name": "chair"}]
    assert (
        second["effects"]["config"] == {"seed": 1}
        and second["effects"]["session_id"] == second["session_id"]
    )
    assert first["session_id"] != second["session_id"]
    assert (tmp_path / "teardown.txt").read_text().split() == [str(first["pid"])] * 2 + [
        str(third["pid"])
    ]
    assert _gone(first["pid"]) and _gone(third["pid"])


def test_health_check_replaces_a_dead_warm_process(tmp_path):
    make = _fixture_factory(tmp_path, episodes_per_process=10)

    async def campaign():
        try:
            first = await _fixture_episode(make)
            os.kill(first["pid"], signal.SIGKILL)  # dies while idle in the pool
            await asyncio.sleep(0.2)
            return first, await _fixture_episode(make)
        finally:
            await make.aclose()

    first, second = asyncio.run(campaign())
    assert second["pid"] != first["pid"] and second["added"] == [{"id": 1, "name": "lamp"}]
    assert make.pool.counts["spawned"] == 2 and make.pool.counts["reused"] == 0


def test_faulted_episodes_retire_their_process(tmp_path):
    make = _fixture_factory(tmp_path, episodes_per_process=10)

    async def campaign():
        try:
            sandbox = make()
            with pytest.raises(SandboxError, match="__reserved__init of server 'a' failed"):
                await sandbox.start({"a": {"init_reply": {"status": "error"}}}, None)
            failed_init = sandbox.pids
            sandbox = make()
            await sandbox.start({"a": {}}, ["add_item"])
            with pytest.raises(SandboxError, match="timed out"):
                await sandbox.call_server_tool("a", "hang", {})
            await sandbox.close()
            timed_out = sandbox.pids
            return failed_init, timed_out, await _fixture_episode(make)
        finally:
            await make.aclose()

    failed_init, timed_out, healthy = asyncio.run(campaign())
    assert (
        len({*failed_init, *timed_out, healthy["pid"]}) == 3
    )  # neither faulted process was reused
    assert all(_gone(pid) for pid in [*failed_init, *timed_out])


def test_default_servers_are_never_reused_and_a_pickled_factory_has_its_own_pool(tmp_path):
    make = _fixture_factory(tmp_path, episodes_per_process=1)
    copy = pickle.loads(pickle.dumps(make))
    assert isinstance(copy, ExternalSandboxFactory) and copy.pool is not make.pool

    async def campaign():
        try:
            return [await _fixture_episode(make) for _ in range(2)]
        finally:
            await make.aclose()

    first, second = asyncio.run(campaign())
    assert first["pid"] != second["pid"] and _gone(first["pid"]) and _gone(second["pid"])
    assert make.pool.counts["spawned"] == 0  # never went through the pool


def test_pool_moves_to_a_new_event_loop(tmp_path):
    make = _fixture_factory(tmp_path, episodes_per_process=10)
    first = asyncio.run(_fixture_episode(make))  # the loop ends; its warm process goes with it
    second = asyncio.run(_fixture_episode(make))

    async def close():
        await make.aclose()

    asyncio.run(close())
    assert first["pid"] != second["pid"] and second["added"] == [{"id": 1, "name": "lamp"}]
    assert _gone(first["pid"]) and _gone(second["pid"])


def test_episodes_per_process_must_be_positive():
    with pytest.raises(ValueError, match="episodes_per_process"):
        parse_servers_config(
            {"servers": {"a": {"type": "mcp-process", "command": "x", "episodes_per_process": 0}}}
        )


def test_timeouts_pass_through_the_factory(tmp_path):
    make = _fixture_factory(tmp_path, episodes_per_process=3)
    assert isinstance(make().timeouts, SandboxTimeouts) and make().timeouts.tool_s == 1.5


def test_concurrent_episodes_grow_the_pool_then_reuse_it(tmp_path):
    make = _fixture_factory(tmp_path, episodes_per_process=10)

    async def campaign():
        try:
            first = await asyncio.gather(*(_fixture_episode(make, {"seed": i}) for i in range(3)))
            second = await asyncio.gather(*(_fixture_episode(make, {"seed": i}) for i in range(3)))
            return first, second
        finally:
            await make.aclose()

    first, second = asyncio.run(campaign())
    assert len({e["pid"] for e in first}) == 3 and {e["pid"] for e in second} == {
        e["pid"] for e in first
    }
    assert all(e["added"] == [{"id": 1, "name": "lamp"}] for e in first + second)
    assert make.pool.counts == {"spawned": 3, "reused": 3, "retired": 3}


def test_close_after_teardown_does_not_wait_for_the_server_to_exit(tmp_path):
    """A server that never exits on stdin EOF is signalled once its teardown answered (no exit grace)."""
    from rewardbox.sandbox.external import ExternalSandbox

    server = {
        "type": "mcp-process",
        "command": f"{{python}} {FIXTURE}",
        "env": {
            "REAPER_LINGER_S": "3600",
            "REAPER_TEARDOWN_MARKER": str(tmp_path / "teardown.txt"),
            "REAPER_EOF_MARKER": str(tmp_path / "eof.txt"),
        },
    }
    config = parse_servers_config({"servers": {"a": server}})

    async def episode():
        sandbox = ExternalSandbox(
            config, timeouts=SandboxTimeouts(exit_grace_s=60.0, term_grace_s=2.0)
        )
        await sandbox.start({"a": {}}, None)
        started = asyncio.get_running_loop().time()
        await sandbox.close()
        return sandbox, asyncio.get_running_loop().time() - started

    sandbox, close_s = asyncio.run(episode())
    assert (tmp_path / "teardown.txt").read_text().split() == [str(sandbox.pids[0])]
    assert all(_gone(pid) for pid in sandbox.pids)
    assert not (
        tmp_path / "eof.txt"
    ).exists()  # signalled while serving, not left to exit after EOF
    assert close_s < 30.0  # correctness bound: far below the 60 s exit grace it no longer waits out
