"""Sandboxes: one isolated set of tool servers per episode (in-process, MCP processes, Session Proxy)."""

from rewardbox.sandbox.base import ToolSpec

__all__ = ["ToolSpec"]
