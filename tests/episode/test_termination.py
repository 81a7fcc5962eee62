"""Termination reasons: one enum, the old string values, and the episode result's field."""

from __future__ import annotations

import pytest

from rewardbox.episode.campaign import ROW_SCHEMA
from rewardbox.episode.termination import TERMINATION_REASONS, TerminationReason
from rewardbox.episode.trajectory import FINISH_REASONS, AgentTurn, EpisodeResult

# The strings earlier campaigns wrote; old Parquet files must keep reading as the same reasons.
WRITTEN_BEFORE = (
    "done",
    "end_turn_tool",
    "user_done",
    "user_limit",
    "agent_limit",
    "no_user_llm",
    "agent_error",
    "context_limit",
    "system_error",
)


def test_values_are_the_strings_earlier_campaigns_wrote():
    assert TERMINATION_REASONS == WRITTEN_BEFORE
    assert FINISH_REASONS == WRITTEN_BEFORE  # the old name still answers
    assert (
        TerminationReason.SYSTEM_ERROR == "system_error"
        and str(TerminationReason.CONTEXT_LIMIT) == "context_limit"
    )


def test_episode_result_takes_a_reason_or_its_string_and_rejects_an_unknown_one():
    from_string = EpisodeResult(uid="u", trial=0, termination_reason="user_limit")
    assert from_string.termination_reason is TerminationReason.USER_LIMIT
    assert EpisodeResult(uid="u", trial=0).termination_reason is None  # not ended yet
    with pytest.raises(ValueError, match="finished"):
        EpisodeResult(uid="u", trial=0, termination_reason="finished")


def test_row_carries_the_reason_as_its_string_and_matches_the_row_schema():
    result = EpisodeResult(
        uid="u",
        trial=2,
        termination_reason=TerminationReason.AGENT_LIMIT,
        reward=1.0,
        passed=True,
        agent_turns=[AgentTurn("a", "length", 10, 5), AgentTurn("b", "stop", 12, 3)],
        duration_s=1.5,
        tries=2,
    )
    row = result.to_row()
    assert set(row) | {"domain"} == set(ROW_SCHEMA)
    assert type(row["termination_reason"]) is str and row["termination_reason"] == "agent_limit"
    # a completion's finish reason ("length") is a different concept: it only counts truncated turns
    assert (row["duration_s"], row["tries"], row["truncated_turns"], row["output_tokens"]) == (
        1.5,
        2,
        1,
        8,
    )
