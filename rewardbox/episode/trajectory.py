"""What one episode leaves behind: messages, agent turns, outcome, usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rewardbox.episode.termination import TERMINATION_REASONS, TerminationReason
from rewardbox.grading.outcome import (
    TestOutcome,  # its home is grading; kept here for older imports
)

FINISH_REASONS = TERMINATION_REASONS
"""Kept for users of the old name: the termination reason values (``TerminationReason``)."""


@dataclass
class AgentTurn:
    """One agent completion inside an episode (used by training and usage).

    ``completion_logprobs`` (local policies only) holds, per completion token,
    its natural-log probability under the distribution that sampled it; the
    GRPO trainer uses it as ``old_logprobs``. ``finish_reason`` is ``"length"`` for a turn
    cut by a token or context limit (counted in ``truncated_turns``), else ``"stop"``;
    ``raw_finish_reason`` is what the server or sampler said, kept as given (docs/scale.md,
    "Truncated turns").
    """

    raw_text: str
    finish_reason: str
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    events: tuple[str, ...] = ()
    raw_finish_reason: str | None = None


@dataclass
class EpisodeResult:
    """One episode of (policy, task, trial), after its system-error retries (``rewardbox.episode.trial``).

    ``system_error`` is None for a scored episode, else ``"<kind>: <message>"``;
    such an episode has ``reward`` None and must be retried or refilled.
    ``system_error_kind`` is its kind (``sandbox_timeout``, ``judge_timeout``...,
    see :class:`rewardbox.errors.InfrastructureError`); ``retried_system_error_kinds``
    lists the kinds of the earlier tries of this trial that hit a system error
    and were retried (so a retried fault is counted even when the trial is scored).
    ``termination_reason`` says why the episode ended (None before it ended);
    ``duration_s`` is its wall-clock time in seconds; ``tries`` counts the runs
    of this trial (1 + system-error retries).
    """

    uid: str
    trial: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    agent_turns: list[AgentTurn] = field(default_factory=list)
    termination_reason: TerminationReason | None = None
    reward: float | None = None
    passed: bool | None = None
    system_error: str | None = None
    system_error_permanent: bool = False
    system_error_kind: str | None = None
    retried_system_error_kinds: list[str] = field(default_factory=list)
    test_outcome: TestOutcome | None = None
    effects: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tools: list[Any] = field(default_factory=list)
    duration_s: float = 0.0
    time_agent_s: float = 0.0
    time_user_s: float = 0.0
    time_tool_s: float = 0.0
    time_test_s: float = 0.0
    tries: int = 1

    def __post_init__(self) -> None:
        """Accept a reason's string value (``"done"``); an unknown one raises ``ValueError``."""
        if self.termination_reason is not None:
            self.termination_reason = TerminationReason(self.termination_reason)

    @property
    def input_tokens(self) -> int:
        return sum(t.input_tokens for t in self.agent_turns)

    @property
    def cached_input_tokens(self) -> int:
        return sum(t.cached_input_tokens for t in self.agent_turns)

    @property
    def output_tokens(self) -> int:
        return sum(t.output_tokens for t in self.agent_turns)

    @property
    def turns(self) -> int:
        return len(self.agent_turns)

    @property
    def response(self) -> str:
        """Content of the last visible assistant text (still holds <DONE>)."""
        for m in reversed(self.messages):
            if m.get("role") == "assistant" and m.get("content") and not m.get("dummy"):
                return m["content"]
        return ""

    def to_row(self) -> dict[str, Any]:
        """One Parquet row (probe / evaluation schema)."""
        return {
            "uid": self.uid,
            "trial": self.trial,
            "reward": self.reward,
            "passed": self.passed,
            "system_error": self.system_error,
            "system_error_kind": self.system_error_kind,
            "retried_system_error_kinds": list(self.retried_system_error_kinds),
            "termination_reason": None
            if self.termination_reason is None
            else str(self.termination_reason),
            "turns": self.turns,
            "input_tokens": self.input_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "output_tokens": self.output_tokens,
            "truncated_turns": sum(t.finish_reason == "length" for t in self.agent_turns),
            "duration_s": self.duration_s,
            "tries": self.tries,
        }
