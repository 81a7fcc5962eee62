"""``thinkingbox.common.chat_types``: context and message types as test code sees them.

``Text`` is our text message class (``role``, ``content``, ``metadata``, ``tag``,
``is_visible``); ``ToolCall``, ``ParallelToolCall``, ``ToolResponse`` and
``ToolCallResponse`` are the tool-call shapes found in ``x.messages`` and
``x.tool_calls``; ``TestContext`` is the ``x`` fixture. ``Message`` and
``MessageT`` both name the union of message classes, so ``isinstance(m, Text)``
and ``isinstance(m, ParallelToolCall)`` work as in upstream test code.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from rewardbox.grading.context import (
    ChatMessage as Text,
)
from rewardbox.grading.context import (
    Message,
    ParallelToolCall,
    TestContext,
    ToolCall,
    ToolCallResponse,
    ToolResponse,
)

MessageT = Message
TextMessageTag = Literal["think", "text", "direct"]
FinishReason = Literal[
    "done",
    "end_turn_tool",
    "agent_error",
    "agent_limit",
    "user_limit",
    "user_done",
    "no_user_llm",
    "skipped",
]


class ToolDef(BaseModel):
    """A tool as the agent saw it (name, description, JSON schema, flags)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    direct_response: str | None = None
    is_end_turn: bool = False


class TestResult(BaseModel):
    """A graded test as the upstream harness records it (``reward`` in [0, 1])."""

    __test__ = False
    result: bool
    reward: float = Field(ge=0.0, le=1.0)
    is_system_error: bool = False
    tb: str = ""
    prints: str = ""
    lineno: int = -1
    line_content: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)


def get_conversation_transcript(messages: list[Any], limit: int = 0) -> str:
    """The visible user/assistant texts of ``messages`` (see :meth:`TestContext.transcript`).

    Raises:
        ValueError: ``limit`` is negative.
    """
    return TestContext(messages=list(messages)).transcript(limit)


__all__ = [
    "FinishReason",
    "Message",
    "MessageT",
    "ParallelToolCall",
    "TestContext",
    "TestResult",
    "Text",
    "TextMessageTag",
    "ToolCall",
    "ToolCallResponse",
    "ToolDef",
    "ToolResponse",
    "get_conversation_transcript",
]
