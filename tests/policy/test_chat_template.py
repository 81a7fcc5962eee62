"""The tool-calling chat template: layout, determinism, history rendering."""

from __future__ import annotations

import pytest

from rewardbox.policy.chat_template import (
    EXAMPLE_TOOL_NAME,
    ChatTemplateError,
    assistant_message,
    chat_template,
    prompt_opens_reasoning,
    render_prompt,
)
from rewardbox.policy.interpreter import interpret, render_tool_call

HISTORY = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "system", "content": "Policy: refunds need a reason."},
    {"role": "user", "content": "Where is ORD-9?"},
]


def test_system_tools_example_and_generation_prompt(retail_tools):
    prompt = render_prompt(HISTORY, retail_tools)
    assert prompt.startswith(
        "<|im_start|>system\nYou are a support agent.\n\nPolicy: refunds need a reason.\n\n# Tools"
    )
    assert prompt.count("<|im_start|>system") == 1
    # one compact signature line per tool, in order: required, optional (?) and enum parameters
    lines = [line for line in prompt.splitlines() if line.startswith("- ")]
    assert [line[2:].split("(")[0] for line in lines] == [t.name for t in retail_tools]
    assert lines[0] == "- get_order(order_id: string): The get_order tool."
    assert (
        "- set_quantity(order_id: string, quantity: integer, gift?: boolean, tags?: array, mode?: fast|slow, note?: value)"
        in prompt
    )
    assert (
        "Tool names: get_order, cancel_order, update_address, refund_order, list_stores, set_quantity."
        in prompt
    )
    # exactly one worked example turn with a neutral tool, answered in plain text (no <DONE> to copy)
    assert EXAMPLE_TOOL_NAME not in {t.name for t in retail_tools}
    assert prompt.count(f'<|im_start|>assistant\n<tool_call>{{"name": "{EXAMPLE_TOOL_NAME}"') == 1
    assert "<|im_start|>assistant\nDone: subscription SUB-311 is now paused.<|im_end|>" in prompt
    assert "<DONE>" not in prompt
    assert prompt.endswith("<|im_start|>user\nWhere is ORD-9?<|im_end|>\n<|im_start|>assistant\n")


def test_no_tools_means_plain_chatml():
    prompt = render_prompt([{"role": "user", "content": "hi"}], [])
    assert prompt == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_history_calls_results_and_determinism(retail_tools):
    raw = (
        '<think>hidden</think>Looking.\n<tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-9"}}'
        '</tool_call><tool_call>{"name": "nope"}</tool_call>'
    )
    interp = interpret(raw, retail_tools, reasoning_open=False)
    messages = HISTORY + [
        assistant_message(interp),
        {
            "role": "tool",
            "tool_call_id": "a",
            "name": "get_order",
            "content": '{"status": "shipped"}',
        },
        {
            "role": "tool",
            "tool_call_id": "b",
            "name": "nope",
            "content": "Error: function 'nope' does not exist",
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "x",
                    "type": "function",
                    "function": {"name": "get_order", "arguments": '{"order_id": "ORD-1"}'},
                }
            ],
        },
    ]
    prompt = render_prompt(messages, retail_tools)
    assert render_prompt(messages, retail_tools) == prompt
    turn = (
        "<|im_start|>assistant\nLooking.\n"
        + render_tool_call(interp.tool_calls[0])
        + '\n<tool_call>{"name": "nope"}</tool_call><|im_end|>\n'
    )
    assert turn in prompt and "hidden" not in prompt
    assert (
        '<|im_start|>user\n<result>\n{"status": "shipped"}\n</result>\n'
        "<result>\nError: function 'nope' does not exist\n</result><|im_end|>\n"
    ) in prompt
    # string arguments are decoded and rendered once, as an object
    assert (
        '<|im_start|>assistant\n<tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-1"}}</tool_call>'
        in prompt
    )
    assert (
        messages[-1]["tool_calls"][0]["function"]["arguments"] == '{"order_id": "ORD-1"}'
    )  # caller's copy untouched


def test_template_is_the_packaged_jinja_file():
    text = chat_template()
    assert "<|im_start|>" in text and "tool_call" in text and text == chat_template()


# --- issue #12 item 10: arguments the template cannot render ----------------------------------------------


def _with_call(arguments, index_pad: int = 0):
    pad = [{"role": "user", "content": f"turn {i}"} for i in range(index_pad)]
    call = {
        "id": "c0",
        "type": "function",
        "function": {"name": "get_order", "arguments": arguments},
    }
    return [*HISTORY, *pad, {"role": "assistant", "content": "", "tool_calls": [call]}]


@pytest.mark.parametrize("arguments", ["", "   ", '{"order_id": "ORD-9"', "{'order_id': 'ORD-9'}"])
def test_issue12_item10_empty_or_malformed_arguments_are_refused(retail_tools, arguments):
    messages = _with_call(arguments)
    with pytest.raises(
        ChatTemplateError, match=r"^message 3, tool call 0: arguments of 'get_order'"
    ) as info:
        render_prompt(messages, retail_tools)
    assert info.value.message_index == 3 and info.value.call_index == 0


@pytest.mark.parametrize(
    "arguments", ['["ORD-9"]', '"ORD-9"', "null", '{"amount": NaN}', 7, ["ORD-9"]]
)
def test_issue12_item10_own_case_arguments_that_are_not_an_object(retail_tools, arguments):
    with pytest.raises(ChatTemplateError, match=r"^message 5, tool call 0"):
        render_prompt(_with_call(arguments, index_pad=2), retail_tools)


def test_issue12_item10_valid_and_raw_calls_still_render(retail_tools):
    prompt = render_prompt(_with_call('{"order_id": "ORD-9"}'), retail_tools)
    assert (
        prompt.count(
            '<tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-9"}}</tool_call>'
        )
        == 1
    )
    # a malformed call the model wrote is replayed verbatim from ``raw``, not from its arguments
    raw_call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "", "arguments": {}},
        "raw": '{"name": get}',
    }
    messages = [*HISTORY, {"role": "assistant", "content": "", "tool_calls": [raw_call]}]
    assert '<tool_call>{"name": get}</tool_call>' in render_prompt(messages, retail_tools)


def test_issue12_item10_template_itself_refuses_non_object_strings(retail_tools):
    # A server rendering the stored template directly (tokenizer.apply_chat_template) gets the same refusal.
    from jinja2.exceptions import TemplateError
    from transformers.utils.chat_template_utils import render_jinja_template

    tools = [t.to_openai() for t in retail_tools]
    for bad in ("", "[1]"):
        with pytest.raises(
            TemplateError, match="message 3: tool call arguments must be a JSON object"
        ):
            render_jinja_template(
                conversations=[_with_call(bad)], tools=tools, chat_template=chat_template()
            )


# --- issue #12 item 1: the template's reasoning state ------------------------------------------------------


def test_issue12_item1_prompt_opens_reasoning(retail_tools):
    ours = render_prompt(
        [*HISTORY[:2], {"role": "user", "content": "Please type the word <think> exactly."}],
        retail_tools,
    )
    assert prompt_opens_reasoning(ours) is False  # rewardbox's template never opens reasoning
    assert (
        prompt_opens_reasoning("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n")
        is True
    )
    assert (
        prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n") is False
    )  # opened and closed
    assert (
        prompt_opens_reasoning("<|im_start|>user\n<think><|im_end|>\n<|im_start|>assistant\n")
        is False
    )
