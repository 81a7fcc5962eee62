"""The environment server over HTTP/WebSocket with OpenEnv's own clients.

A golden episode gets reward 1 and a null episode 0 (the grader's verdict on
the terminal state, as in evaluation); two concurrent sessions on one task do
not see each other's writes; an injected sandbox crash is a system error
(``reward`` None, never 0); caller errors come back as OpenEnv error responses.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

pytest.importorskip(
    "openenv.core", reason="the environment server needs the 'env' extra (openenv-core)"
)

from openenv.core import GenericEnvClient

from rewardbox.envserver.client import RewardboxEnv
from rewardbox.envserver.models import RewardboxAction, ToolCallAction
from rewardbox.policy.base import ChatRequest
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.sandbox.base import ToolSpec

from .conftest import ADDRESS_TASK, CRASH_ON_START_TASK, CRASH_TOOL, RecordingSandbox, serve


def run(coro):
    return asyncio.run(coro)


async def _golden_episode(url: str, task) -> list:
    """Reset, every golden call as a structured tool call, then the final reply with the values to tell."""
    results = []
    async with RewardboxEnv(base_url=url) as env:
        results.append(await env.reset(task_uid=task.uid))
        for _server, tool, arguments in task.golden_interactions():
            results.append(
                await env.step(
                    RewardboxAction(tool_calls=[ToolCallAction(name=tool, arguments=arguments)])
                )
            )
        told = " ".join(str(v) for v in task.metadata.get("response_values", []))
        results.append(
            await env.step(RewardboxAction(message=f"All done. {told}", end_episode=True))
        )
        results.append(await env.state())
    return results


def test_a_golden_episode_gets_reward_1(served):
    task = served.services.tasks[ADDRESS_TASK]
    *steps, state = run(_golden_episode(served.url, task))
    first, last = steps[0], steps[-1]
    assert first.observation.status == "awaiting_action" and not first.done and first.reward is None
    assert first.observation.query == task.query
    assert [m["role"] for m in first.observation.messages][-1] == "user"
    assert {t["function"]["name"] for t in first.observation.tools} >= {
        "find_customer",
        "update_shipping_address",
    }
    for middle in steps[1:-1]:
        assert middle.observation.new_messages[-1]["role"] == "tool" and middle.reward is None
    assert "ADR-2017-W" in steps[-2].observation.new_messages[-1]["content"]
    assert (last.done, last.reward, last.observation.status, last.observation.passed) == (
        True,
        1.0,
        "finished",
        True,
    )
    assert last.observation.termination_reason == "done" and last.observation.system_error is None
    assert (
        state.task_uid == ADDRESS_TASK
        and state.step_count == len(steps) - 1
        and state.status == "finished"
    )


def test_a_golden_episode_of_raw_model_text_gets_reward_1_through_the_generic_client(served):
    """The oracle policy's raw text, parsed by the project's interpreter; plain-dict client."""
    task = next(
        t
        for t in served.services.tasks.values()
        if t.dataset == "hotel" and len(t.golden_interactions()) >= 2
    )
    oracle = GoldenReplayPolicy()

    async def play():
        async with GenericEnvClient(base_url=served.url) as env:
            result = await env.reset(task_uid=task.uid)
            tools = [
                ToolSpec(
                    t["function"]["name"], t["function"]["description"], t["function"]["parameters"]
                )
                for t in result.observation["tools"]
            ]
            while not result.done:
                request = ChatRequest(
                    messages=result.observation["messages"], tools=tools, task=task
                )
                result = await env.step({"raw_text": oracle.next_text(request)})
            return result

    last = run(play())
    assert (last.reward, last.observation["status"], last.observation["passed"]) == (
        1.0,
        "finished",
        True,
    )


def test_a_null_episode_gets_reward_0(served):
    async def play():
        async with GenericEnvClient(base_url=served.url) as env:
            await env.reset(task_uid=ADDRESS_TASK)
            return await env.step({"message": "I cannot help with that.", "end_episode": True})

    last = run(play())
    assert last.done and last.reward == 0.0
    assert last.observation["status"] == "finished" and last.observation["passed"] is False
    assert last.observation["system_error"] is None


def test_concurrent_sessions_do_not_see_each_others_writes(served):
    """A writes the new address in its sandbox; B, open at the same time on the same task, still reads the old one."""
    task = served.services.tasks[ADDRESS_TASK]
    (_s, find, find_args), (_s2, update, update_args) = task.golden_interactions()
    read = RewardboxAction(
        tool_calls=[
            ToolCallAction(name="get_order", arguments={"order_id": update_args["order_id"]})
        ]
    )

    def address_id(result) -> str:
        return json.loads(result.observation.new_messages[-1]["content"])["shipping_address"][
            "address_id"
        ]

    async def play():
        async with RewardboxEnv(base_url=served.url) as a, RewardboxEnv(base_url=served.url) as b:
            await asyncio.gather(a.reset(task_uid=task.uid), b.reset(task_uid=task.uid))
            await a.step(
                RewardboxAction(tool_calls=[ToolCallAction(name=find, arguments=find_args)])
            )
            await a.step(
                RewardboxAction(tool_calls=[ToolCallAction(name=update, arguments=update_args)])
            )
            read_a, read_b = await asyncio.gather(a.step(read), b.step(read))
            end_a, end_b = await asyncio.gather(
                a.step(RewardboxAction(message="Updated.", end_episode=True)),
                b.step(RewardboxAction(message="I cannot help with that.", end_episode=True)),
            )
            return address_id(read_a), address_id(read_b), end_a.reward, end_b.reward

    seen_a, seen_b, reward_a, reward_b = run(play())
    assert seen_a == update_args["address_id"] != seen_b
    assert (reward_a, reward_b) == (1.0, 0.0)


def test_a_sandbox_crash_mid_episode_is_a_system_error_not_a_reward_of_0(crashing_server):
    task = crashing_server.services.tasks[ADDRESS_TASK]
    (_s, find, find_args), (_s2, update, update_args) = task.golden_interactions()
    assert update == CRASH_TOOL

    async def play():
        async with RewardboxEnv(base_url=crashing_server.url) as env:
            await env.reset(task_uid=task.uid)
            await env.step(
                RewardboxAction(tool_calls=[ToolCallAction(name=find, arguments=find_args)])
            )
            return await env.step(
                RewardboxAction(tool_calls=[ToolCallAction(name=update, arguments=update_args)])
            )

    last = run(play())
    assert last.done and last.reward is None
    assert (
        last.observation.status == "system_error"
        and last.observation.termination_reason == "system_error"
    )
    assert last.observation.system_error.startswith("sandbox: injected")
    assert not any(
        "injected" in str(m.get("content")) for m in last.observation.messages
    )  # never shown as text


def test_a_sandbox_that_fails_to_start_is_a_system_error_at_reset(crashing_server):
    async def play():
        async with RewardboxEnv(base_url=crashing_server.url) as env:
            first = await env.reset(task_uid=CRASH_ON_START_TASK)
            with pytest.raises(RuntimeError, match="no episode is waiting for an action"):
                await env.step(RewardboxAction(message="hello"))
            return first

    first = run(play())
    assert first.done and first.reward is None and first.observation.status == "system_error"
    assert "died during start" in first.observation.system_error


def test_caller_errors_are_error_responses_and_the_session_goes_on(served):
    async def play():
        async with RewardboxEnv(base_url=served.url) as env:
            with pytest.raises(RuntimeError, match="unknown task 'nope'"):
                await env.reset(task_uid="nope")
            with pytest.raises(RuntimeError, match="call reset"):
                await env.step(RewardboxAction(message="hello"))
            result = await env.reset(task_uid=ADDRESS_TASK)
            await env._send(
                {"type": "step", "data": {"message": "  "}}
            )  # fails validation on the server
            invalid = await env._receive()
            unknown = await env.step(
                RewardboxAction(tool_calls=[ToolCallAction(name="drop_tables")])
            )
            return result, invalid, unknown

    result, invalid, unknown = run(play())
    assert invalid["type"] == "error" and invalid["data"]["code"] == "VALIDATION_ERROR"
    assert "needs tool_calls" in invalid["data"]["errors"][0]["msg"]
    assert result.observation.status == "awaiting_action"
    assert (
        unknown.observation.new_messages[-1]["content"]
        == "Error: function 'drop_tables' does not exist"
    )
    assert (
        unknown.observation.status == "awaiting_action"
    )  # a policy failure: shown to the agent, episode goes on


def test_http_routes_list_tasks_and_schemas(served):
    tasks = httpx.get(f"{served.url}/tasks", timeout=10).json()
    assert {t["uid"] for t in tasks} == set(served.services.tasks)
    schema = httpx.get(f"{served.url}/schema", timeout=10).json()
    assert {"tool_calls", "message", "raw_text", "end_episode"} <= set(
        schema["action"]["properties"]
    )
    assert {"status", "system_error", "tools", "new_messages"} <= set(
        schema["observation"]["properties"]
    )
    assert httpx.get(f"{served.url}/health", timeout=10).status_code == 200


def test_a_normal_client_close_logs_no_server_error(served, caplog):
    """OpenEnv's /ws closes a finished session twice; the app's middleware keeps that out of the error log."""
    import logging

    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(caplog.handler)
    try:

        async def play():
            async with RewardboxEnv(base_url=served.url) as env:
                await env.reset(task_uid=ADDRESS_TASK)

        run(play())
        time.sleep(0.5)  # the server thread finishes the session after the client has gone
    finally:
        logger.removeHandler(caplog.handler)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_environment_also_runs_in_process_without_a_server(served):
    """The sync reset/step (a private event loop) play the same episode; close tears the running sandbox down."""
    from dataclasses import replace

    from rewardbox.envserver.environment import RewardboxEnvironment

    closed: list[bool] = []
    make = served.services.sandbox_factory
    task = served.services.tasks[ADDRESS_TASK]
    env = RewardboxEnvironment(
        replace(served.services, sandbox_factory=lambda: RecordingSandbox(make(), closed))
    )
    try:
        first = env.reset(task_uid=task.uid)
        assert first.status == "awaiting_action" and first.tools
        for _server, tool, arguments in task.golden_interactions():
            env.step(RewardboxAction(tool_calls=[ToolCallAction(name=tool, arguments=arguments)]))
        last = env.step(RewardboxAction(message="Done.", end_episode=True))
        assert (last.status, last.reward) == ("finished", 1.0)
        env.reset(task_uid=task.uid)  # a second episode, left running: close() must end it
        assert closed == [True, False]
    finally:
        env.close()
    assert closed == [True, True]


def test_a_client_that_disconnects_mid_episode_gets_its_sandbox_torn_down(served):
    from dataclasses import replace

    closed: list[bool] = []
    make = served.services.sandbox_factory
    services = replace(served.services, sandbox_factory=lambda: RecordingSandbox(make(), closed))
    server = serve(services)
    url = next(server).url
    try:

        async def play():
            async with RewardboxEnv(base_url=url) as env:
                await env.reset(task_uid=ADDRESS_TASK)
                assert closed == [False]

        run(play())
        deadline = time.monotonic() + 10  # the server ends the session after the client has gone
        while closed != [True] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert closed == [True]
    finally:
        server.close()


def test_http_step_and_reset_caller_errors_are_4xx_with_a_message_not_500(served):
    """HTTP /step never has an episode waiting (a fresh environment per request): 409 saying to use /ws;
    an unknown task 404; trial < 0 422. No traceback, the message in ``detail``."""
    step = httpx.post(f"{served.url}/step", json={"action": {"message": "hello"}}, timeout=30)
    assert step.status_code == 409
    assert "call reset" in step.json()["detail"] and "/ws" in step.json()["detail"]
    closed = httpx.post(
        f"{served.url}/step", json={"action": {"message": "hi"}, "episode_id": "gone"}, timeout=30
    )
    assert closed.status_code == 409 and "Traceback" not in closed.text
    unknown = httpx.post(f"{served.url}/reset", json={"task_uid": "nope"}, timeout=30)
    assert unknown.status_code == 404 and "unknown task 'nope'" in unknown.json()["detail"]
    for bad in (-1, 1.5, "2", True):
        refused = httpx.post(
            f"{served.url}/reset", json={"task_uid": ADDRESS_TASK, "trial": bad}, timeout=30
        )
        assert (
            refused.status_code == 422
            and "trial must be an integer >= 0" in refused.json()["detail"]
        ), bad
    assert (
        httpx.post(
            f"{served.url}/reset", json={"task_uid": ADDRESS_TASK, "trial": 3}, timeout=30
        ).status_code
        == 200
    )


def test_bad_trial_and_undeclared_arguments_reach_the_ws_client(served):
    async def play():
        async with RewardboxEnv(base_url=served.url) as env:
            with pytest.raises(RuntimeError, match="trial must be an integer >= 0, got -1"):
                await env.reset(task_uid=ADDRESS_TASK, trial=-1)
            await env.reset(task_uid=ADDRESS_TASK, trial=0)
            extra = await env.step(
                RewardboxAction(
                    tool_calls=[
                        ToolCallAction(
                            name="find_customer",
                            arguments={"email": "ana.diaz@mail.test", "include_deleted": True},
                        )
                    ]
                )
            )
            return extra

    extra = run(play())
    output = extra.observation.new_messages[-1]["content"]
    assert (
        output.startswith("Error:")
        and "unexpected argument 'include_deleted'" in output
        and "email" in output
    )
    assert (
        extra.observation.status == "awaiting_action"
    )  # a policy failure the agent sees; the episode goes on
