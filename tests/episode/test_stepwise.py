"""The step-wise episode: the runner's loop with the agent's turns supplied from outside."""

from __future__ import annotations

import asyncio
import json

import pytest

from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.stepwise import (
    AwaitingAction,
    EpisodeClosedError,
    Finished,
    StepwiseEpisode,
    completion_from_calls,
    completion_from_text,
)
from rewardbox.episode.trajectory import TestOutcome
from rewardbox.sandbox.base import ToolSpec
from rewardbox.tasks.schema import Task

SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
}


class DictSandbox:
    def __init__(self):
        self.status, self.closed = "processing", False

    async def start(self, world_state, available_tools):
        return {}

    async def list_tools(self):
        return [ToolSpec("cancel_order", "Cancel an order.", SCHEMA)]

    async def call_tool(self, name, arguments):
        self.status = "cancelled"
        return json.dumps({"order_id": arguments["order_id"], "status": self.status})

    async def get_effects(self):
        return {"srv": {"status": self.status}}

    async def close(self):
        self.closed = True


class StatusGrader:
    async def run(self, task, context):
        ok = context["effects"]["srv"]["status"] == "cancelled"
        return TestOutcome(result=ok, reward=float(ok))


def _task() -> Task:
    return Task(
        uid="t:1",
        dataset="d",
        scenario="s",
        agent="a",
        query="Cancel ORD-1.",
        user_context="",
        init={},
        world_state={"srv": {}},
        tools=(),
        system_instructions="Be brief.",
        bot_instructions="",
        test_code="",
        test_name="t",
        test_file="t.py",
    )


def _episode(sandboxes, **limits) -> StepwiseEpisode:
    def factory():
        sandboxes.append(DictSandbox())
        return sandboxes[-1]

    return StepwiseEpisode(
        _task(),
        0,
        sandbox_factory=factory,
        user_simulator=None,
        grader=StatusGrader(),
        config=EpisodeConfig(**limits),
    )


def test_a_turn_limit_ends_and_grades_the_episode_without_asking_again():
    sandboxes: list[DictSandbox] = []

    async def play():
        episode = _episode(sandboxes, max_agent_turns=1)
        first = await episode.start()
        assert (
            isinstance(first, AwaitingAction)
            and first.request.messages[-1]["content"] == "Cancel ORD-1."
        )
        return await episode.act(
            completion_from_calls("", [("cancel_order", {"order_id": "ORD-1"})], first.request)
        )

    end = asyncio.run(play())
    assert isinstance(end, Finished)
    assert (end.result.termination_reason, end.result.reward, end.result.system_error) == (
        "agent_limit",
        1.0,
        None,
    )
    assert sandboxes[0].closed


def test_raw_text_goes_through_the_interpreter_and_done_ends_the_episode():
    sandboxes: list[DictSandbox] = []

    async def play():
        episode = _episode(sandboxes)
        first = await episode.start()
        raw = '<tool_call>{"name": "cancel_order", "arguments": {"order_id": "ORD-1"}}</tool_call>'
        second = await episode.act(completion_from_text(raw, first.request))
        assert isinstance(second, AwaitingAction) and second.request.messages[-1]["role"] == "tool"
        return await episode.act(completion_from_text("Cancelled. <DONE>", second.request))

    end = asyncio.run(play())
    assert isinstance(end, Finished) and (end.result.termination_reason, end.result.reward) == (
        "done",
        1.0,
    )


def test_close_mid_episode_tears_the_sandbox_down_and_refuses_further_actions():
    sandboxes: list[DictSandbox] = []

    async def play():
        episode = _episode(sandboxes)
        first = await episode.start()
        await episode.close()
        assert sandboxes[0].closed
        with pytest.raises(EpisodeClosedError):
            await episode.act(completion_from_text("Hello.", first.request))

    asyncio.run(play())
