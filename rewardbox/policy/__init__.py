"""Policies and the one output interpreter (docs/method.md, "Parser parity").

Heavy parts load lazily: ``rewardbox.policy.local`` imports torch and
transformers, ``rewardbox.policy.endpoint`` the openai client.
"""

from rewardbox.policy.base import (
    ChatRequest,
    Completion,
    Interpretation,
    Policy,
    ToolCall,
    ToolCallError,
)
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.factory import build_policy
from rewardbox.policy.interpreter import interpret, render_tool_call, type_tool_call

__all__ = [
    "ChatRequest",
    "Completion",
    "Interpretation",
    "Policy",
    "PolicyConfig",
    "ToolCall",
    "ToolCallError",
    "build_policy",
    "interpret",
    "render_tool_call",
    "type_tool_call",
]
