"""Server templates (issue #25): each episode's server is forked from a template that never served.

Real stdio servers from ``tests/fixtures/servers/kv_server.py``; the ``-m`` form runs with the
repository root as ``cwd`` (so ``cwd`` is honoured), flags come through ``env``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import psutil
import pytest

from rewardbox.errors import SandboxError
from rewardbox.sandbox.factory import build_sandbox_factory
from rewardbox.sandbox.servers_config import parse_servers_config
from rewardbox.sandbox.template import split_python_command
from tests.sandbox.test_reuse_canary import KV, kv_episode

ROOT = Path(__file__).resolve().parents[2]
CLOSE_ONE = ({"order-1": "closed"}, {"order-2": "closed"}, {})
EXPECTED = [
    {"order-1": "closed", "order-2": "open"},
    {"order-1": "open", "order-2": "closed"},
    {"order-1": "open", "order-2": "open"},
]


def _factory(command, **server):
    entry = {"type": "mcp-process", "command": command, **server}
    return build_sandbox_factory(
        "external", servers=parse_servers_config({"servers": {"kv": entry}})
    )


def _campaign(make, writes=CLOSE_ONE):
    async def run():
        try:
            episodes = [await kv_episode(make, w) for w in writes]
            return episodes, make.report(), make.templates._procs[:]
        finally:
            await make.aclose()

    return asyncio.run(run())


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_split_python_command_accepts_both_forms_and_names_what_it_refuses():
    assert split_python_command(["/usr/bin/python3", "-u", "-m", "pkg.mod", "--x"]) == (
        ["/usr/bin/python3", "-u"],
        ["-m", "pkg.mod", "--x"],
    )
    assert split_python_command(["python", "srv.py", "a"]) == (["python"], ["srv.py", "a"])
    assert "not a Python interpreter" in split_python_command(["node", "srv.js"])
    assert "neither" in split_python_command(["python", "-c", "print(1)"])


def test_script_form_forks_a_fresh_state_per_episode_from_a_server_that_keeps_state():
    episodes, report, templates = _campaign(
        _factory(f"{{python}} {KV}", env={"KV_KEEP_STATE": "1"})
    )
    assert [e["effects"]["result"] for e in episodes] == EXPECTED
    assert len({e["pid"] for e in episodes}) == 3
    assert report["kv"] == {"start": "template", "reuse": "trusted"}
    assert (
        all(_gone(e["pid"]) for e in episodes)
        and templates
        and all(_gone(p.pid) for p in templates)
    )


def test_module_form_with_cwd_and_env_forks_too():
    command = ["{python}", "-m", "tests.fixtures.servers.kv_server"]
    episodes, report, _ = _campaign(
        _factory(command, cwd=str(ROOT), env={"KV_KEEP_STATE": "1", "KV_INDEX_DOCS": "50"})
    )
    assert [e["effects"]["result"] for e in episodes] == EXPECTED
    assert report["kv"]["start"] == "template"


def test_server_with_a_thread_at_import_falls_back_to_fresh_processes_once(caplog):
    with caplog.at_level(logging.WARNING, logger="rewardbox.sandbox.template"):
        episodes, report, _ = _campaign(
            _factory(f"{{python}} {KV}", env={"KV_KEEP_STATE": "1", "KV_THREAD_AT_IMPORT": "1"})
        )
    assert [e["effects"]["result"] for e in episodes] == EXPECTED
    assert (
        report["kv"]["start"]
        == "fresh: 2 threads are running before the server serves (started at import)"
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith(
        "server kv: no template, a fresh process per episode"
    )
    assert [len(e["events"]) for e in episodes] == [
        1,
        0,
        0,
    ]  # said once, in the first episode's events
    assert episodes[0]["events"][0].startswith(
        "sandbox: server kv: no template, fresh processes from now on: 2 threads"
    )


def test_a_forked_servers_stderr_is_captured_in_the_episodes_log():
    make = _factory(f"{{python}} {KV}")

    async def crash():
        sandbox = make()
        try:
            await sandbox.start({"kv": {"data_patch": {}}}, None)
            assert sandbox._conns[0].forked
            with pytest.raises(SandboxError) as info:
                await sandbox.call_tool("crash", {"message": "kv-stderr-marker"})
            return str(info.value)
        finally:
            await sandbox.close()
            await make.aclose()

    message = asyncio.run(crash())
    assert "exited mid-call" in message and "stderr: ...kv-stderr-marker" in message


def test_server_with_a_socket_open_before_serving_falls_back():
    episodes, report, _ = _campaign(
        _factory(f"{{python}} {KV}", env={"KV_SOCKET_AT_IMPORT": "1"}), writes=({},)
    )
    assert episodes[0]["effects"]["result"] == {"order-1": "open", "order-2": "open"}
    assert report["kv"]["start"].startswith("fresh: an open socket (fd ")


def test_non_python_command_runs_fresh_and_start_fresh_is_honoured():
    episodes, report, _ = _campaign(_factory(["/usr/bin/env", "{python}", str(KV)]), writes=({},))
    assert episodes[0]["effects"]["result"] == {"order-1": "open", "order-2": "open"}
    assert report["kv"]["start"] == "fresh: '/usr/bin/env' is not a Python interpreter"
    _, report, _ = _campaign(_factory(f"{{python}} {KV}", start="fresh"), writes=({},))
    assert "start" not in report.get("kv", {})
