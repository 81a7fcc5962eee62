"""Injected infrastructure faults are system errors, retried, never scored 0, and counted by kind.

One campaign of six tasks, each meeting one fault on its first try, through real components: stdio
MCP servers (``tests/fixtures/servers/reaper_server.py``: a tool that kills its server, a tool that
hangs past the sandbox's timeout), the endpoint user simulator and the judge on the fake
OpenAI-compatible server (HTTP 503, HTTP 429, a reply slower than the judge's timeout), and the
grading worker pool (a test that kills its worker). Episodes run one at a time, so the fake
server's script is consumed in a known order.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from rewardbox.episode.campaign import (
    campaign_keys,
    merge_repair,
    repair_keys,
    results_frame,
    run_campaign,
    system_error_counts,
)
from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.trial import run_trial
from rewardbox.episode.user_simulator import EndpointUser
from rewardbox.grading.judge import JudgeConfig
from rewardbox.grading.testrunner import TestRunner
from rewardbox.policy.base import Completion
from rewardbox.policy.interpreter import CALL_CLOSE, CALL_OPEN, interpret
from rewardbox.sandbox.config import SandboxTimeouts
from rewardbox.sandbox.external import ExternalSandbox
from rewardbox.sandbox.servers_config import parse_servers_config
from rewardbox.tasks.schema import Task, ToolOverride
from tests.fixtures.fake_openai import chat_response

REAPER = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "reaper_server.py"
PASS = "def check(x, judge):\n    assert 'all set' in x.response\n\n__tb_test_fn = check\n"
JUDGED = "def check(x, judge):\n    assert judge.text_yesno(x.response, 'Is the user helped?')\n\n__tb_test_fn = check\n"
CRASH_WORKER = (
    "import os, pathlib\n\ndef check(x, judge):\n    marker = pathlib.Path({marker!r})\n"
    "    if not marker.exists():\n        marker.touch()\n        os._exit(3)\n\n__tb_test_fn = check\n"
)


def call(name: str) -> str:
    return f"{CALL_OPEN}{json.dumps({'name': name, 'arguments': {}})}{CALL_CLOSE}"


class FaultPolicy:
    """Per task: the first episode plays ``first``, every later one ``then`` (raw completions in order)."""

    name = "faults"

    def __init__(self, plans: dict[str, tuple[list[str], list[str]]]):
        self.plans = plans
        self.episodes: dict[str, int] = {}

    async def complete(self, request):
        uid = request.task.uid
        step = sum(1 for m in request.messages if m["role"] == "assistant")
        if step == 0:
            self.episodes[uid] = self.episodes.get(uid, 0) + 1
        first, then = self.plans[uid]
        plan = first if self.episodes[uid] == 1 else then
        raw = plan[step] if step < len(plan) else "You are all set. <DONE>"
        return Completion(
            raw_text=raw,
            interpretation=interpret(raw, request.tools, reasoning_open=False),
            input_tokens=10,
            output_tokens=5,
        )

    async def aclose(self):
        pass


def make_task(uid: str, test_code: str, user_context: str, server: str) -> Task:
    return Task(
        uid=uid,
        dataset="faults",
        scenario="faults",
        agent="agent",
        query="Please help.",
        user_context=user_context,
        init={},
        world_state={server: {}},
        tools=(ToolOverride("echo"), ToolOverride("crash"), ToolOverride("hang")),
        system_instructions="You are a support agent.",
        bot_instructions="",
        test_code=test_code,
        test_name="check",
        test_file=f"{uid}.py",
    )


ASKS_USER = ["Which booking do you mean?", "You are all set. <DONE>"]
FAULTS = {  # uid: (kind, first episode, later episodes, test code, user context, server)
    "tool_crash": ("sandbox_crash", [call("crash")], [call("echo")], PASS, "", "proc"),
    "tool_hang": ("sandbox_timeout", [call("hang")], [call("echo")], PASS, "", "proc"),
    "user_5xx": ("user_simulator_http_5xx", ASKS_USER, ASKS_USER, PASS, "Booking BK-1.", "web"),
    "user_429": ("user_simulator_http_429", ASKS_USER, ASKS_USER, PASS, "Booking BK-1.", "web"),
    "grader_crash": ("grader_crash", [], [], "CRASH_WORKER", "", "web"),
    "judge_timeout": ("judge_timeout", [], [], JUDGED, "", "web"),
}


def script_fake(fake, retried_at_once: bool) -> None:
    """The fake server's replies in request order: user simulator and judge, first tries then second."""
    user_ok = chat_response("Thanks, that is all. <DONE>")
    fail_5xx = (503, {"error": {"message": "upstream down"}})
    fail_429 = (429, {"error": {"message": "slow down"}}, {"retry-after": "0"})
    if retried_at_once:  # each fault's retry follows it
        for item in (fail_5xx, (200, user_ok), fail_429, (200, user_ok)):
            fake.add(*item)
        fake.add(200, chat_response("Yes"), delay_s=3.0)  # the judge's first try: past its timeout
    else:  # every first try, then the refill pass
        for item in (fail_5xx, fail_429):
            fake.add(*item)
        fake.add(200, chat_response("Yes"), delay_s=3.0)
        fake.add(200, user_ok)
        fake.add(200, user_ok)
    fake.add(200, chat_response("Yes"))


@pytest.fixture(scope="module")
def web_server():
    """The reaper MCP server over streamable HTTP, shared by the tasks whose fault is elsewhere."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "FASTMCP_LOG_LEVEL": "WARNING"}
    server = subprocess.Popen(
        [sys.executable, str(REAPER), "--http", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}/mcp"
    server.kill()
    server.wait(timeout=10)


def run_faults(tmp_path, fake, web_url: str, retries: int):
    crash_code = CRASH_WORKER.format(marker=str(tmp_path / "crashed"))
    tasks = [
        make_task(uid, crash_code if code == "CRASH_WORKER" else code, context, server)
        for uid, (_, _, _, code, context, server) in FAULTS.items()
    ]
    policy = FaultPolicy({uid: (first, then) for uid, (_, first, then, *_) in FAULTS.items()})
    servers = parse_servers_config(
        {
            "servers": {
                "proc": {"type": "mcp-process", "command": f"{{python}} {REAPER}"},
                "web": {"type": "mcp-remote", "endpoint": web_url, "timeout": 10},
            }
        },
        source="faults-servers.yaml",
    )
    judge = JudgeConfig(base_url=fake.base_url, model="judge", timeout_s=1.0, max_retries=0)
    config = EpisodeConfig(max_user_turns=2, max_system_error_retries=retries, concurrency=1)

    async def main(keys, runner):
        return await run_campaign(tasks, keys, partial(run_trial, runner), concurrency=1)

    with TestRunner(max_workers=1, timeout_s=20, judge_config=judge) as grader:
        runner = EpisodeRunner(
            policy,
            lambda: ExternalSandbox(servers, timeouts=SandboxTimeouts(tool_s=1.0)),
            EndpointUser(fake.base_url, "user", max_retries=0),
            grader,
            config,
        )
        keys = campaign_keys(tasks, 1)
        rows = results_frame(asyncio.run(main(keys, runner)), tasks)
        redo = repair_keys(rows, keys)
        if redo:  # the refill pass: only the keys whose attempt ended in a system error
            rows = merge_repair(rows, results_frame(asyncio.run(main(redo, runner)), tasks))
    return rows, redo


def test_every_injected_fault_is_a_retried_system_error_counted_by_kind(
    tmp_path, fake_openai, web_server
):
    script_fake(fake_openai, retried_at_once=True)
    rows, redo = run_faults(tmp_path, fake_openai, web_server, retries=1)
    by_uid = {row["uid"]: row for row in rows.iter_rows(named=True)}
    for uid, (kind, *_rest) in FAULTS.items():
        row = by_uid[uid]
        assert row["retried_system_error_kinds"] == [kind], uid
        assert (row["system_error"], row["reward"], row["passed"], row["tries"]) == (
            None,
            1.0,
            True,
            2,
        ), uid
    assert redo == []
    assert system_error_counts(rows) == {kind: 1 for kind, *_ in FAULTS.values()}
    print(
        f"\nsystem errors by kind: {system_error_counts(rows)}; rewards {rows['reward'].to_list()}"
    )


def test_without_retries_a_fault_is_an_unscored_row_that_the_refill_pass_repairs(
    tmp_path, fake_openai, web_server
):
    script_fake(fake_openai, retried_at_once=False)
    rows, redo = run_faults(tmp_path, fake_openai, web_server, retries=0)
    assert sorted(uid for uid, _ in redo) == sorted(
        FAULTS
    )  # every fault left a system-error row, none a 0
    assert rows["reward"].to_list() == [1.0] * len(FAULTS) and rows[
        "system_error"
    ].null_count() == len(FAULTS)
    assert rows["tries"].to_list() == [1] * len(FAULTS)
