"""The wire format of chat completions: request messages and tools out, replies into one interpretation.

``EndpointPolicy`` (``endpoint``) sends ``api_message``/``api_tool`` entries and
reads a reply's text and structured calls with ``combine``; ``parity`` checks
that a served model's replies read the same as the local policy's text.
"""

from __future__ import annotations

from typing import Any

from rewardbox import strict_json
from rewardbox.policy.base import Interpretation, ToolCall, ToolCallError
from rewardbox.policy.interpreter import (
    CALL_CLOSE,
    CALL_OPEN,
    EVENT_TRUNCATED_CALL,
    EVENT_TRUNCATED_REASONING,
    interpret,
    type_tool_call,
)
from rewardbox.sandbox.base import ToolSpec

_MESSAGE_KEYS = {
    "system": ("content",),
    "user": ("content",),
    "tool": ("content", "tool_call_id", "name"),
}


def combine(
    content: str,
    reasoning: str,
    structured: list[Any],
    tools: list[ToolSpec],
    finish_reason: str,
    *,
    reasoning_open: bool,
) -> tuple[Interpretation, str]:
    """Merge text calls and structured calls into one interpretation and a replayable raw text.

    ``raw_text`` is ``<think>reasoning</think>`` + content + each structured call
    written as ``<tool_call>`` markup, so ``interpret(raw_text)`` later yields the
    same tool names and arguments (parser parity); only the call ids differ.
    A turn cut at the length limit runs no call, structured or not. With
    ``reasoning_open`` (see ``EndpointPolicy``) ``content`` is read as starting
    inside reasoning. A turn cut at the length limit with reasoning and no
    visible content or call (the server's parser split an unfinished reasoning
    block out) records ``"truncated_reasoning"``.
    """
    text = interpret(content, tools, finish_reason=finish_reason, reasoning_open=reasoning_open)
    calls: list[ToolCall] = list(text.tool_calls)
    errors: list[ToolCallError] = list(text.errors)
    events = list(text.events)
    order = list(text.call_order)
    rendered: list[str] = []
    for call in structured:
        name, arguments = call.function.name, call.function.arguments
        rendered.append(_render_structured(name, arguments))
        if finish_reason == "length":
            continue
        typed = type_tool_call(name, _model_value(arguments), tools, call.id)
        (calls if isinstance(typed, ToolCall) else errors).append(typed)
        order.append(call.id)
    if structured and finish_reason == "length" and EVENT_TRUNCATED_CALL not in events:
        events.append(EVENT_TRUNCATED_CALL)
    cut_in_reasoning = (
        finish_reason == "length" and reasoning.strip() and not content.strip() and not structured
    )
    if cut_in_reasoning and EVENT_TRUNCATED_REASONING not in events:
        events.append(EVENT_TRUNCATED_REASONING)
    thought = "\n".join(r for r in (reasoning.strip(), text.reasoning) if r)
    thought_markup = (
        f"<think>{reasoning}" + ("" if cut_in_reasoning else "</think>\n") if reasoning else ""
    )
    raw_text = thought_markup + content + "".join(rendered)
    interpretation = Interpretation(
        thought, text.content, tuple(calls), tuple(errors), tuple(events), tuple(order)
    )
    return interpretation, raw_text


def _model_value(arguments: Any) -> Any:
    """The ``arguments`` value the model wrote: a structured call carries it JSON-encoded once by the server.

    A server's tool parser (vLLM's hermes) encodes whatever the model wrote after ``"arguments":``, so a model
    that wrote the arguments as a JSON string arrives encoded twice; decoding once here gives ``type_tool_call``
    the same value ``interpret`` gives it from the text (parser parity). Text that is not JSON is kept as it
    is (``type_tool_call`` reports it as invalid JSON, as for a text call).
    """
    if not isinstance(arguments, str) or not arguments.strip():
        return arguments
    try:
        return strict_json.loads(arguments)
    except ValueError:
        return arguments


def _render_structured(name: str, arguments: Any) -> str:
    value = _model_value(arguments)
    return f"{CALL_OPEN}{strict_json.dumps({'name': name, 'arguments': value}, ensure_ascii=False)}{CALL_CLOSE}"


def reasoning_of(message: Any, field: str) -> str:
    """The reply message's reasoning text from ``field`` (an attribute or a pydantic extra), else ``""``."""
    value = getattr(message, field, None)
    if value is None and getattr(message, "model_extra", None):
        value = message.model_extra.get(field)
    return value if isinstance(value, str) else ""


def api_tool(tool: ToolSpec) -> dict[str, Any]:
    """The ``tools`` entry for one tool, ``additionalProperties: false`` added
    (docs/thinkingbox.md, "Model requests")."""
    entry = tool.to_openai()
    entry["function"]["parameters"] = {
        **(tool.input_schema or {"type": "object"}),
        "additionalProperties": False,
    }
    return entry


def api_message(message: dict[str, Any]) -> dict[str, Any]:
    """One history message in wire format: arguments as JSON strings, private keys dropped."""
    role = message.get("role")
    if role != "assistant":
        out = {"role": role}
        out.update({k: message[k] for k in _MESSAGE_KEYS.get(role, ("content",)) if k in message})
        out.setdefault("content", "")
        return out
    out = {"role": "assistant", "content": message.get("content") or ""}
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        args = fn.get("arguments", {})
        calls.append(
            {
                "id": call.get("id", ""),
                "type": "function",
                "function": {
                    "name": fn.get("name", ""),
                    "arguments": args
                    if isinstance(args, str)
                    else strict_json.dumps(args, ensure_ascii=False),
                },
            }
        )
    if calls:
        out["tool_calls"] = calls
    return out
