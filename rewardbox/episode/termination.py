"""Why an episode ended: the ``TerminationReason`` enum.

The reasons follow the ThinkingBox episode loop (docs/thinkingbox.md, "Episode
loop") plus two of ours: ``context_limit`` (the conversation outgrew the
policy's context window) and ``system_error`` (an infrastructure fault: the
episode is not scored, never a reward of 0), after tau2-bench's
``TerminationReason``. A completion's own end (``"stop"`` or ``"length"``, from
the model or sampler) is a different thing and keeps the name ``finish_reason``
(``rewardbox.policy.base.Completion``).

The values are the strings earlier campaigns wrote, so old Parquet files read
unchanged; only their column name moved (``finish_reason`` ->
``termination_reason``, see ``rewardbox.episode.campaign.upgrade_rows``).
"""

from __future__ import annotations

import enum


class TerminationReason(enum.StrEnum):
    """Why an episode ended; a ``str`` subclass, so it compares and serialises as its value."""

    DONE = "done"
    """The agent ended its message with ``<DONE>``."""
    END_TURN_TOOL = "end_turn_tool"
    """The agent called an ``is_end_turn`` builtin tool."""
    USER_DONE = "user_done"
    """The user simulator ended the conversation."""
    USER_LIMIT = "user_limit"
    """``max_user_turns`` was reached."""
    AGENT_LIMIT = "agent_limit"
    """``max_agent_steps_per_user_turn`` was reached."""
    NO_USER_LLM = "no_user_llm"
    """No user simulator (or no ``user_context``) after the first turn."""
    AGENT_ERROR = "agent_error"
    """The agent produced nothing."""
    CONTEXT_LIMIT = "context_limit"
    """The conversation outgrew the policy's context window."""
    SYSTEM_ERROR = "system_error"
    """An infrastructure fault: the episode is not scored and is retried or refilled."""


TERMINATION_REASONS = tuple(reason.value for reason in TerminationReason)
"""Every termination reason value, in declaration order."""
