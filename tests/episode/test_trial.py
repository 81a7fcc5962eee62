"""The one system-error retry rule (rewardbox.episode.trial.retry_system_errors)."""

from __future__ import annotations

import asyncio

import pytest

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.episode.trial import retry_system_errors


def _plays(*outcomes: tuple[str | None, bool]):
    """``play`` returning one result per outcome ``(system error kind or None, permanent)``, in order."""
    queue, played = list(outcomes), []

    async def play() -> EpisodeResult:
        kind, permanent = queue.pop(0)
        result = EpisodeResult(
            uid="t1",
            trial=0,
            reward=None if kind else 1.0,
            system_error_kind=kind,
            system_error=f"{kind}: boom" if kind else None,
            system_error_permanent=permanent,
        )
        played.append(result)
        return result

    return play, played


def _retry(play, retries: int):
    return asyncio.run(retry_system_errors(play, retries, lambda result: result))


def test_transient_errors_are_retried_and_their_kinds_recorded_until_a_scored_play():
    play, played = _plays(("sandbox_crash", False), ("grader_timeout", False), (None, False))
    result, tries = _retry(play, 3)
    assert tries == 3 and result is played[-1] and result.reward == 1.0 and result.tries == 3
    assert result.retried_system_error_kinds == ["sandbox_crash", "grader_timeout"]


@pytest.mark.parametrize("retries", [0, 1, 2])
def test_the_last_system_error_is_returned_without_a_reward_after_every_retry(retries):
    play, played = _plays(*[("sandbox_crash", False)] * (retries + 1))
    result, tries = _retry(play, retries)
    assert tries == retries + 1 == len(played) and result.reward is None and result.system_error
    assert (
        result.retried_system_error_kinds == ["sandbox_crash"] * retries
    )  # the last try is not retried


def test_a_permanent_system_error_is_not_retried():
    play, played = _plays(("sandbox_crash", False), ("judge_unconfigured", True), (None, False))
    result, tries = _retry(play, 5)
    assert tries == 2 == len(played) and result.system_error_kind == "judge_unconfigured"
    assert result.retried_system_error_kinds == ["sandbox_crash"]


def test_a_play_without_a_result_ends_the_tries():
    calls = []

    async def play() -> None:
        calls.append(1)

    assert asyncio.run(retry_system_errors(play, 3, lambda played: played)) == (
        None,
        1,
    ) and calls == [1]
