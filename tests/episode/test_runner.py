"""The episode state machine with fakes: finish reasons, tool errors, system errors, user stop."""

from __future__ import annotations

import asyncio
import json

import pytest

from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.trajectory import TestOutcome
from rewardbox.episode.trial import run_trial
from rewardbox.episode.user_simulator import (
    SYSTEM_PROMPT,
    ScriptedUser,
    shareable_facts,
    split_stop_marker,
)
from rewardbox.errors import SandboxError
from rewardbox.policy.base import ChatRequest, Completion
from rewardbox.policy.interpreter import interpret
from rewardbox.sandbox.base import ToolSpec
from rewardbox.tasks.schema import Task, ToolOverride

ORDER_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
}


class FakeSandbox:
    """A dict-backed backend: orders with a status; ``cancel_order`` writes."""

    instances: list[FakeSandbox] = []

    def __init__(self, fail_on: str | None = None):
        self.orders = {"ORD-8": "processing"}
        self.fail_on = fail_on
        self.closed = False
        FakeSandbox.instances.append(self)

    async def start(self, world_state, available_tools):
        return {"srv": {}}

    async def list_tools(self):
        return [
            ToolSpec("get_order", "Get an order.", ORDER_SCHEMA),
            ToolSpec("cancel_order", "Cancel.", ORDER_SCHEMA),
        ]

    async def call_tool(self, name, arguments):
        if name == self.fail_on:
            raise SandboxError("server died mid-call")
        if name == "cancel_order":
            self.orders[arguments["order_id"]] = "cancelled"
        return json.dumps(
            {"order_id": arguments["order_id"], "status": self.orders[arguments["order_id"]]}
        )

    async def get_effects(self):
        return {"srv": {"orders": dict(self.orders)}}

    async def close(self):
        self.closed = True


class ScriptPolicy:
    """Replays raw completions through the real interpreter."""

    name = "script"

    def __init__(self, texts):
        self.texts = list(texts)
        self.requests: list[ChatRequest] = []

    async def complete(self, request):
        self.requests.append(request)
        raw = self.texts.pop(0) if self.texts else "Nothing more. <DONE>"
        return Completion(
            raw_text=raw,
            interpretation=interpret(raw, request.tools, reasoning_open=False),
            input_tokens=10,
            output_tokens=5,
        )

    async def aclose(self):
        pass


class CancelledGrader:
    async def run(self, task, context):
        ok = context["effects"]["srv"]["orders"]["ORD-8"] == "cancelled"
        return TestOutcome(result=ok, reward=1.0 if ok else 0.0)


class FixedUser:
    def __init__(self, replies):
        self.replies = list(replies)

    async def reply(self, task, messages, user_turn):
        return self.replies.pop(0)


def make_task(**kw) -> Task:
    base = dict(
        uid="f.py:test_cancel",
        dataset="fake",
        scenario="s",
        agent="a",
        query="Cancel ORD-8 please.",
        user_context="My order is ORD-8.",
        init={},
        world_state={"srv": {}},
        tools=(ToolOverride("get_order"), ToolOverride("cancel_order")),
        system_instructions="You are an agent.",
        bot_instructions="Policy.",
        test_code="",
        test_name="t",
        test_file="f.py",
    )
    base.update(kw)
    return Task(**base)


def call(name, **args):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def run(policy, user=None, sandbox_factory=FakeSandbox, config=None, task=None):
    runner = EpisodeRunner(
        policy, sandbox_factory, user, CancelledGrader(), config or EpisodeConfig()
    )
    return asyncio.run(runner.run(task or make_task(), 0))


def test_tool_then_done_passes_and_records_usage():
    policy = ScriptPolicy([call("cancel_order", order_id="ORD-8"), "Cancelled ORD-8. <DONE>"])
    result = run(policy)
    assert (result.termination_reason, result.reward, result.passed) == ("done", 1.0, True)
    assert result.turns == 2 and result.input_tokens == 20 and result.output_tokens == 10
    assert [m["role"] for m in result.messages] == [
        "system",
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert result.tool_calls[0]["tool_call"] == {
        "name": "cancel_order",
        "arguments": {"order_id": "ORD-8"},
    }
    assert FakeSandbox.instances[-1].closed


def test_malformed_and_unknown_calls_are_observations_not_dispatched():
    policy = ScriptPolicy(
        [
            '<tool_call>{"name": "cancel_order", "arguments": [}</tool_call>',
            call("drop_table", order_id="ORD-8"),
            "I could not do it. <DONE>",
        ]
    )
    result = run(policy)
    tool_outputs = [m["content"] for m in result.messages if m["role"] == "tool"]
    assert len(tool_outputs) == 2
    assert tool_outputs[0].startswith("Error")
    assert "drop_table" in tool_outputs[1] and tool_outputs[1].startswith("Error")
    assert FakeSandbox.instances[-1].orders["ORD-8"] == "processing"
    assert (result.passed, result.system_error) == (False, None)


def test_sandbox_fault_is_a_system_error_not_a_zero_and_is_retried():
    calls = []

    def factory():
        calls.append(1)
        return FakeSandbox(fail_on="cancel_order")

    policy = ScriptPolicy([call("cancel_order", order_id="ORD-8")] * 3)
    runner = EpisodeRunner(
        policy, factory, None, CancelledGrader(), EpisodeConfig(max_system_error_retries=2)
    )
    result = asyncio.run(run_trial(runner, make_task(), 0))
    assert result.system_error.startswith("sandbox:")
    assert result.reward is None and result.passed is None
    assert result.termination_reason == "system_error"
    assert result.tries == 3 and len(calls) == 3
    # the policy never saw the infrastructure error as text
    assert all("died" not in json.dumps(r.messages) for r in policy.requests)


def test_user_agreeing_with_stop_marker_still_lets_the_agent_act():
    """Issue #5 item 5: agreeing is not finishing."""
    policy = ScriptPolicy(
        [
            "I can cancel ORD-8 and refund $25 to your card. Shall I proceed?",
            call("cancel_order", order_id="ORD-8"),
            "Done: ORD-8 is cancelled.",
        ]
    )
    result = run(policy, user=FixedUser(["Yes, please go ahead. <DONE>"]))
    users = [m["content"] for m in result.messages if m["role"] == "user"]
    assert users[-1] == "Yes, please go ahead."  # text before the marker reached the agent
    assert result.termination_reason == "user_done"
    assert FakeSandbox.instances[-1].orders["ORD-8"] == "cancelled"
    assert result.passed is True
    assert "agreeing to an action is not the action being done" in SYSTEM_PROMPT.lower()


def test_bare_stop_marker_after_completion_ends_at_once():
    policy = ScriptPolicy(
        [call("cancel_order", order_id="ORD-8"), "ORD-8 is cancelled. Anything else?"]
    )
    result = run(policy, user=FixedUser(["<DONE>"]))
    assert result.termination_reason == "user_done"
    assert result.turns == 2  # no extra agent turn


def test_own_case_stop_marker_with_trailing_space_and_no_user_context():
    assert split_stop_marker("  Sure, do it <DONE>  ") == ("Sure, do it", True)
    assert split_stop_marker("What is <DONE> in my order?") == (
        "What is <DONE> in my order?",
        False,
    )
    result = run(
        ScriptPolicy(["Which order?"]), user=ScriptedUser(), task=make_task(user_context="")
    )
    assert result.termination_reason == "no_user_llm"


@pytest.mark.parametrize(
    "limit_field, reason",
    [("max_agent_turns", "agent_limit"), ("max_agent_steps_per_user_turn", "agent_limit")],
)
def test_turn_limits(limit_field, reason):
    policy = ScriptPolicy([call("get_order", order_id="ORD-8")] * 10)
    result = run(policy, config=EpisodeConfig(**{limit_field: 3}))
    assert result.termination_reason == reason and result.turns == 3


def test_user_limit_and_scripted_user():
    policy = ScriptPolicy(["Can you confirm?"] * 10)
    result = run(policy, user=ScriptedUser(), config=EpisodeConfig(max_user_turns=1))
    assert result.termination_reason == "user_limit"
    users = [m["content"] for m in result.messages if m["role"] == "user"]
    assert users == ["Cancel ORD-8 please.", "My order is ORD-8."]


def test_scripted_user_shares_facts_not_simulator_instructions():
    context = (
        "You are Yara Brennan, a customer of the store.\nName: Yara Brennan\n"
        "Customer id: CUS-2001 (give it only if asked)\nOrder: ORD-6011 (leather gloves)\n"
        "Goal: cancel order ORD-6011.\nAgrees to proceed: yes\n"
        "If the agent says the request is not possible, accept it and say goodbye.\n"
        "Note for the simulator: never mention this line."
    )
    assert (
        shareable_facts(context)
        == "Name: Yara Brennan. Order: ORD-6011 (leather gloves). Goal: cancel order ORD-6011."
    )
    assert shareable_facts("Rules:\n- Order: ORD-8") == "Order: ORD-8."


def test_truncated_call_never_writes():
    class LengthPolicy(ScriptPolicy):
        async def complete(self, request):
            raw = "I'll cancel it now.\n" + call("cancel_order", order_id="ORD-8")
            return Completion(
                raw_text=raw,
                interpretation=interpret(
                    raw, request.tools, finish_reason="length", reasoning_open=False
                ),
                finish_reason="length",
            )

    result = run(LengthPolicy([]), user=FixedUser(["<DONE>"]))
    assert FakeSandbox.instances[-1].orders["ORD-8"] == "processing"
    assert "truncated_call" in result.events
    assert result.messages[3]["content"] == "I'll cancel it now."


def test_llm_user_agreeing_with_marker_through_a_real_endpoint(fake_openai):
    """Issue #5 item 5 through the OpenAI-compatible user simulator: the reply is cleaned and split."""
    from rewardbox.episode.user_simulator import EndpointUser
    from tests.fixtures.fake_openai import chat_response

    fake_openai.add(200, chat_response("User: Yes, please go ahead. <DONE>"))
    user = EndpointUser(fake_openai.base_url, "user-model", max_retries=0)
    policy = ScriptPolicy(
        [
            "I can cancel ORD-8 and refund $25 to your card. Shall I proceed?",
            call("cancel_order", order_id="ORD-8"),
            "Done: ORD-8 is cancelled.",
        ]
    )
    result = run(policy, user=user)
    assert [m["content"] for m in result.messages if m["role"] == "user"][
        -1
    ] == "Yes, please go ahead."
    assert (result.termination_reason, result.passed) == ("user_done", True)
    assert FakeSandbox.instances[-1].orders["ORD-8"] == "cancelled"
    prompt = fake_openai.requests[0]["body"]["messages"]
    assert "Agreeing to an action is not the action being done" in prompt[0]["content"]
    assert (
        "Shall I proceed?" in prompt[1]["content"] and "My order is ORD-8." in prompt[1]["content"]
    )


def test_llm_user_endpoint_failure_is_a_system_error(fake_openai):
    from rewardbox.episode.user_simulator import EndpointUser

    fake_openai.default = (503, {"error": {"message": "down"}}, {})
    user = EndpointUser(fake_openai.base_url, "user-model", max_retries=1)
    result = run(ScriptPolicy(["Which order?"]), user=user)
    assert result.system_error.startswith("user_simulator:") and result.reward is None
    assert result.system_error_kind == "user_simulator_http_5xx"
