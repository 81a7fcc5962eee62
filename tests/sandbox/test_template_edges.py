"""Server templates under the habits that break naive forking (issue #25, review of i25).

Real stdio server ``tests/fixtures/servers/fork_edges_server.py`` (``asyncio.run`` form, numpy,
a SQLite file opened at import, no ``__reserved__init``), real forks.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from rewardbox.errors import SandboxError
from rewardbox.sandbox.factory import build_sandbox_factory
from rewardbox.sandbox.servers_config import parse_servers_config
from tests.sandbox.test_reuse_canary import KV, kv_episode

EDGES = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "fork_edges_server.py"


def _factory(env=None, **server):
    entry = {
        "type": "mcp-process",
        "command": f"{{python}} {EDGES}",
        "reuse_unchecked": True,
        "env": {"OPENBLAS_NUM_THREADS": "1", **(env or {})},
        **server,
    }
    return build_sandbox_factory(
        "external", servers=parse_servers_config({"servers": {"edges": entry}})
    )


async def _episode(make, tool: str) -> dict:
    sandbox = make()
    try:
        await sandbox.start({"edges": {}}, None)
        forked = sandbox._conns[0].forked
        return {**json.loads(await sandbox.call_tool(tool, {})), "forked": forked}
    finally:
        await sandbox.close()


def _campaign(make, tool: str, n: int) -> tuple[list[dict], dict]:
    async def run():
        try:
            return [await _episode(make, tool) for _ in range(n)], make.report()
        finally:
            await make.aclose()

    return asyncio.run(run())


def test_forked_children_reseed_numpys_global_rng_like_fresh_processes():
    episodes, report = _campaign(_factory(env={"EDGE_NO_SQLITE": "1"}), "draw", 3)
    assert report["edges"]["start"] == "template" and all(e["forked"] for e in episodes)
    assert len({e["pid"] for e in episodes}) == 3
    assert len({e["py"] for e in episodes}) == 3
    assert len({e["np"] for e in episodes}) == 3, (
        "numpy's global RNG is the template's in every child"
    )


def test_a_server_whose_numpy_starts_threads_falls_back_with_the_cure_in_the_reason():
    episodes, report = _campaign(
        _factory(env={"EDGE_NO_SQLITE": "1", "OPENBLAS_NUM_THREADS": "2"}), "draw", 1
    )
    assert not episodes[0]["forked"]
    assert report["edges"]["start"].endswith(
        "OPENBLAS_NUM_THREADS=1 in the server's env avoids them"
    )


def test_a_server_holding_a_writable_file_open_before_serving_falls_back_and_stays_isolated():
    episodes, report = _campaign(_factory(), "bump", 3)
    assert [e["n"] for e in episodes] == [1, 1, 1], (
        "episodes share the SQLite file the template opened at import"
    )
    assert report["edges"]["start"].startswith("fresh: a file open for writing (fd ")
    assert not any(e["forked"] for e in episodes)


def test_a_canary_episode_that_fails_before_its_check_hands_the_canary_to_the_next_episode():
    make = build_sandbox_factory(
        "external",
        servers=parse_servers_config(
            {
                "servers": {
                    "kv": {
                        "type": "mcp-process",
                        "command": f"{{python}} {KV}",
                        "env": {"KV_KEEP_STATE": "1"},
                    }
                }
            }
        ),
    )

    async def run():
        try:
            first = make()
            with pytest.raises(SandboxError, match="does not exist"):
                await first.start(
                    {"kv": {"data_patch": {}}}, ["no_such_tool"]
                )  # the first forked episode
            later = [await kv_episode(make, w) for w in ({"order-1": "closed"}, {})]
            return later, make.report()
        finally:
            await make.aclose()

    later, report = asyncio.run(run())
    assert report["kv"] == {"start": "template", "reuse": "trusted"}, (
        "later episodes silently ran fresh processes"
    )
    assert [e["effects"]["result"] for e in later] == [
        {"order-1": "closed", "order-2": "open"},
        {"order-1": "open", "order-2": "open"},
    ]


def test_a_server_without_init_or_hashes_gets_its_canary_verdict_and_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="rewardbox.sandbox"):
        episodes, report = _campaign(
            _factory(env={"EDGE_NO_SQLITE": "1"}, reuse_unchecked=False), "draw", 3
        )
    assert report["edges"]["reuse"] == "retired", (
        "the canary never ran: the ledger stayed 'checking'"
    )
    assert [e["forked"] for e in episodes] == [
        False,
        False,
        False,
    ]  # the canary's fresh process served the first
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot be checked" in warnings[0]
