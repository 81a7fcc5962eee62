"""Kept for users' older imports: the message conversion lives in ``rewardbox.grading.tb_messages``."""

from rewardbox.grading.tb_messages import DONE_MARKER, tb_messages, tb_tool_calls

__all__ = ["DONE_MARKER", "tb_messages", "tb_tool_calls"]
