"""Our OpenAI-style episode history -> ThinkingBox ``MessageT`` dicts (docs/thinkingbox.md, "DecodeResult rows").

ThinkingBox messages are a tagged union on ``T`` (``chat_types.py``):

- ``Text{role, content, metadata: {tag: text|think|direct, is_done?, is_user_llm?, is_dummy?}}``
- ``ParallelToolCall{tool_calls: [ToolCall{name, arguments, id, metadata: {error?}}]}``
- ``ToolResponse{name, content, id}``

One assistant entry of ours becomes, in this order (as ``decode_turn_iter``
decodes a completion, docs/thinkingbox.md, "Episode loop"): a ``think`` Text for ``reasoning_content``, a
``text`` Text for visible content (``is_done`` when it ends with ``<DONE>``),
and a ``ParallelToolCall`` for ``tool_calls``. A malformed call (our ``raw``
key) carries ``metadata.error``: the message the agent saw as tool output.
Calls to end-turn tools are flagged ``is_end_turn_tool`` and their empty tool
responses are kept out of ``messages`` (ThinkingBox records them only in
``TestContext.tool_calls``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rewardbox import strict_json

DONE_MARKER = "<DONE>"


def _text(role: str, content: str, **metadata: Any) -> dict[str, Any]:
    return {"T": "Text", "role": role, "content": content, "metadata": {"tag": "text", **metadata}}


def _arguments(value: Any) -> dict[str, Any]:
    """Arguments as a dict (ThinkingBox's ``ToolCall.arguments`` type); a JSON string is decoded."""
    if isinstance(value, dict):
        return json.loads(strict_json.dumps(value, ensure_ascii=False, default=str))
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


def _tool_call(call: dict[str, Any], outputs: dict[str, str], end_turn: set[str]) -> dict[str, Any]:
    fn = call.get("function") or {}
    name = fn.get("name") or ""
    metadata: dict[str, Any] = {}
    if "raw" in call:
        metadata["error"] = outputs.get(call.get("id", "")) or f"malformed tool call: {call['raw']}"
        metadata["raw"] = call["raw"]
    if name in end_turn:
        metadata["is_end_turn_tool"] = True
    return {
        "T": "ToolCall",
        "name": name,
        "arguments": _arguments(fn.get("arguments")),
        "id": str(call.get("id") or ""),
        "metadata": metadata,
    }


def _assistant(
    message: dict[str, Any], outputs: dict[str, str], end_turn: set[str]
) -> list[dict[str, Any]]:
    out = []
    if message.get("reasoning_content"):
        out.append(_text("assistant", message["reasoning_content"], tag="think"))
    content = message.get("content") or ""
    if content.strip():
        flags: dict[str, Any] = {}
        if content.strip().endswith(DONE_MARKER):
            flags["is_done"] = True
        if message.get("dummy"):
            flags["is_dummy"] = True
        out.append(_text("assistant", content, **flags))
    calls = [_tool_call(c, outputs, end_turn) for c in message.get("tool_calls") or []]
    if calls:
        metadata = (
            {"is_end_turn_tool": True}
            if any(c["metadata"].get("is_end_turn_tool") for c in calls)
            else {}
        )
        out.append({"T": "ParallelToolCall", "tool_calls": calls, "metadata": metadata})
    return out


def tb_messages(
    messages: Iterable[dict[str, Any]], end_turn_names: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """Convert an ``EpisodeResult.messages`` history to ThinkingBox message dicts.

    Args:
        messages: OpenAI-style entries (``system``, ``user`` with optional
            ``is_user_llm``, ``assistant`` with optional ``reasoning_content`` /
            ``tool_calls``, ``tool`` with ``tool_call_id`` and ``name``).
        end_turn_names: names of ``is_end_turn`` tools.

    Returns:
        The messages in order; entries with an unknown role are skipped.
    """
    messages = list(messages)
    end_turn = set(end_turn_names)
    outputs = {
        m.get("tool_call_id", ""): str(m.get("content") or "")
        for m in messages
        if m.get("role") == "tool"
    }
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "system":
            out.append(_text("system", str(m.get("content") or "")))
        elif role == "user":
            out.append(
                _text(
                    "user",
                    str(m.get("content") or ""),
                    **({"is_user_llm": True} if m.get("is_user_llm") else {}),
                )
            )
        elif role == "assistant":
            out.extend(_assistant(m, outputs, end_turn))
        elif role == "tool" and not (m.get("name") in end_turn and not m.get("content")):
            out.append(
                {
                    "T": "ToolResponse",
                    "name": m.get("name") or "",
                    "content": str(m.get("content") or ""),
                    "id": str(m.get("tool_call_id") or ""),
                    "metadata": {},
                }
            )
    return out


def tb_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``TestContext.tool_calls``: each ToolCall with its ToolResponse (an empty one for end-turn calls)."""
    responses = {m["id"]: m for m in messages if m["T"] == "ToolResponse"}
    pairs = []
    for m in messages:
        if m["T"] != "ParallelToolCall":
            continue
        for call in m["tool_calls"]:
            response = responses.get(call["id"]) or {
                "T": "ToolResponse",
                "name": call["name"],
                "content": "",
                "id": call["id"],
                "metadata": {},
            }
            pairs.append({"tool_call": call, "tool_response": response})
    return pairs


def count_agent_turns(messages: list[Any]) -> int:
    """Agent turns of ThinkingBox messages: one per ParallelToolCall and per visible assistant Text
    (docs/thinkingbox.md, "Episode loop"); what a ``tb infer`` row without ``usage`` counts as turns."""
    count = 0
    for m in messages:
        if not isinstance(m, dict):
            continue
        tag = (m.get("metadata") or {}).get("tag", "text")
        if m.get("T") == "ParallelToolCall" or (
            m.get("T") == "Text" and m.get("role") == "assistant" and tag == "text"
        ):
            count += 1
    return count
