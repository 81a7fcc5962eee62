"""The one output interpreter: raw model text -> reasoning, content, tool calls.

Training and evaluation both call ``interpret`` (docs/method.md, "Parser parity"), and
endpoint policies that receive structured calls type them with
``type_tool_call``, so a call means the same thing on every path.

Format (Hermes style, as Qwen and the shipped chat template use it)::

    <think>reasoning, never parsed for calls</think>
    visible text
    <tool_call>{"name": "get_order", "arguments": {"order_id": "ORD-9"}}</tool_call>

Rules:
    * Reasoning is one block at the start. With ``reasoning_open=True`` (the
      prompt already opened ``<think>``), text up to the first ``</think>`` is
      reasoning, and all of it when none follows. With ``reasoning_open=False``
      only a ``<think>`` that starts the text (leading whitespace aside) opens a
      block; any other ``<think>`` or ``</think>`` is literal text ("type the word
      <think>" stays whole in content). Callers pass the real state of their
      prompt (``chat_template.prompt_opens_reasoning``), never a guess.
    * A reasoning block that never closes in a turn cut by the budget
      (``finish_reason == "length"``): all of it is reasoning, content is empty;
      event ``"truncated_reasoning"``.
    * A call body is read as ONE JSON value after ``<tool_call>`` with a
      streaming decoder (``json.JSONDecoder.raw_decode``); the closing tag is
      looked for only after that value, so ``</tool_call>`` or reasoning tags
      inside an argument string neither end nor alter the call. JSON is read
      strictly: ``NaN`` and ``Infinity`` are invalid JSON.
    * Several calls in one message are allowed (parallel calls).
    * ``finish_reason == "length"``: no call is run, complete or not; event
      ``"truncated_call"``.
    * ``finish_reason == "stop"`` and a call whose closing tag is missing: a
      complete JSON body is recovered with ``unclosed=True``; event ``"unclosed_call"``.
    * A closed call whose complete JSON object is followed only by surplus
      closing braces (``{"name": "x", "arguments": {}}}``, a frequent slip of
      SmolLM2-135M in hotel calls) is read as that object; event
      ``"surplus_braces"``. Anything else after the object stays an error.
    * Malformed calls become ``ToolCallError`` whose message is the tool
      observation the model sees. Nothing here raises on model output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from rewardbox import strict_json
from rewardbox.policy.arguments import ArgumentError, json_type_name, type_arguments
from rewardbox.policy.base import Interpretation, ToolCall, ToolCallError
from rewardbox.sandbox.base import ToolSpec

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
EVENT_TRUNCATED_CALL = "truncated_call"
EVENT_UNCLOSED_CALL = "unclosed_call"
EVENT_SURPLUS_BRACES = "surplus_braces"
EVENT_TRUNCATED_REASONING = "truncated_reasoning"
_SHAPE_HINT = 'a tool call must be a JSON object like {"name": "<tool>", "arguments": {...}}'
_WHITESPACE = " \t\n\r"


def interpret(
    raw_text: str,
    tools: Sequence[ToolSpec],
    *,
    finish_reason: str = "stop",
    reasoning_open: bool,
) -> Interpretation:
    """Read one raw completion.

    Args:
        raw_text: exactly what the model produced (special tokens removed).
        tools: the tools the agent may call; arguments are typed from their schemas.
        finish_reason: ``"stop"`` or ``"length"`` (the generation budget was hit).
        reasoning_open: the prompt ended inside an opened ``<think>`` block. Required:
            the caller states its template's real state (``False`` for a template
            that never opens reasoning, as rewardbox's own).

    Returns:
        An ``Interpretation``: ``content`` holds the visible text with reasoning
        and call markup removed (``<DONE>`` and literal tags in text kept),
        ``tool_calls`` the typed calls, ``errors`` the malformed ones (policy
        failures, shown to the model as tool output), ``events`` flags such as
        ``"truncated_call"`` or ``"truncated_reasoning"``.
        Degenerate inputs (empty text, only reasoning) give empty content and no calls.
        Never raises for what the model wrote: a malformed call is a policy failure in ``errors``.
        Source: the one interpreter of every policy (docs/method.md, "Parser parity").
    """
    raw_text = raw_text if isinstance(raw_text, str) else ""
    reasoning, visible, reasoning_closed = split_reasoning(raw_text, reasoning_open=reasoning_open)
    content_parts, bodies = _scan_calls(visible)
    prefix = "call_" + hashlib.sha1(raw_text.encode("utf-8")).hexdigest()[:8]
    calls: list[ToolCall] = []
    errors: list[ToolCallError] = []
    events: list[str] = []
    if not reasoning_closed and finish_reason == "length":
        events.append(EVENT_TRUNCATED_REASONING)
    if bodies and finish_reason == "length":
        events.append(EVENT_TRUNCATED_CALL)
        bodies = []
    for index, (body, closed) in enumerate(bodies):
        call_id = f"{prefix}_{index}"
        if closed:
            parsed, repaired = _parse_body(body, tools, call_id)
            if repaired:
                events.append(EVENT_SURPLUS_BRACES)
        else:
            events.append(EVENT_UNCLOSED_CALL)
            parsed, rest = _parse_unclosed_body(body, tools, call_id)
            content_parts.append(rest)
        (calls if isinstance(parsed, ToolCall) else errors).append(parsed)
    content = "\n".join(part.strip() for part in content_parts if part.strip())
    return Interpretation(
        reasoning=reasoning,
        content=content,
        tool_calls=tuple(calls),
        errors=tuple(errors),
        events=tuple(dict.fromkeys(events)),
        call_order=tuple(f"{prefix}_{i}" for i in range(len(bodies))),
    )


def split_reasoning(raw_text: str, *, reasoning_open: bool) -> tuple[str, str, bool]:
    """Split raw text into ``(reasoning, visible text, closed)``; see the module rules.

    ``closed`` is False when a reasoning block was opened (by the prompt or by a
    leading ``<think>``) and never closed; then all the text is reasoning.
    """
    text = raw_text
    if not reasoning_open:
        stripped = text.lstrip()
        if not stripped.startswith(THINK_OPEN):
            return "", text, True
        text = stripped[len(THINK_OPEN) :]
    close = text.find(THINK_CLOSE)
    if close < 0:
        return text.strip(), "", False
    return text[:close].strip(), text[close + len(THINK_CLOSE) :], True


def _scan_calls(visible: str) -> tuple[list[str], list[tuple[str, bool]]]:
    """Cut ``visible`` into content parts and ``(call body, closed)`` pairs.

    The closing tag of a call is searched only after the JSON value that starts
    its body (when one decodes), so a ``</tool_call>`` inside a string is text.
    """
    parts: list[str] = []
    bodies: list[tuple[str, bool]] = []
    pos = 0
    while True:
        start = visible.find(CALL_OPEN, pos)
        if start < 0:
            parts.append(visible[pos:])
            break
        parts.append(visible[pos:start])
        body_start = start + len(CALL_OPEN)
        end = visible.find(CALL_CLOSE, _json_value_end(visible, body_start))
        if end < 0:
            bodies.append((visible[body_start:], False))
            break
        bodies.append((visible[body_start:end], True))
        pos = end + len(CALL_CLOSE)
    return [p.replace(CALL_CLOSE, "") for p in parts], bodies


def _json_value_end(text: str, start: int) -> int:
    """Index just past the JSON value starting at ``text[start:]`` (whitespace skipped); ``start`` if none."""
    begin = start
    while begin < len(text) and text[begin] in _WHITESPACE:
        begin += 1
    try:
        _, end = strict_json.STRICT_DECODER.raw_decode(text, begin)
    except ValueError:
        return start
    return end


def _leading_json(body: str) -> tuple[Any, int, str]:
    """The JSON value at the start of ``body`` (leading whitespace skipped), where it ends, and the text
    it was read from. Raises ValueError when no value starts there."""
    stripped = body.lstrip()
    obj, end = strict_json.STRICT_DECODER.raw_decode(stripped)
    return obj, end, stripped


def _parse_body(
    body: str, tools: Sequence[ToolSpec], call_id: str
) -> tuple[ToolCall | ToolCallError, bool]:
    """Parse a closed call body; the flag says surplus closing braces were dropped."""
    try:
        obj = strict_json.loads(body)
    except ValueError as exc:
        try:
            obj, end, stripped = _leading_json(body)
        except ValueError:
            obj, end, stripped = None, 0, ""
        if not isinstance(obj, dict) or stripped[end:].strip("} \n\t"):
            return ToolCallError(
                call_id, None, body, f"Error: invalid JSON in tool call: {exc}"
            ), False
        return _typed_from_object(obj, stripped[:end], tools, call_id, unclosed=False), True
    return _typed_from_object(obj, body, tools, call_id, unclosed=False), False


def _parse_unclosed_body(
    body: str, tools: Sequence[ToolSpec], call_id: str
) -> tuple[ToolCall | ToolCallError, str]:
    """Recover a complete JSON object that lost its closing tag; the rest is content."""
    try:
        obj, end, stripped = _leading_json(body)
    except ValueError as exc:
        return ToolCallError(call_id, None, body, f"Error: invalid JSON in tool call: {exc}"), ""
    if not isinstance(obj, dict):
        return ToolCallError(call_id, None, body, f"Error: invalid tool call: {_SHAPE_HINT}"), ""
    rest = stripped[end:].replace(CALL_OPEN, "").replace(CALL_CLOSE, "")
    return _typed_from_object(obj, stripped[:end], tools, call_id, unclosed=True), rest


def _typed_from_object(
    obj: Any, raw: str, tools: Sequence[ToolSpec], call_id: str, *, unclosed: bool
) -> ToolCall | ToolCallError:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return ToolCallError(call_id, None, raw, f"Error: invalid tool call: {_SHAPE_HINT}")
    arguments = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
    typed = type_tool_call(obj["name"], arguments, tools, call_id, raw=raw)
    if unclosed and isinstance(typed, ToolCall):
        return ToolCall(typed.id, typed.name, typed.arguments, unclosed=True)
    return typed


def type_tool_call(
    name: str,
    arguments: Any,
    tools: Sequence[ToolSpec],
    call_id: str,
    *,
    raw: str | None = None,
) -> ToolCall | ToolCallError:
    """Type one call's arguments from its tool's schema.

    Args:
        name: the tool name the model chose.
        arguments: a dict, a JSON string of an object (as OpenAI structured
            calls carry it), or anything else the model wrote. ``""`` means ``{}``.
        tools: the available tools.
        call_id: the call id to keep (the endpoint's id for structured calls).
        raw: the raw call text for the error record; defaults to a JSON dump.

    Returns:
        ``ToolCall`` with typed arguments, or ``ToolCallError`` whose message
        starts with ``Error:`` (unknown tool, arguments not an object, invalid
        JSON, missing required or untypable values). Never raises.
    """
    if raw is None:
        raw = strict_json.dumps(
            {"name": name, "arguments": arguments}, ensure_ascii=False, default=str
        )
    spec = next((t for t in tools if t.name == name), None)
    if spec is None:
        return ToolCallError(call_id, name, raw, f"Error: function '{name}' does not exist")
    if isinstance(arguments, str):
        if not arguments.strip():
            arguments = {}
        else:
            try:
                arguments = strict_json.loads(arguments)
            except ValueError as exc:
                return ToolCallError(
                    call_id,
                    name,
                    raw,
                    f"Error: invalid JSON in tool call arguments for '{name}': {exc}",
                )
    if not isinstance(arguments, dict):
        message = f"Error: invalid arguments for '{name}': arguments must be a JSON object, got {json_type_name(arguments)}"
        return ToolCallError(call_id, name, raw, message)
    try:
        typed = type_arguments(arguments, spec.input_schema)
    except ArgumentError as exc:
        return ToolCallError(call_id, name, raw, f"Error: invalid arguments for '{name}': {exc}")
    return ToolCall(call_id, name, typed)


def render_tool_call(call: ToolCall | ToolCallError) -> str:
    """How a call is written back into the history (and by scripted policies).

    ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``: arguments are
    always a JSON object, encoded once (``json.dumps`` default separators, non-ASCII
    kept), identical to what the chat template renders. A ``ToolCallError`` is
    written back as the raw body the model produced.
    """
    if isinstance(call, ToolCallError):
        return f"{CALL_OPEN}{call.raw}{CALL_CLOSE}"
    body = strict_json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"
