"""``TestContext``: what a test function sees as ``x`` (docs/thinkingbox.md, "Test code").

Built from a plain JSON dict (the *context payload*) so it crosses process
boundaries to the grading workers. Payload keys, all optional:

- ``effects``: ``{server: geteffects JSON}``, fetched after the conversation;
- ``messages``: chat messages as dicts, OpenAI style ``{role, content}`` or
  ThinkingBox style ``{T: "Text", role, content, metadata: {tag}}``; a message
  is hidden from the transcript when its tag is ``think`` or it is a dummy
  (``dummy`` / ``is_dummy`` / ``metadata.is_dummy``);
- ``response``: the last visible assistant text (derived from ``messages`` when absent);
- ``tool_calls``: ``[{tool_call: {name, arguments, id?}, tool_response: {name?, content, id?} | text}]``
  or flat ``[{name, arguments, content|output}]``;
- ``tool_direct_responses``, ``init_result``, ``session_id``, ``metadata``.

Test files import these classes as ``from thinkingbox.common import Judge,
TestContext``; :func:`install_thinkingbox_shim` makes that import resolve to
ours inside a grading worker, without the upstream framework installed.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from typing import Any

from rewardbox.grading.tb_messages import tb_messages

NIL_SESSION_ID = "00000000-0000-0000-0000-000000000000"


@dataclass
class ChatMessage:
    """A text message (ThinkingBox ``Text``); attribute access for test code, ``raw`` keeps the dict."""

    role: str
    content: str
    tag: str = "text"
    is_dummy: bool = False
    name: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    T = "Text"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatMessage:
        meta = dict(data.get("metadata") or {})
        content = data.get("content")
        return cls(
            role=str(data.get("role", "")),
            content=content if isinstance(content, str) else "",
            tag=str(data.get("tag") or meta.get("tag") or "text"),
            is_dummy=bool(data.get("dummy") or data.get("is_dummy") or meta.get("is_dummy")),
            name=str(data.get("name") or ""),
            metadata=meta,
            raw=dict(data),
        )

    @property
    def is_visible(self) -> bool:
        """Not reasoning (upstream ``Text.is_visible``)."""
        return self.tag != "think"

    @property
    def is_visible_text(self) -> bool:
        """A user or assistant text the user saw (not reasoning, not a dummy)."""
        return (
            self.role in ("user", "assistant")
            and self.tag != "think"
            and not self.is_dummy
            and bool(self.content)
        )


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    T = "ToolCall"


@dataclass
class ToolResponse:
    name: str
    content: str
    id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    T = "ToolResponse"


@dataclass
class ParallelToolCall:
    """The tool calls of one agent turn (ThinkingBox ``ParallelToolCall``)."""

    tool_calls: list[ToolCall]
    metadata: dict[str, Any] = field(default_factory=dict)
    T = "ParallelToolCall"


Message = ChatMessage | ToolCall | ParallelToolCall | ToolResponse


def _tool_call(data: dict[str, Any]) -> ToolCall:
    return ToolCall(
        name=str(data.get("name", "")),
        arguments=dict(data.get("arguments") or {}),
        id=str(data.get("id") or ""),
        metadata=dict(data.get("metadata") or {}),
    )


def _tagged(data: dict[str, Any]) -> Message:
    """One ThinkingBox tagged message dict (``T`` set) as an object."""
    kind = data["T"]
    if kind == "ParallelToolCall":
        return ParallelToolCall(
            [_tool_call(c) for c in data.get("tool_calls") or []], dict(data.get("metadata") or {})
        )
    if kind == "ToolCall":
        return _tool_call(data)
    if kind == "ToolResponse":
        return ToolResponse(
            name=str(data.get("name", "")),
            content=str(data.get("content", "")),
            id=str(data.get("id") or ""),
            metadata=dict(data.get("metadata") or {}),
        )
    return ChatMessage.from_dict(data)


def parse_messages(messages: list[dict[str, Any]]) -> list[Message]:
    """Message dicts -> objects, in order.

    ThinkingBox tagged dicts (``T``) map one to one; an OpenAI-style assistant
    entry with ``tool_calls`` or ``reasoning_content``, or a ``tool`` entry, is
    split as the DecodeResult export splits it (think Text, text Text,
    ParallelToolCall; ToolResponse); any other entry is a Text.
    """
    out: list[Message] = []
    for data in messages:
        if "T" in data:
            out.append(_tagged(data))
        elif data.get("role") == "tool" or data.get("tool_calls") or data.get("reasoning_content"):
            out.extend(_tagged(m) for m in tb_messages([data]))
        else:
            out.append(ChatMessage.from_dict(data))
    return out


@dataclass
class ToolCallResponse:
    """One tool call of the episode and the text the tool returned."""

    tool_call: ToolCall
    tool_response: ToolResponse

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCallResponse:
        if "tool_call" in data:
            call, resp = dict(data["tool_call"]), data.get("tool_response") or {}
            resp = {"content": resp} if isinstance(resp, str) else dict(resp)
        else:  # flat form
            call, resp = data, {"content": data.get("content", data.get("output", ""))}
        name = str(call.get("name", ""))
        call_id = str(call.get("id") or resp.get("id") or "")
        return cls(
            tool_call=ToolCall(name=name, arguments=dict(call.get("arguments") or {}), id=call_id),
            tool_response=ToolResponse(
                name=str(resp.get("name") or name), content=str(resp.get("content", "")), id=call_id
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        call, response = vars(self.tool_call).copy(), vars(self.tool_response).copy()
        return {"tool_call": call, "tool_response": response}


@dataclass
class TestContext:
    """The graded episode, as ThinkingBox test code expects it.

    ``metadata`` may be written by the test; it is copied into the outcome.
    """

    __test__ = False  # not a pytest class

    response: str = ""
    effects: dict[str, Any] = field(default_factory=dict)
    tool_calls: list[ToolCallResponse] = field(default_factory=list)
    tool_direct_responses: list[str] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    init_result: dict[str, Any] = field(default_factory=dict)
    session_id: str = NIL_SESSION_ID
    metadata: dict[str, Any] = field(default_factory=dict)
    payload_messages: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @classmethod
    def from_dict(cls, payload: dict[str, Any]) -> TestContext:
        """Build from a context payload (see the module docstring)."""
        raw_messages = [dict(m) for m in payload.get("messages") or []]
        messages = parse_messages(raw_messages)
        response = payload.get("response")
        if response is None:
            response = next(
                (
                    m.content
                    for m in reversed(messages)
                    if isinstance(m, ChatMessage) and m.role == "assistant" and m.is_visible_text
                ),
                "",
            )
        return cls(
            response=str(response),
            effects=dict(payload.get("effects") or {}),
            tool_calls=[ToolCallResponse.from_dict(t) for t in payload.get("tool_calls") or []],
            tool_direct_responses=[str(s) for s in payload.get("tool_direct_responses") or []],
            messages=messages,
            init_result=dict(payload.get("init_result") or {}),
            session_id=str(payload.get("session_id") or NIL_SESSION_ID),
            metadata=dict(payload.get("metadata") or {}),
            payload_messages=raw_messages,
        )

    def to_dict(self) -> dict[str, Any]:
        """The context payload (JSON-serialisable when the effects are)."""
        return {
            "response": self.response,
            "effects": self.effects,
            "tool_calls": [t.to_dict() for t in self.tool_calls],
            "tool_direct_responses": list(self.tool_direct_responses),
            "messages": self.payload_messages or [_message_dict(m) for m in self.messages],
            "init_result": self.init_result,
            "session_id": self.session_id,
            "metadata": self.metadata,
        }

    def transcript(self, limit: int | None = None) -> str:
        """Visible user/assistant texts as ``"User: ..."`` / ``"Assistant: ..."``
        blocks separated by blank lines.

        Args:
            limit: None or 0 for the whole conversation; ``n > 0`` keeps the tail
                holding the last ``n`` assistant messages (1 = last one only).

        Raises:
            ValueError: ``limit`` is negative.
        """
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        lines: list[str] = []
        assistants = 0
        for message in reversed(self.messages):
            if not isinstance(message, ChatMessage) or not message.is_visible_text:
                continue
            label = "Assistant" if message.role == "assistant" else "User"
            lines.append(f"{label}: {message.content}")
            assistants += message.role == "assistant"
            if limit and assistants >= limit:
                break
        return "\n\n".join(reversed(lines))

    def query(self) -> str:
        """The first visible user message (the task's query).

        Raises:
            ValueError: there is no user message.
        """
        for message in self.messages:
            if (
                isinstance(message, ChatMessage)
                and message.role == "user"
                and message.tag != "think"
                and not message.is_dummy
            ):
                return message.content
        raise ValueError("no user message found in messages")


def _message_dict(message: Message) -> dict[str, Any]:
    """A message object as a ThinkingBox tagged dict (``raw`` when the message kept one)."""
    if isinstance(message, ChatMessage):
        return message.raw or {
            "T": "Text",
            "role": message.role,
            "content": message.content,
            "metadata": {**message.metadata, "tag": message.tag},
        }
    if isinstance(message, ParallelToolCall):
        return {
            "T": "ParallelToolCall",
            "tool_calls": [_message_dict(c) for c in message.tool_calls],
            "metadata": message.metadata,
        }
    return {"T": message.T, **vars(message)}


def context_payload(
    messages: list[dict[str, Any]],
    effects: dict[str, Any],
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    init_result: dict[str, Any] | None = None,
    session_id: str | None = None,
    tool_direct_responses: list[str] | None = None,
) -> dict[str, Any]:
    """A context payload from an episode's parts (e.g. ``EpisodeResult.messages``,
    ``.effects``, ``.tool_calls``); ``response`` is derived from the messages."""
    return {
        "messages": list(messages),
        "effects": dict(effects),
        "tool_calls": list(tool_calls or []),
        "tool_direct_responses": list(tool_direct_responses or []),
        "init_result": dict(init_result or {}),
        "session_id": session_id or NIL_SESSION_ID,
        "metadata": {},
    }


def install_thinkingbox_shim() -> None:
    """Make ``thinkingbox.common`` and its test-facing submodules importable in this process.

    Registers ``thinkingbox`` (a namespace) and ``thinkingbox.common`` plus
    ``.chat_types``, ``.judge``, ``.rubrics_judge`` and ``.config_types`` in
    ``sys.modules``, all backed by :mod:`rewardbox.grading.tb_common` (our own
    code with the upstream names; docs/thinkingbox.md, "Test code"). Called inside
    grading workers and by the in-process runner. Replaces any ``thinkingbox``
    already imported in that process. Idempotent. Any other submodule
    (e.g. ``thinkingbox.common.mcp_proxy_client``) fails to import with
    ModuleNotFoundError, which grading reports as a permanent system error.
    """
    common = sys.modules.get("thinkingbox.common")
    if common is not None and getattr(common, "__rewardbox_shim__", False):
        return
    from rewardbox.grading import tb_common

    package = types.ModuleType("thinkingbox", "rewardbox stand-in of the ThinkingBox test API")
    package.__path__ = []  # a package, so ``thinkingbox.common`` is importable
    package.common = tb_common
    sys.modules["thinkingbox"] = package
    sys.modules["thinkingbox.common"] = tb_common
    for name, module in tb_common.SUBMODULES.items():
        sys.modules[f"thinkingbox.common.{name}"] = module
