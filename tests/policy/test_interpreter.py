"""The one output interpreter: issue #5 items 1-3 with their exact values, plus typing."""

from __future__ import annotations

import random

import pytest

from rewardbox.policy.base import ToolCall, ToolCallError
from rewardbox.policy.chat_template import assistant_message, render_prompt
from rewardbox.policy.interpreter import interpret, render_tool_call, type_tool_call
from rewardbox.sandbox.base import ToolSpec

ITEM1_RAW = (
    '<think>\nI could just do <tool_call>{"name": "cancel_order", "arguments": {"order_id": "ORD-9"}}</tool_call>'
    " but I should check first.\n</think>\n"
    '<tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-9"}}</tool_call>'
)


def _only_call(interp) -> ToolCall:
    assert len(interp.tool_calls) == 1, interp
    return interp.tool_calls[0]


# --- item 1: a tool call inside the reasoning is not a call -------------------------------------------


def test_item1_call_inside_reasoning_is_not_a_call(retail_tools):
    interp = interpret(ITEM1_RAW, retail_tools, reasoning_open=False)
    call = _only_call(interp)
    assert (call.name, call.arguments) == ("get_order", {"order_id": "ORD-9"})
    assert '"cancel_order"' in interp.reasoning and "but I should check first." in interp.reasoning
    assert interp.content == "" and interp.errors == () and interp.events == ()


def test_item1_same_result_when_prompt_opened_reasoning(retail_tools):
    mid_reasoning = ITEM1_RAW[len("<think>") :]
    interp = interpret(mid_reasoning, retail_tools, reasoning_open=True)
    call = _only_call(interp)
    assert (call.name, call.arguments) == ("get_order", {"order_id": "ORD-9"})
    assert '"cancel_order"' in interp.reasoning
    assert interp.content == ""


def test_item1_own_case_stray_close_and_unfinished_reasoning(retail_tools):
    # The prompt opened <think>; the model closes it without ever writing the opening tag.
    raw = (
        'Maybe <tool_call>{"name": "refund_order", "arguments": {"order_id": "ORD-1", "amount": 5}}</tool_call>?'
        '\n</think>\nLet me look. <tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-1"}}</tool_call>'
    )
    interp = interpret(raw, retail_tools, reasoning_open=True)
    assert [(c.name, c.arguments) for c in interp.tool_calls] == [
        ("get_order", {"order_id": "ORD-1"})
    ]
    assert "refund_order" in interp.reasoning and interp.content == "Let me look."
    # Reasoning that never closes: everything is reasoning, nothing is a call.
    open_only = interpret(
        '<think>plan: <tool_call>{"name": "get_order", "arguments": {"order_id": "X"}}</tool_call>',
        retail_tools,
        reasoning_open=False,
    )
    assert (
        open_only.tool_calls == ()
        and open_only.content == ""
        and "get_order" in open_only.reasoning
    )
    assert (
        interpret(
            'still thinking <tool_call>{"name": "list_stores"}</tool_call>',
            retail_tools,
            reasoning_open=True,
        ).tool_calls
        == ()
    )


# --- item 2: arguments as a JSON string, malformed arguments, missing arguments ------------------------


def test_item2_json_string_arguments_become_the_dict_rendered_once(retail_tools):
    raw = '<tool_call>{"name": "update_address", "arguments": "{\\"order_id\\": \\"ORD-3\\", \\"zip\\": \\"10001\\"}"}</tool_call>'
    call = _only_call(interpret(raw, retail_tools, reasoning_open=False))
    assert call.arguments == {"order_id": "ORD-3", "zip": "10001"}
    expected = '<tool_call>{"name": "update_address", "arguments": {"order_id": "ORD-3", "zip": "10001"}}</tool_call>'
    assert render_tool_call(call) == expected
    prompt = render_prompt(
        [
            {"role": "user", "content": "hi"},
            assistant_message(interpret(raw, retail_tools, reasoning_open=False)),
        ],
        retail_tools,
    )
    assert prompt.count(expected) == 1 and '\\"' not in prompt.split("<|im_start|>user\nhi")[1]


@pytest.mark.parametrize("arguments", ["[]", "null", '"ORD-3 to 10001"'])
def test_item2_malformed_arguments_are_observations_not_calls(retail_tools, arguments):
    raw = f'<tool_call>{{"name": "update_address", "arguments": {arguments}}}</tool_call>'
    interp = interpret(raw, retail_tools, reasoning_open=False)
    assert interp.tool_calls == ()
    assert len(interp.errors) == 1
    error = interp.errors[0]
    assert error.name == "update_address" and error.message.startswith("Error: ")
    assert "update_address" in error.message
    # Written back into history verbatim, as the model wrote it.
    assert render_tool_call(error) == raw


def test_item2_missing_arguments_for_tool_without_parameters(retail_tools):
    call = _only_call(
        interpret(
            '<tool_call>{"name": "list_stores"}</tool_call>', retail_tools, reasoning_open=False
        )
    )
    assert call.arguments == {}
    assert (
        render_tool_call(call) == '<tool_call>{"name": "list_stores", "arguments": {}}</tool_call>'
    )


def test_item2_own_case_loose_scalars_are_typed_from_schema(retail_tools):
    raw = '<tool_call>{"name": "update_address", "arguments": {"order_id": "ORD-3", "zip": 10001}}</tool_call>'
    assert _only_call(interpret(raw, retail_tools, reasoning_open=False)).arguments == {
        "order_id": "ORD-3",
        "zip": "10001",
    }
    missing = interpret(
        '<tool_call>{"name": "update_address", "arguments": {"order_id": "ORD-3"}}</tool_call>',
        retail_tools,
        reasoning_open=False,
    )
    assert missing.tool_calls == ()
    assert (
        missing.errors[0].message
        == "Error: invalid arguments for 'update_address': missing required argument 'zip'"
    )


# --- item 3: truncation and unclosed calls ---------------------------------------------------------------


def test_item3_truncated_call_is_not_run(retail_tools):
    raw = 'I\'ll refund it now.\n<tool_call>{"name": "refund_order", "arguments": {"order_id": "ORD-7", "amount": 4'
    interp = interpret(raw, retail_tools, finish_reason="length", reasoning_open=False)
    assert interp.tool_calls == () and interp.errors == ()
    assert interp.events == ("truncated_call",)
    assert interp.content == "I'll refund it now."


def test_item3_complete_call_in_length_limited_turn_is_not_run(retail_tools):
    raw = 'Refunding.\n<tool_call>{"name": "refund_order", "arguments": {"order_id": "ORD-7", "amount": 4}}</tool_call>'
    interp = interpret(raw, retail_tools, finish_reason="length", reasoning_open=False)
    assert interp.tool_calls == () and interp.errors == ()
    assert interp.events == ("truncated_call",)
    assert interp.content == "Refunding."
    assert _only_call(interpret(raw, retail_tools, reasoning_open=False)).arguments == {
        "order_id": "ORD-7",
        "amount": 4,
    }


def test_item3_unclosed_complete_call_is_recovered_and_flagged(retail_tools):
    raw = 'Refunding.\n<tool_call>{"name": "refund_order", "arguments": {"order_id": "ORD-7", "amount": 4}}'
    interp = interpret(raw, retail_tools, finish_reason="stop", reasoning_open=False)
    call = _only_call(interp)
    assert (call.name, call.arguments, call.unclosed) == (
        "refund_order",
        {"order_id": "ORD-7", "amount": 4},
        True,
    )
    assert interp.events == ("unclosed_call",)
    assert interp.content == "Refunding."


def test_item3_own_case_second_call_truncated_and_unclosed_tail(retail_tools):
    raw = (
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "A"}}</tool_call>\n'
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "B"'
    )
    cut = interpret(raw, retail_tools, finish_reason="length", reasoning_open=False)
    assert cut.tool_calls == () and cut.events == ("truncated_call",) and cut.content == ""
    # stop + unclosed but incomplete JSON: the first call runs, the second is a format error.
    stopped = interpret(raw, retail_tools, finish_reason="stop", reasoning_open=False)
    assert [c.arguments for c in stopped.tool_calls] == [{"order_id": "A"}]
    assert stopped.errors[0].message.startswith("Error: invalid JSON in tool call: ")
    assert stopped.events == ("unclosed_call",)
    # text after a recovered unclosed call stays visible
    tail = interpret(
        '<tool_call>{"name": "list_stores", "arguments": {}} <DONE>',
        retail_tools,
        reasoning_open=False,
    )
    assert tail.tool_calls[0].unclosed and tail.content == "<DONE>"


# --- general rules -------------------------------------------------------------------------------------


def test_done_marker_parallel_calls_and_clean_content(retail_tools):
    raw = (
        "<think>plan</think>Checking both.\n"
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "A"}}</tool_call>\n'
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call>\n'
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "B"}}</tool_call> Done here. <DONE>'
    )
    interp = interpret(raw, retail_tools, reasoning_open=False)
    assert [c.arguments["order_id"] for c in interp.tool_calls] == ["A", "B"]
    assert interp.errors[0].message == "Error: function 'nope' does not exist"
    assert interp.content == "Checking both.\nDone here. <DONE>"
    assert (
        "<tool_call>" not in interp.content
        and "plan" not in interp.content
        and interp.reasoning == "plan"
    )
    assert len(interp.call_order) == 3 and interp.call_order[1] == interp.errors[0].id


def test_surplus_closing_braces_are_dropped_other_trailing_text_is_not(retail_tools):
    extra = interpret(
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "A"}}}\n}</tool_call>',
        retail_tools,
        reasoning_open=False,
    )
    assert [(c.name, c.arguments) for c in extra.tool_calls] == [("get_order", {"order_id": "A"})]
    assert extra.events == ("surplus_braces",) and extra.errors == ()
    for junk in (
        '{"name": "get_order", "arguments": {"order_id": "A"}}} x',
        '{"name": "get_order"}]}',
        '["get_order"]}',
    ):
        bad = interpret(f"<tool_call>{junk}</tool_call>", retail_tools, reasoning_open=False)
        assert bad.tool_calls == () and bad.errors and bad.events == ()


def test_bad_json_and_bad_shape(retail_tools):
    bad = interpret(
        '<tool_call>{"name": "get_order", "arguments": {"order_id": }}</tool_call>',
        retail_tools,
        reasoning_open=False,
    )
    assert bad.tool_calls == () and bad.errors[0].message.startswith(
        "Error: invalid JSON in tool call: "
    )
    shape = interpret('<tool_call>["get_order"]</tool_call>', retail_tools, reasoning_open=False)
    assert shape.errors[0].message.startswith("Error: invalid tool call:")


def test_type_tool_call_schema_typing(retail_tools):
    ok = type_tool_call(
        "set_quantity",
        {
            "order_id": "O",
            "quantity": "10",
            "gift": "TRUE",
            "tags": '["a", "b"]',
            "mode": "fast",
            "note": None,
        },
        retail_tools,
        "c1",
    )
    assert isinstance(ok, ToolCall) and ok.id == "c1"
    assert ok.arguments == {
        "order_id": "O",
        "quantity": 10,
        "gift": True,
        "tags": ["a", "b"],
        "mode": "fast",
        "note": None,
    }
    assert (
        type_tool_call(
            "set_quantity", '{"order_id": "O", "quantity": 3.0}', retail_tools, "c"
        ).arguments["quantity"]
        == 3
    )
    assert type_tool_call("list_stores", "", retail_tools, "c").arguments == {}
    for bad, fragment in [
        ({"order_id": "O", "quantity": "ten"}, "'quantity': expected integer"),
        ({"order_id": "O", "quantity": 2.5}, "'quantity': expected integer"),
        ({"order_id": "O", "quantity": True}, "'quantity': expected integer"),
        ({"order_id": "O", "quantity": 1, "mode": "medium"}, "is not one of"),
        ({"order_id": "O", "quantity": 1, "tags": [1, {}]}, "'tags[1]': expected string"),
    ]:
        err = type_tool_call("set_quantity", bad, retail_tools, "c")
        assert isinstance(err, ToolCallError) and fragment in err.message, err


def test_never_raises_on_junk(retail_tools):
    rng = random.Random(7)
    pieces = [
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "{",
        "}",
        '"name"',
        ":",
        '"get_order"',
        '"arguments"',
        "[",
        "]",
        "null",
        ",",
        "x",
        "\n",
        "<DONE>",
        '"\\u0000"',
        "1e999",
    ]
    for _ in range(500):
        raw = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 20)))
        for finish in ("stop", "length"):
            interp = interpret(
                raw, retail_tools, finish_reason=finish, reasoning_open=rng.random() < 0.3
            )
            assert "<tool_call>" not in interp.content


# --- issue #12 item 1: thinking off, a literal <think> in text ---------------------------------------------

NOTE_TOOLS = [
    ToolSpec(
        "add_note",
        "Add a note to an order.",
        {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "text": {"type": "string"}},
            "required": ["text"],
        },
    ),
]


def test_issue12_item1_literal_think_stays_in_content_when_thinking_is_off():
    interp = interpret(
        "Please type the word <think> exactly as shown.", NOTE_TOOLS, reasoning_open=False
    )
    assert interp.content == "Please type the word <think> exactly as shown."
    assert interp.reasoning == "" and interp.events == ()
    call_after = interpret(
        'Type <think> then <tool_call>{"name":"add_note","arguments":{"text":"a"}}</tool_call>',
        NOTE_TOOLS,
        reasoning_open=False,
    )
    assert [(c.name, c.arguments) for c in call_after.tool_calls] == [("add_note", {"text": "a"})]
    assert call_after.content == "Type <think> then" and call_after.reasoning == ""


def test_issue12_item1_prompt_opened_reasoning_cut_by_budget():
    interp = interpret(
        "Still weighing ORD-12 or", NOTE_TOOLS, finish_reason="length", reasoning_open=True
    )
    assert interp.reasoning == "Still weighing ORD-12 or" and interp.content == ""
    assert interp.events == ("truncated_reasoning",) and interp.tool_calls == ()
    # the same text with thinking off is plain content, and a stop is no truncation
    assert (
        interpret(
            "Still weighing ORD-12 or", NOTE_TOOLS, finish_reason="length", reasoning_open=False
        ).content
        == "Still weighing ORD-12 or"
    )
    assert interpret("Still weighing", NOTE_TOOLS, reasoning_open=True).events == ()


def test_issue12_item1_own_case_stray_close_and_leading_block_when_thinking_is_off():
    # Thinking off: a stray </think> is text and does not hide the call written before it.
    raw = 'Write </think> in the note. <tool_call>{"name": "add_note", "arguments": {"text": "x"}}</tool_call>'
    interp = interpret(raw, NOTE_TOOLS, reasoning_open=False)
    assert interp.content == "Write </think> in the note." and interp.reasoning == ""
    assert [c.arguments for c in interp.tool_calls] == [{"text": "x"}]
    # A leading <think> (after whitespace) still opens reasoning; a later one is literal content.
    lead = interpret(
        "\n <think>plan</think>Say <think> twice. <think>", NOTE_TOOLS, reasoning_open=False
    )
    assert (lead.reasoning, lead.content) == ("plan", "Say <think> twice. <think>")
    # A leading block the budget cut: reasoning, empty content, the event.
    cut = interpret(
        "<think>maybe add_note", NOTE_TOOLS, finish_reason="length", reasoning_open=False
    )
    assert (cut.reasoning, cut.content, cut.events) == (
        "maybe add_note",
        "",
        ("truncated_reasoning",),
    )


def test_issue12_item1_callers_must_state_the_template_state():
    with pytest.raises(TypeError, match="reasoning_open"):
        interpret("hi", NOTE_TOOLS)  # type: ignore[call-arg]


# --- issue #12 item 2: a closing tag inside a JSON string ---------------------------------------------------


def test_issue12_item2_closing_tag_inside_an_argument_string():
    raw = (
        '<tool_call>{"name": "add_note", "arguments": {"order_id": "ORD-5", '
        '"text": "customer pasted </tool_call> into the chat"}}</tool_call>'
    )
    interp = interpret(raw, NOTE_TOOLS, reasoning_open=False)
    assert len(interp.tool_calls) == 1 and interp.errors == () and interp.events == ()
    assert interp.tool_calls[0].arguments == {
        "order_id": "ORD-5",
        "text": "customer pasted </tool_call> into the chat",
    }
    assert interp.content == ""
    # written back into history and read again: the same call
    again = interpret(render_tool_call(interp.tool_calls[0]), NOTE_TOOLS, reasoning_open=False)
    assert again.tool_calls[0].arguments == interp.tool_calls[0].arguments


@pytest.mark.parametrize(
    "text",
    ["<think>", "</think>", "a <think>b</think> c", "<tool_call>", '{"name": "x"}</tool_call>'],
)
def test_issue12_item2_own_case_tags_inside_strings_neither_drop_nor_alter_a_call(text):
    body = render_tool_call(ToolCall("c", "add_note", {"text": text}))
    for reasoning_open, prefix in ((False, "Noted. "), (True, "plan </think>Noted. ")):
        raw = prefix + body + " then " + body
        interp = interpret(raw, NOTE_TOOLS, reasoning_open=reasoning_open)
        assert [c.arguments for c in interp.tool_calls] == [{"text": text}] * 2, (
            reasoning_open,
            interp,
        )
        assert interp.content == "Noted.\nthen" and interp.errors == ()


def test_issue12_item2_non_finite_json_literals_are_invalid_json():
    for literal in ("NaN", "Infinity", "-Infinity"):
        raw = f'<tool_call>{{"name": "refund_order", "arguments": {{"order_id": "A", "amount": {literal}}}}}</tool_call>'
        interp = interpret(
            raw,
            [
                ToolSpec(
                    "refund_order",
                    "",
                    {
                        "type": "object",
                        "properties": {
                            "order_id": {"type": "string"},
                            "amount": {"type": "number"},
                        },
                    },
                )
            ],
            reasoning_open=False,
        )
        assert interp.tool_calls == () and "invalid JSON" in interp.errors[0].message
