"""Scripted policies (golden replay, null) and the policy factory/config."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from rewardbox.policy import PolicyConfig, build_policy
from rewardbox.policy.base import ChatRequest
from rewardbox.policy.endpoint import EndpointPolicy
from rewardbox.policy.scripted import GoldenReplayPolicy, NullPolicy
from rewardbox.tasks.schema import Task


def _task(interactions, response_values=()) -> Task:
    return Task(
        uid="t.py:test_one",
        dataset="retail",
        scenario="retail",
        agent="think",
        query="Change my zip.",
        user_context="",
        init={},
        tools=(),
        system_instructions="",
        bot_instructions="",
        test_code="",
        test_name="test_one",
        test_file="t.py",
        world_state={"retail": {"golden_test_case": {"tool_interactions": interactions}}},
        metadata={"response_values": list(response_values)},
    )


def _complete(policy, request):
    return asyncio.run(policy.complete(request))


def test_golden_replay_emits_each_call_then_answers(retail_tools):
    task = _task(
        [
            {"tool": "get_order", "parameters": {"order_id": "ORD-3"}},
            {"tool": "update_address", "parameters": {"order_id": "ORD-3", "zip": "10001"}},
        ],
        response_values=["10001", 42],
    )
    policy = GoldenReplayPolicy()
    messages = [{"role": "user", "content": task.query}]
    seen = []
    for _ in range(3):
        completion = _complete(
            policy, ChatRequest(messages=list(messages), tools=retail_tools, task=task)
        )
        interp = completion.interpretation
        assert (
            interp.errors == () and completion.output_tokens == 0 and completion.extra["scripted"]
        )
        if not interp.tool_calls:
            break
        call = interp.tool_calls[0]
        seen.append((call.name, call.arguments))
        messages += [
            {"role": "assistant", "content": ""},
            {"role": "tool", "tool_call_id": call.id, "content": "{}"},
        ]
    assert seen == [
        ("get_order", {"order_id": "ORD-3"}),
        ("update_address", {"order_id": "ORD-3", "zip": "10001"}),
    ]
    assert (
        interp.content.endswith("<DONE>") and "10001" in interp.content and "42" in interp.content
    )


def test_golden_replay_without_task_is_a_clear_error(retail_tools):
    with pytest.raises(ValueError, match="needs ChatRequest.task"):
        _complete(GoldenReplayPolicy(), ChatRequest(messages=[], tools=retail_tools))


def test_null_policy_does_nothing(retail_tools):
    completion = _complete(
        NullPolicy(), ChatRequest(messages=[{"role": "user", "content": "x"}], tools=retail_tools)
    )
    assert completion.interpretation.content == "I cannot help with that. <DONE>"
    assert completion.interpretation.tool_calls == () and completion.input_tokens == 0


def test_factory_builds_each_kind_and_config_errors_say_how_to_fix():
    assert isinstance(build_policy({"kind": "golden"}), GoldenReplayPolicy)
    assert isinstance(build_policy(PolicyConfig(kind="null")), NullPolicy)
    endpoint = build_policy(
        {"kind": "endpoint", "base_url": "http://127.0.0.1:1/v1", "model": "m", "timeout_s": 5}
    )
    assert (
        isinstance(endpoint, EndpointPolicy) and endpoint.temperature is None
    )  # each request's own temperature
    assert endpoint._timeout_s == 5 and endpoint.model == "m"
    asyncio.run(endpoint.aclose())
    with pytest.raises(ValueError, match="needs checkpoint_dir"):
        build_policy({"kind": "local"})
    cases = [
        ({"kind": "endpoint", "model": "m"}, "needs base_url"),
        ({"kind": "endpoint", "base_url": "localhost:8000", "model": "m"}, "must start with http"),
        ({"kind": "null", "tempreature": 1.0}, "tempreature"),
        (
            {"kind": "endpoint", "base_url": "http://h/v1", "model": "m", "temperature": 0},
            r"policy.temperature was removed: set episode.temperature .* or grpo.temperature",
        ),
        (
            {"kind": "local", "checkpoint_dir": "x", "max_new_tokens": 8},
            "policy.max_new_tokens was removed: set episode.max_new_tokens",
        ),
        ({"kind": "local", "checkpoint_dir": "x", "max_batch_size": 0}, "max_batch_size"),
    ]
    for config, fragment in cases:
        with pytest.raises(ValidationError, match=fragment):
            PolicyConfig.model_validate(config)
    with pytest.raises(FileNotFoundError, match="convert_gguf_to_safetensors"):
        build_policy({"kind": "local", "checkpoint_dir": "/nonexistent/ckpt"})
