"""The tool-calling chat template: layout, determinism, history rendering."""

from __future__ import annotations

import json

from rewardbox.policy.chat_template import EXAMPLE_TOOL_NAME, assistant_message, chat_template, render_prompt
from rewardbox.policy.interpreter import interpret, render_tool_call

HISTORY = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "system", "content": "Policy: refunds need a reason."},
    {"role": "user", "content": "Where is ORD-9?"},
]


def test_system_tools_example_and_generation_prompt(retail_tools):
    prompt = render_prompt(HISTORY, retail_tools)
    assert prompt.startswith("<|im_start|>system\nYou are a support agent.\n\nPolicy: refunds need a reason.\n\n# Tools")
    assert prompt.count("<|im_start|>system") == 1
    # one compact signature line per tool, in order: required, optional (?) and enum parameters
    lines = [line for line in prompt.splitlines() if line.startswith("- ")]
    assert [line[2:].split("(")[0] for line in lines] == [t.name for t in retail_tools]
    assert lines[0] == "- get_order(order_id: string): The get_order tool."
    assert "- set_quantity(order_id: string, quantity: integer, gift?: boolean, tags?: array, mode?: fast|slow, note?: value)" in prompt
    assert "Tool names: get_order, cancel_order, update_address, refund_order, list_stores, set_quantity." in prompt
    # exactly one worked example turn with a neutral tool, answered in plain text (no <DONE> to copy)
    assert EXAMPLE_TOOL_NAME not in {t.name for t in retail_tools}
    assert prompt.count(f"<|im_start|>assistant\n<tool_call>{{\"name\": \"{EXAMPLE_TOOL_NAME}\"") == 1
    assert "<|im_start|>assistant\nDone: subscription SUB-311 is now paused.<|im_end|>" in prompt
    assert "<DONE>" not in prompt
    assert prompt.endswith("<|im_start|>user\nWhere is ORD-9?<|im_end|>\n<|im_start|>assistant\n")


def test_no_tools_means_plain_chatml():
    prompt = render_prompt([{"role": "user", "content": "hi"}], [])
    assert prompt == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                      "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")


def test_history_calls_results_and_determinism(retail_tools):
    raw = ('<think>hidden</think>Looking.\n<tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-9"}}'
           '</tool_call><tool_call>{"name": "nope"}</tool_call>')
    interp = interpret(raw, retail_tools)
    messages = HISTORY + [
        assistant_message(interp),
        {"role": "tool", "tool_call_id": "a", "name": "get_order", "content": '{"status": "shipped"}'},
        {"role": "tool", "tool_call_id": "b", "name": "nope", "content": "Error: function 'nope' does not exist"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "ORD-1"}'}}]},
    ]
    prompt = render_prompt(messages, retail_tools)
    assert render_prompt(messages, retail_tools) == prompt
    turn = ("<|im_start|>assistant\nLooking.\n" + render_tool_call(interp.tool_calls[0])
            + '\n<tool_call>{"name": "nope"}</tool_call><|im_end|>\n')
    assert turn in prompt and "hidden" not in prompt
    assert ('<|im_start|>user\n<result>\n{"status": "shipped"}\n</result>\n'
            "<result>\nError: function 'nope' does not exist\n</result><|im_end|>\n") in prompt
    # string arguments are decoded and rendered once, as an object
    assert '<|im_start|>assistant\n<tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-1"}}</tool_call>' in prompt
    assert messages[-1]["tool_calls"][0]["function"]["arguments"] == '{"order_id": "ORD-1"}'  # caller's copy untouched


def test_template_is_the_packaged_jinja_file():
    text = chat_template()
    assert "<|im_start|>" in text and "tool_call" in text and text == chat_template()
