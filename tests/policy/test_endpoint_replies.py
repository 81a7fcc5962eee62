"""Issue 24 items 2-3 and issue 27's malformed replies: how EndpointPolicy reads a reply (fake server on loopback).

- a turn that used its whole ``max_completion_tokens`` is ``length`` whatever reason the server gave;
  the server's own reason is kept on the ``AgentTurn``;
- an HTTP 400 "maximum context length" is never re-sent with the same body: capped to the room the
  reply states, or the episode ends as ``context_limit`` (graded, never a system error);
- a reply that is not a chat completion is a retried, counted system error naming the URL and the parse error.
"""

from __future__ import annotations

import asyncio

import pytest

from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.trial import run_trial
from rewardbox.errors import ContextLengthError, EndpointError
from rewardbox.policy.base import ChatRequest
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.endpoint import EndpointPolicy
from rewardbox.policy.endpoint_reply import finish_reason_of
from tests.fixtures.verl_fakes import (
    SANDBOXES,
    OrderSandbox,
    StatusGrader,
    episode_config,
    order_task,
)

from .conftest import chat_response, complete_once

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "cancel_order", "arguments": '{"order_id": "ORD-1"}'},
}
VLLM_TOO_LARGE = (
    "'max_tokens' or 'max_completion_tokens' is too large: 10. This model's maximum context length is "
    "32 tokens and your request has {n} input tokens (10 > 32 - {n}). None"
)
VLLM_OLD = (
    "This model's maximum context length is 32 tokens. However, you requested 40 tokens (30 in the "
    "messages, 10 in the completion). Please reduce the length of the messages or completion."
)


def _policy(fake, **kw) -> EndpointPolicy:
    kw.setdefault("backoff_max_s", 0.01)
    return EndpointPolicy(
        fake.base_url, "fake-model", api_key_env="REWARDBOX_TEST_NO_SUCH_KEY", timeout_s=5, **kw
    )


def _usage(completion_tokens: int) -> dict:
    return {
        "prompt_tokens": 30,
        "completion_tokens": completion_tokens,
        "total_tokens": 30 + completion_tokens,
    }


def _request(tools, max_new_tokens: int = 64) -> ChatRequest:
    return ChatRequest(
        messages=[{"role": "user", "content": "Cancel ORD-1."}],
        tools=tools,
        max_new_tokens=max_new_tokens,
        temperature=0.0,
    )


def _episode(policy, **limits):
    """One episode of the order task through the real runner and trial retries (sandbox and grader faked)."""
    runner = EpisodeRunner(
        policy, lambda: OrderSandbox(), None, StatusGrader(), episode_config(**limits)
    )

    async def go():
        try:
            return await run_trial(runner, order_task(), 0)
        finally:
            await policy.aclose()

    return asyncio.run(go())


def _sent_max_tokens(fake) -> list[int]:
    return [
        r["body"]["max_completion_tokens"]
        for r in fake.requests
        if r["path"].endswith("/chat/completions")
    ]


# -- item 2: the token limit -----------------------------------------------------------------------------------


def test_issue24_item2_tool_calls_at_the_token_limit_is_length_and_the_raw_reason_is_kept(
    fake_openai, retail_tools
):
    fake_openai.add(
        200, chat_response("", tool_calls=[CALL], finish_reason="tool_calls", usage=_usage(64))
    )
    completion = complete_once(_policy(fake_openai), _request(retail_tools))
    assert (completion.finish_reason, completion.raw_finish_reason) == ("length", "tool_calls")
    assert (
        completion.interpretation.tool_calls == ()
        and "truncated_call" in completion.interpretation.events
    )


def test_issue24_item2_through_an_episode_truncated_counted_call_not_run(fake_openai):
    fake_openai.add(
        200, chat_response("", tool_calls=[CALL], finish_reason="tool_calls", usage=_usage(64))
    )
    SANDBOXES.clear()
    result = _episode(_policy(fake_openai), max_new_tokens=64)
    turn = result.agent_turns[0]
    assert (turn.finish_reason, turn.raw_finish_reason) == ("length", "tool_calls")
    assert result.to_row()["truncated_turns"] == 1 and result.termination_reason != "done"
    assert SANDBOXES[-1].status == "processing" and result.reward == 0.0


@pytest.mark.parametrize(
    ("raw", "used", "budget", "expected"),
    [
        ("tool_calls", 64, 64, "length"),
        ("stop", 64, 64, "length"),
        ("stop", 70, 64, "length"),
        ("stop", 63, 64, "stop"),
        ("tool_calls", 12, 64, "stop"),
        ("length", 10, 64, "length"),
        ("stop", None, 64, "stop"),
        ("content_filter", 5, 64, "stop"),
    ],
)
def test_issue24_item2_the_finish_reason_rule(raw, used, budget, expected):
    assert finish_reason_of(raw, used, budget) == expected


def test_issue24_item2_the_capped_budget_is_the_one_compared(fake_openai, retail_tools):
    # capped to the room (2) after a refusal: 2 tokens used is the whole budget, so "length"
    fake_openai.add(
        400,
        {"error": {"message": VLLM_TOO_LARGE.format(n=30), "type": "BadRequestError", "code": 400}},
    )
    fake_openai.add(200, chat_response("Can", finish_reason="stop", usage=_usage(2)))
    completion = complete_once(_policy(fake_openai), _request(retail_tools, max_new_tokens=10))
    assert completion.finish_reason == "length" and _sent_max_tokens(fake_openai) == [10, 2]


# -- item 3: the context ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("message", [VLLM_TOO_LARGE.format(n=30), VLLM_OLD])
def test_issue24_item3_a_context_refusal_is_resent_once_capped_never_the_same_body(
    fake_openai, retail_tools, message
):
    # the given values: max_model_len 32, a 30-token prompt sent with max_tokens 10, 20 episodes
    for _ in range(20):
        fake_openai.add(
            400, {"error": {"message": message, "type": "BadRequestError", "code": 400}}
        )
        fake_openai.add(200, chat_response("Done. <DONE>", usage=_usage(2)))
    policy = _policy(fake_openai)

    async def go():
        try:
            return [
                await policy.complete(_request(retail_tools, max_new_tokens=10)) for _ in range(20)
            ]
        finally:
            await policy.aclose()

    completions = asyncio.run(go())
    assert (
        len(completions) == 20 and _sent_max_tokens(fake_openai) == [10, 2] * 20
    )  # 20 refused of 40, none repeated
    assert all(c.extra["attempts"] == 2 for c in completions)


def test_issue24_item3_no_room_ends_the_episode_as_context_limit_graded_not_a_system_error(
    fake_openai,
):
    fake_openai.add(400, {"error": {"message": VLLM_TOO_LARGE.format(n=32), "code": 400}})
    fake_openai.add(200, chat_response("never served"))
    result = _episode(_policy(fake_openai), max_new_tokens=10)
    assert result.termination_reason == "context_limit" and result.system_error is None
    assert result.reward == 0.0 and result.tries == 1 and len(fake_openai.requests) == 1


def test_issue24_item3_a_refusal_without_the_context_reads_the_servers_model_list(
    fake_openai, retail_tools
):
    fake_openai.models = [
        {"id": "other", "object": "model", "max_model_len": 4096},
        {"id": "fake-model", "object": "model", "max_model_len": 32},
    ]
    fake_openai.add(
        400, {"error": {"message": "This request has 28 input tokens, over the context length."}}
    )
    fake_openai.add(200, chat_response("Done. <DONE>", usage=_usage(3)))
    policy = _policy(fake_openai)
    completion = complete_once(policy, _request(retail_tools, max_new_tokens=10))
    assert (
        _sent_max_tokens(fake_openai) == [10, 4]
        and completion.interpretation.content == "Done. <DONE>"
    )
    assert [r["path"] for r in fake_openai.model_requests] == [
        "/v1/models"
    ] and policy.context_tokens == 32


def test_issue24_item3_an_unreadable_context_refusal_is_context_limit_after_one_request(
    fake_openai, retail_tools
):
    fake_openai.add(400, {"error": {"message": "context length exceeded"}})
    with pytest.raises(ContextLengthError, match="unknown tokens left"):
        complete_once(_policy(fake_openai), _request(retail_tools, max_new_tokens=10))
    assert len(fake_openai.requests) == 1  # no input count stated: nothing to compute a room from


def test_issue24_item3_a_configured_context_caps_every_request(fake_openai, retail_tools):
    fake_openai.add(200, chat_response("Done. <DONE>", usage=_usage(5)))
    policy = EndpointPolicy(
        **PolicyConfig(
            kind="endpoint", base_url=fake_openai.base_url, model="fake-model", context_tokens=32
        ).constructor_kwargs()
    )
    complete_once(policy, _request(retail_tools, max_new_tokens=4096))
    assert _sent_max_tokens(fake_openai) == [31]


def test_issue24_item3_a_second_refusal_after_capping_is_context_limit(fake_openai, retail_tools):
    fake_openai.add(400, {"error": {"message": VLLM_TOO_LARGE.format(n=30)}})
    fake_openai.add(400, {"error": {"message": VLLM_TOO_LARGE.format(n=31)}})
    with pytest.raises(ContextLengthError):
        complete_once(_policy(fake_openai), _request(retail_tools, max_new_tokens=10))
    assert _sent_max_tokens(fake_openai) == [10, 2]


# -- issue 27: malformed replies -------------------------------------------------------------------------------

BROKEN = b'{"id": "chatcmpl-1", "object": "chat.completion", "created": 0 "choices": []}'


def test_issue27_broken_json_is_retried_then_served(fake_openai, retail_tools):
    fake_openai.add(200, BROKEN)
    fake_openai.add(200, chat_response("Hello. <DONE>"))
    completion = complete_once(_policy(fake_openai), _request(retail_tools))
    assert (
        completion.interpretation.content == "Hello. <DONE>" and completion.extra["attempts"] == 2
    )


@pytest.mark.parametrize(
    "body",
    [
        BROKEN,
        {"object": "error", "detail": "upstream"},
        {"choices": []},
        {"choices": [{"index": 0, "finish_reason": "stop"}]},
    ],
)
def test_issue27_a_reply_that_is_not_a_completion_is_a_system_error_naming_url_and_cause(
    fake_openai, retail_tools, body
):
    fake_openai.default = (200, body, {})
    with pytest.raises(EndpointError) as info:
        complete_once(_policy(fake_openai, max_retries=2), _request(retail_tools))
    err = info.value
    assert err.error_kind == "endpoint_malformed_reply" and not err.permanent
    assert (
        fake_openai.base_url in str(err)
        and "after 3 attempt(s)" in str(err)
        and len(fake_openai.requests) == 3
    )
    if isinstance(body, bytes):
        assert "JSONDecodeError: Expecting ',' delimiter" in str(err)


def test_issue27_an_episode_on_broken_json_is_a_counted_system_error_never_a_crash(fake_openai):
    fake_openai.default = (200, BROKEN, {})
    result = _episode(_policy(fake_openai, max_retries=1), max_system_error_retries=1)
    assert result.system_error_kind == "endpoint_malformed_reply" and result.reward is None
    assert result.tries == 2 and result.retried_system_error_kinds == ["endpoint_malformed_reply"]
    assert len(fake_openai.requests) == 4  # 2 tries of 2 attempts


@pytest.mark.parametrize("body", [BROKEN, {"choices": []}])
def test_issue27_a_user_simulator_or_judge_reply_that_is_not_a_completion_is_a_system_error(
    fake_openai, body
):
    from rewardbox.episode.user_simulator import EndpointUser
    from rewardbox.errors import UserSimulatorError
    from rewardbox.grading.judge import Judge, JudgeConfig, JudgeException

    fake_openai.default = (200, body, {})
    user = EndpointUser(
        fake_openai.base_url, "user-model", api_key_env="REWARDBOX_TEST_NO_SUCH_KEY", max_retries=0
    )
    with pytest.raises(UserSimulatorError) as info:
        asyncio.run(user.reply(order_task(user_context="Wants ORD-1 cancelled."), [], 1))
    assert (
        info.value.error_kind == "user_simulator_malformed_reply"
        and fake_openai.base_url in str(info.value)
    )
    judge = Judge(
        JudgeConfig(base_url=fake_openai.base_url, model="judge", timeout_s=2.0, max_retries=0)
    )
    with pytest.raises(JudgeException) as info:
        judge.text_yesno("ORD-1 is cancelled.", "Was the order cancelled?")
    assert info.value.error_kind == "judge_malformed_reply" and fake_openai.base_url in str(
        info.value
    )
