"""ExternalSandbox, servers.yaml and process reaping, against real stdio MCP servers.

The servers are ``tests/fixtures/servers/reaper_server.py`` (official mcp SDK,
``MCPServer``) spawned through the PDEATHSIG launcher. Wall-clock bounds appear
only where the requirement itself is a bound (teardown within 5 s, orphans gone
within 3 s), and they are generous.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from rewardbox.errors import SandboxError
from rewardbox.sandbox.config import SandboxTimeouts
from rewardbox.sandbox.external import ExternalSandbox
from rewardbox.sandbox.factory import build_sandbox_factory
from rewardbox.sandbox.reserved import parse_effects_reply, parse_init_reply
from rewardbox.sandbox.servers_config import (
    ServersConfigError,
    load_servers_config,
    parse_servers_config,
)

SERVERS = Path(__file__).resolve().parents[1] / "fixtures" / "servers"
FIXTURE = SERVERS / "reaper_server.py"


def _process(name: str, **env: str) -> dict:
    return {
        "type": "mcp-process",
        "command": f"{{python}} {FIXTURE}",
        "env": {"REAPER_NAME": name, **env},
    }


def _config(**servers: dict):
    return parse_servers_config({"servers": servers}, source="test-servers.yaml")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def run(coro):
    return asyncio.run(coro)


# ----- servers.yaml ---------------------------------------------------------
def test_servers_yaml_substitution_and_env(tmp_path, monkeypatch):
    monkeypatch.setenv("RB_TEST_DIR", "/opt/data")
    monkeypatch.setenv("RB_TEST_KEY", "s3cret")
    path = tmp_path / "servers.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "servers": {
                    "retail": {
                        "type": "mcp-process",
                        "command": "{python} -m pkg.srv --data {env[RB_TEST_DIR]}/x",
                        "env": {"TYPESENSE_API_KEY": "Fake", "ROOT": "${RB_TEST_DIR}/root"},
                        "cwd": "$RB_TEST_DIR",
                    },
                    "remote": {
                        "type": "mcp-remote",
                        "endpoint": "http://127.0.0.1:9/mcp",
                        "headers": {"Authorization": "Bearer ${RB_TEST_KEY}"},
                        "timeout": 5,
                    },
                }
            }
        )
    )
    config = load_servers_config(path)
    retail, remote = config.get("retail"), config.get("remote")
    assert retail.argv(path, "retail") == [sys.executable, "-m", "pkg.srv", "--data", "/opt/data/x"]
    env = retail.process_env(path, "retail")
    assert env["TYPESENSE_API_KEY"] == "Fake" and env["ROOT"] == "/opt/data/root"
    assert env["FASTMCP_LOG_LEVEL"] == "WARNING" and env["PATH"] == os.environ["PATH"]
    assert retail.resolved_cwd(path, "retail") == "/opt/data"
    assert remote.resolved_headers(path, "remote") == {"Authorization": "Bearer s3cret"}
    assert remote.transport == "streamable-http" and remote.timeout == 5
    with pytest.raises(KeyError, match="'nope' is not defined in .*servers.yaml"):
        config.get("nope")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "servers: {a: {type: mcp-process}}",
            r"servers\.yaml \(field 'servers\.a\.mcp-process\.command'\)",
        ),
        ("servers: {a: {type: mcp-pipe, command: x}}", r"servers\.yaml \(field 'servers\.a'\)"),
        (
            "servers: {a: {type: mcp-remote, endpoint: u, timeout: -1}}",
            r"field 'servers\.a\.mcp-remote\.timeout'",
        ),
        (
            "servers: {a: {type: mcp-process, command: x, colour: red}}",
            r"field 'servers\.a\.mcp-process\.colour'",
        ),
        ("servers: [1, 2]", r"field 'servers'"),
        ("servers: {a: [unclosed", r"servers\.yaml: not valid YAML at line 1"),
        ("- just a list", r"servers\.yaml: expected a mapping"),
    ],
)
def test_servers_yaml_errors_name_file_and_field(tmp_path, text, message):
    path = tmp_path / "servers.yaml"
    path.write_text(text)
    with pytest.raises(ServersConfigError, match=message):
        load_servers_config(path)


def test_servers_yaml_unset_env_ref_and_missing_file(tmp_path, monkeypatch):
    monkeypatch.delenv("RB_TEST_UNSET", raising=False)
    config = _config(a={"type": "mcp-process", "command": "run {env[RB_TEST_UNSET]}"})
    with pytest.raises(
        ServersConfigError, match=r"field 'servers\.a\.command'.*'RB_TEST_UNSET' is not set"
    ):
        config.get("a").argv(config.source, "a")
    with pytest.raises(ServersConfigError, match="missing.yaml: cannot read"):
        load_servers_config(tmp_path / "missing.yaml")


def test_reply_parsing_follows_reserved_tool_contract():
    assert parse_init_reply("s", "{}") == {}
    assert parse_init_reply("s", '{"status": "ok", "k": 1}') == {"k": 1}
    for bad in ('{"status": "error"}', "[]", "Error executing tool", '{"k": 1}'):
        with pytest.raises(SandboxError, match="__reserved__init of server 's' failed"):
            parse_init_reply("s", bad)
    assert parse_effects_reply('{"a": 1}') == {"a": 1}
    assert parse_effects_reply("[1, 2]") == {} and parse_effects_reply("not json") == {}


# ----- lifecycle ------------------------------------------------------------
def test_episode_lifecycle_priority_init_effects_and_reaping():
    config = _config(a=_process("a"), b=_process("b"), c=_process("c"))
    world_state = {
        "a": {"seed": 1},
        "b": {"init_reply": {"status": "ok", "order_id": "ORD-1"}, "effects_reply": "[1, 2]"},
        "c": {"effects_reply": "not json"},
    }

    async def episode():
        sandbox = ExternalSandbox(config, timeouts=SandboxTimeouts(tool_s=10))
        init = await sandbox.start(world_state, ["add_item", "whoami"])
        specs = await sandbox.list_tools()
        who = json.loads(await sandbox.call_tool("whoami", {}))
        added = json.loads(await sandbox.call_tool("add_item", {"name": "lamp"}))
        bad_args = await sandbox.call_tool("add_item", {})
        with pytest.raises(SandboxError, match="Tool echo does not exist"):
            await sandbox.call_tool("echo", {"text": "x"})
        echoed = await sandbox.call_server_tool("a", "echo", {"text": "hi"})
        effects = await sandbox.get_effects()
        pids = sandbox.pids
        await sandbox.close()
        await sandbox.close()  # idempotent
        return sandbox, init, specs, who, added, bad_args, echoed, effects, pids

    sandbox, init, specs, who, added, bad_args, echoed, effects, pids = run(episode())
    assert init == {"a": {}, "b": {"order_id": "ORD-1"}, "c": {}}
    assert [s.name for s in specs] == ["add_item", "whoami"]
    assert specs[0].input_schema == {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
    }
    assert who["server"] == "c"  # the later server in world_state wins a name clash
    assert added == {"id": 1, "name": "lamp"}
    assert "validation error" in bad_args  # a tool's own error is ordinary output
    assert echoed == "hi"
    assert (
        effects["a"]["config"] == {"seed": 1} and effects["a"]["session_id"] == sandbox.session_id
    )
    assert effects["c"] == {} and effects["b"] == {}  # invalid JSON and non-dict replies
    assert len(pids) == 3 and all(_gone(pid) for pid in pids)


def test_missing_tool_and_failed_init_are_system_errors_and_reap():
    config = _config(a=_process("a"), b=_process("b"))

    async def attempt(world_state, tools):
        sandbox = ExternalSandbox(config)
        with pytest.raises(SandboxError) as info:
            await sandbox.start(world_state, tools)
        return sandbox, str(info.value)

    sandbox, message = run(attempt({"a": {}}, ["echo", "no_such_tool"]))
    assert message == "Tool no_such_tool does not exist"
    assert sandbox.pids and all(_gone(pid) for pid in sandbox.pids)
    sandbox, message = run(
        attempt({"a": {}, "b": {"init_reply": {"status": "error", "why": "bad patch"}}}, None)
    )
    assert "__reserved__init of server 'b' failed" in message and "bad patch" in message
    assert len(sandbox.pids) == 2 and all(_gone(pid) for pid in sandbox.pids)
    sandbox, message = run(attempt({"unknown": {}}, None))
    assert "'unknown' is not defined in test-servers.yaml" in message and sandbox.pids == []
    config = _config(a={"type": "mcp-process", "command": "{env[RB_TEST_SURELY_UNSET]} serve"})
    sandbox, message = run(attempt({"a": {}}, None))
    assert "test-servers.yaml (field 'servers.a.command')" in message and sandbox.pids == []


# ----- reaping (issue #5 item 8) ---------------------------------------------
def test_crash_mid_call_is_a_system_error_and_hang_is_cancelled_at_timeout():
    config = _config(a=_process("a"), b=_process("b"))

    async def episode():
        sandbox = ExternalSandbox(config, timeouts=SandboxTimeouts(tool_s=1.5))
        await sandbox.start({"a": {}, "b": {}}, None)
        pid_a = json.loads(await sandbox.call_server_tool("a", "whoami", {}))["pid"]
        with pytest.raises(SandboxError, match="timed out after 1.5 s"):
            await sandbox.call_server_tool("a", "hang", {})
        alive_after_hang = await sandbox.call_server_tool("a", "echo", {"text": "still here"})
        with pytest.raises(SandboxError, match=r"server 'b' exited mid-call during 'crash'"):
            await sandbox.call_server_tool("b", "crash", {})
        with pytest.raises(SandboxError, match="server 'b' is not running"):
            await sandbox.call_server_tool("b", "echo", {"text": "x"})
        await sandbox.close()
        return sandbox, pid_a, alive_after_hang

    sandbox, pid_a, alive_after_hang = run(episode())
    assert alive_after_hang == "still here"  # the hung call was cancelled, the server kept serving
    assert pid_a in sandbox.pids and all(_gone(pid) for pid in sandbox.pids)


def test_teardown_escalates_to_sigkill_for_a_server_ignoring_sigterm(tmp_path):
    marker = tmp_path / "teardown.txt"
    config = _config(
        good=_process("good", REAPER_TEARDOWN_MARKER=str(marker)), stubborn=_process("stubborn")
    )

    async def episode():
        sandbox = ExternalSandbox(
            config, timeouts=SandboxTimeouts(tool_s=1.0, teardown_s=2.0, term_grace_s=2.0)
        )
        await sandbox.start({"good": {}, "stubborn": {}}, None)
        with pytest.raises(SandboxError, match="timed out"):
            await sandbox.call_server_tool("stubborn", "hang_stubborn", {})
        stubborn = psutil.Process(sandbox.pids[1])
        assert stubborn.is_running()
        started = time.monotonic()
        await sandbox.close()
        return sandbox, time.monotonic() - started

    sandbox, close_s = run(episode())
    assert all(_gone(pid) for pid in sandbox.pids)
    assert marker.read_text().split() == [
        str(sandbox.pids[0])
    ]  # the healthy server got its teardown
    assert (
        close_s < 8.0
    )  # correctness bound (spec: about 2 s teardown + 2 s SIGTERM grace, within 5 s)


def test_servers_die_when_the_worker_is_sigkilled(tmp_path):
    path = tmp_path / "servers.yaml"
    path.write_text(yaml.safe_dump({"servers": {"a": _process("a"), "b": _process("b")}}))
    worker = subprocess.Popen(
        [sys.executable, str(SERVERS / "episode_worker.py"), str(path), "a", "b"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # its workdir cannot be cleaned
    try:
        line = worker.stdout.readline()
        pids = json.loads(line)["pids"]
        assert len(pids) == 2 and all(psutil.Process(pid).ppid() == worker.pid for pid in pids)
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
    deadline = time.monotonic() + 3.0
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids), [pid for pid in pids if not _gone(pid)]


@pytest.mark.parametrize(
    ("attempts", "mode", "succeeds"),
    [(4, "close_stdout", True), (3, "hang", False)],
)
def test_transient_connect_failures_leave_at_most_one_live_process(
    tmp_path, attempts, mode, succeeds
):
    """Each failed start leaves a live process (stdout closed, or handshake never answered)."""
    counter = tmp_path / "starts.txt"
    env = {"REAPER_COUNTER_FILE": str(counter), "REAPER_FAIL_FIRST": "3", "REAPER_FAIL_MODE": mode}
    if mode == "hang":
        env["REAPER_IGNORE_SIGTERM"] = "1"  # each reap must escalate to SIGKILL
    config = _config(a=_process("a", **env))
    timeouts = SandboxTimeouts(connect_s=1.0 if mode == "hang" else 30.0, term_grace_s=0.5)

    async def episode():
        sandbox = ExternalSandbox(config, timeouts=timeouts, connect_attempts=attempts)
        if succeeds:
            await sandbox.start({"a": {}}, ["echo"])
            live = sandbox.live_pids()
            echoed = await sandbox.call_tool("echo", {"text": "up"})
            await sandbox.close()
            return sandbox, live, echoed
        with pytest.raises(
            SandboxError, match=r"could not connect after 3 attempt\(s\): timed out"
        ):
            await sandbox.start({"a": {}}, ["echo"])
        return sandbox, sandbox.live_pids(), None

    sandbox, live, echoed = run(episode())
    started = [int(pid) for pid in counter.read_text().split()]
    assert started == sandbox.pids and len(started) == attempts
    if succeeds:
        assert live == [started[-1]] and echoed == "up"
    else:
        assert live == []
    assert all(_gone(pid) for pid in started)


def test_cancelled_start_leaves_no_process():
    """Own case: the episode runner cancels start() (e.g. its watchdog fires) mid-spawn."""
    config = _config(a=_process("a"), b=_process("b"))

    async def episode():
        sandbox = ExternalSandbox(config)
        with pytest.raises(TimeoutError):
            # b's init answers after 30 s: the cancel always lands mid-start, however fast the spawn is
            await asyncio.wait_for(
                sandbox.start({"a": {}, "b": {"init_delay_s": 30}}, None), timeout=0.6
            )
        await sandbox.close()
        return sandbox

    sandbox = run(episode())
    assert len(sandbox.pids) == 2 and all(_gone(pid) for pid in sandbox.pids)
    assert not [
        c
        for c in psutil.Process().children(recursive=True)
        if "reaper_server" in " ".join(c.cmdline())
    ]


def test_internal_retail_server_runs_as_an_external_process(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the server must import from any working directory
    config = parse_servers_config({"use_internal_servers": True})

    async def episode():
        sandbox = ExternalSandbox(config)
        await sandbox.start({"rewardbox_retail": {}}, ["find_customer"])
        found = json.loads(
            await sandbox.call_tool("find_customer", {"email": "maria.santos@example.com"})
        )
        effects = await sandbox.get_effects()
        await sandbox.close()
        return sandbox, found, effects

    sandbox, found, effects = run(episode())
    assert "CUS-1001" in json.dumps(found)
    retail = effects["rewardbox_retail"]
    assert (
        retail["result_db_hash"] == retail["golden_db_hash"]
    )  # a read-only episode changes nothing
    assert all(_gone(pid) for pid in sandbox.pids)


# ----- mcp-remote -------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_remote_streamable_http_server_and_factory(tmp_path):
    port = _free_port()
    env = {**os.environ, "FASTMCP_LOG_LEVEL": "WARNING"}
    server = subprocess.Popen(
        [sys.executable, str(FIXTURE), "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        path = tmp_path / "servers.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "servers": {
                        "remote": {
                            "type": "mcp-remote",
                            "endpoint": f"http://127.0.0.1:{port}/mcp",
                            "timeout": 10,
                        }
                    }
                }
            )
        )
        make = build_sandbox_factory("external", servers=path, timeouts={"tool_s": 10})

        async def episode():
            sandbox = make()
            init = await sandbox.start({"remote": {"seed": 7}}, ["add_item"])
            added = await sandbox.call_tool("add_item", {"name": "desk"})
            effects = await sandbox.get_effects()
            await sandbox.close()
            return sandbox, init, added, effects

        sandbox, init, added, effects = run(episode())
        assert isinstance(sandbox, ExternalSandbox) and sandbox.pids == []
        assert init == {"remote": {}} and json.loads(added)["name"] == "desk"
        assert effects["remote"]["config"] == {"seed": 7} and effects["remote"]["pid"] == server.pid
    finally:
        server.kill()
        server.wait(timeout=10)


def test_factories_are_picklable_and_make_fresh_sandboxes(tmp_path):
    path = tmp_path / "servers.yaml"
    path.write_text(yaml.safe_dump({"servers": {"a": _process("a")}}))
    for kind, cfg in [
        ("external", {"servers": path, "timeouts": {"tool_s": 5}}),
        ("proxy", {"base_url": "http://127.0.0.1:7111"}),
        ("inprocess", {}),
    ]:
        make = pickle.loads(pickle.dumps(build_sandbox_factory(kind, **cfg)))
        first, second = make(), make()
        assert first is not second and type(first) is type(second)
    assert (
        build_sandbox_factory("external", servers=path, timeouts={"tool_s": 5})().timeouts.tool_s
        == 5
    )


def test_factory_rejects_unknown_kind_and_validates_config_early(tmp_path):
    with pytest.raises(
        ValueError, match="unknown sandbox kind 'docker'.*external.*inprocess.*proxy"
    ):
        build_sandbox_factory("docker")
    with pytest.raises(ServersConfigError, match="missing.yaml"):
        build_sandbox_factory("external", servers=tmp_path / "missing.yaml")
