"""EndpointPolicy against a fake OpenAI-compatible server on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from rewardbox.errors import EndpointError, InfrastructureError
from rewardbox.policy.base import ChatRequest
from rewardbox.policy.endpoint import EndpointPolicy
from rewardbox.policy.interpreter import interpret

from .conftest import chat_response, complete_once


def _policy(fake, **kw) -> EndpointPolicy:
    kw.setdefault("backoff_max_s", 0.01)
    return EndpointPolicy(
        fake.base_url, "fake-model", api_key_env="REWARDBOX_TEST_NO_SUCH_KEY", timeout_s=5, **kw
    )


def _request(tools, **kw) -> ChatRequest:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Where is ORD-9?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": {"order_id": "ORD-9"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c0", "name": "get_order", "content": "{}"},
    ]
    return ChatRequest(
        messages=messages, tools=tools, max_new_tokens=64, temperature=0.3, seed=7, **kw
    )


def test_structured_call_typed_usage_and_request_body(fake_openai, retail_tools):
    call = {
        "id": "call_A",
        "type": "function",
        "function": {"name": "update_address", "arguments": '{"order_id": "ORD-3", "zip": 10001}'},
    }
    fake_openai.add(200, chat_response("Updating.", tool_calls=[call], finish_reason="tool_calls"))
    completion = complete_once(_policy(fake_openai), _request(retail_tools))
    interp = completion.interpretation
    assert [(c.id, c.name, c.arguments) for c in interp.tool_calls] == [
        ("call_A", "update_address", {"order_id": "ORD-3", "zip": "10001"})
    ]
    assert interp.content == "Updating." and completion.finish_reason == "stop"
    assert (completion.input_tokens, completion.cached_input_tokens, completion.output_tokens) == (
        100,
        64,
        20,
    )
    body = fake_openai.requests[0]["body"]
    assert fake_openai.requests[0]["path"] == "/v1/chat/completions"
    assert body["parallel_tool_calls"] is False and body["seed"] == 7
    assert body["temperature"] == 0.3 and body["max_completion_tokens"] == 64
    params = body["tools"][2]["function"]["parameters"]
    assert params["additionalProperties"] is False and params["required"] == ["order_id", "zip"]
    sent_call = body["messages"][2]["tool_calls"][0]["function"]
    assert json.loads(sent_call["arguments"]) == {"order_id": "ORD-9"}  # a JSON string on the wire
    assert body["messages"][3] == {
        "role": "tool",
        "content": "{}",
        "tool_call_id": "c0",
        "name": "get_order",
    }
    # parser parity: the recorded raw text replays to the same calls
    replay = interpret(completion.raw_text, retail_tools, reasoning_open=False)
    assert [(c.name, c.arguments) for c in replay.tool_calls] == [
        (c.name, c.arguments) for c in interp.tool_calls
    ]


def test_text_calls_and_reasoning_content(fake_openai, retail_tools):
    content = 'Let me check. <tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-9"}}</tool_call>'
    reasoning = (
        'maybe <tool_call>{"name": "cancel_order", "arguments": {"order_id": "ORD-9"}}</tool_call>'
    )
    bad = {
        "id": "call_B",
        "type": "function",
        "function": {"name": "drop_table", "arguments": "{}"},
    }
    fake_openai.add(200, chat_response(content, tool_calls=[bad], reasoning=reasoning))
    completion = complete_once(_policy(fake_openai), _request(retail_tools))
    interp = completion.interpretation
    assert [(c.name, c.arguments) for c in interp.tool_calls] == [
        ("get_order", {"order_id": "ORD-9"})
    ]
    assert [(e.id, e.message) for e in interp.errors] == [
        ("call_B", "Error: function 'drop_table' does not exist")
    ]
    assert "cancel_order" in interp.reasoning and interp.content == "Let me check."
    assert completion.raw_text.startswith("<think>maybe ")
    replay = interpret(completion.raw_text, retail_tools, reasoning_open=False)
    assert [c.name for c in replay.tool_calls] == ["get_order"] and [
        e.name for e in replay.errors
    ] == ["drop_table"]


def test_length_limited_structured_call_is_not_run(fake_openai, retail_tools):
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "get_order", "arguments": '{"order_id": "OR'},
    }
    fake_openai.add(200, chat_response("", tool_calls=[call], finish_reason="length"))
    completion = complete_once(_policy(fake_openai), _request(retail_tools))
    assert completion.finish_reason == "length"
    assert completion.interpretation.tool_calls == () and completion.interpretation.errors == ()
    assert completion.interpretation.events == ("truncated_call",)


def test_503_then_200_is_retried(fake_openai, retail_tools):
    fake_openai.add(503, {"error": {"message": "overloaded"}})
    fake_openai.add(429, {"error": {"message": "slow down"}}, {"retry-after": "0"})
    fake_openai.add(200, chat_response("Hello. <DONE>"))
    completion = complete_once(_policy(fake_openai), _request(retail_tools))
    assert completion.interpretation.content == "Hello. <DONE>"
    assert completion.extra["attempts"] == 3 and len(fake_openai.requests) == 3


def test_500_forever_raises_endpoint_error_after_retries(fake_openai, retail_tools):
    fake_openai.default = (500, {"error": {"message": "boom"}}, {})
    with pytest.raises(EndpointError) as info:
        complete_once(_policy(fake_openai, max_retries=2), _request(retail_tools))
    assert isinstance(info.value, InfrastructureError)
    assert "HTTP 500 after 3 attempt(s)" in str(info.value)
    assert len(fake_openai.requests) == 3


def test_other_4xx_is_not_retried(fake_openai, retail_tools):
    fake_openai.add(
        400, {"error": {"message": "tools[2].function.parameters is not a valid schema"}}
    )
    fake_openai.add(200, chat_response("never served"))
    with pytest.raises(EndpointError, match="HTTP 400 after 1 attempt"):
        complete_once(_policy(fake_openai), _request(retail_tools))
    assert len(fake_openai.requests) == 1


def test_connection_refused_is_a_system_error(retail_tools):
    policy = EndpointPolicy(
        "http://127.0.0.1:9/v1", "m", timeout_s=1, max_timeout_retries=1, backoff_max_s=0.01
    )
    with pytest.raises(EndpointError, match="after 2 attempt"):
        complete_once(policy, _request(retail_tools))


def test_issue12_item1_endpoint_passes_its_template_state(fake_openai, retail_tools):
    # A server whose template opened <think> and that splits no reasoning out, cut by the budget.
    fake_openai.add(200, chat_response("Still weighing ORD-12 or", finish_reason="length"))
    completion = complete_once(_policy(fake_openai, reasoning_open=True), _request(retail_tools))
    interp = completion.interpretation
    assert (interp.reasoning, interp.content, interp.events) == (
        "Still weighing ORD-12 or",
        "",
        ("truncated_reasoning",),
    )
    # The default states a template that never opens reasoning: the same text is content.
    fake_openai.add(200, chat_response("Still weighing ORD-12 or", finish_reason="length"))
    plain = complete_once(_policy(fake_openai), _request(retail_tools)).interpretation
    assert (plain.reasoning, plain.content) == ("", "Still weighing ORD-12 or")


def test_issue12_item1_own_case_parser_split_unfinished_reasoning(fake_openai, retail_tools):
    # The server's reasoning parser moved an unfinished block to reasoning_content: content is empty.
    fake_openai.add(
        200, chat_response("", reasoning="Still weighing ORD-12 or", finish_reason="length")
    )
    completion = complete_once(_policy(fake_openai), _request(retail_tools))
    assert completion.interpretation.events == ("truncated_reasoning",)
    assert completion.raw_text == "<think>Still weighing ORD-12 or"  # no invented closing tag
    replay = interpret(
        completion.raw_text, retail_tools, finish_reason="length", reasoning_open=False
    )
    assert replay.events == ("truncated_reasoning",) and replay.content == ""


def test_issue12_item1_policy_config_carries_reasoning_open():
    from rewardbox.policy.config import PolicyConfig
    from rewardbox.policy.factory import build_policy

    cfg = PolicyConfig(
        kind="endpoint", base_url="http://127.0.0.1:9/v1", model="m", reasoning_open=True
    )
    policy = build_policy(cfg)
    assert policy.reasoning_open is True
    asyncio.run(policy.aclose())
