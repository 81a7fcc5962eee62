"""One trial: an episode of (task, trial), retried on system errors with a fresh sandbox.

:func:`retry_system_errors` is the one system-error retry rule; :func:`run_trial` (every campaign) and
``rewardbox.training.verl.tokens.play_with_retries`` (verl's rollouts) both play through it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.tasks.schema import Task

Played = TypeVar("Played")


async def retry_system_errors(
    play: Callable[[], Awaitable[Played]],
    max_system_error_retries: int,
    result_of: Callable[[Played], EpisodeResult | None],
) -> tuple[Played, int]:
    """Play an episode; after a transient system error play it again, up to ``max_system_error_retries`` times.

    A permanent system error (``EpisodeResult.system_error_permanent``: no judge endpoint, test code that
    cannot be imported) ends the tries at once: retrying cannot fix it. Each ``play()`` must start from a
    fresh sandbox. A played value without a result (``result_of`` returns None) ends the tries too.

    Args:
        play: plays one episode from scratch.
        max_system_error_retries: retries after the first try (``EpisodeConfig.max_system_error_retries``).
        result_of: the ``EpisodeResult`` of a played value.

    Returns:
        ``(played, tries)``: the first scored play, or the last one when every try hit a system error
        (its reward stays None, never 0). Its result's ``tries`` counts the tries and its
        ``retried_system_error_kinds`` holds the kinds of the tries that were retried, in order.
    """
    tries = max_system_error_retries + 1
    retried: list[str] = []
    for count in range(1, tries + 1):
        played = await play()
        result = result_of(played)
        if result is None:
            return played, count
        result.tries = count
        if result.system_error is None or result.system_error_permanent or count == tries:
            break
        retried.append(result.system_error_kind or "system_error")
    result.retried_system_error_kinds = retried
    return played, count


async def run_trial(runner: EpisodeRunner, task: Task, trial: int) -> EpisodeResult:
    """Run (task, trial) under :func:`retry_system_errors` (``runner.config.max_system_error_retries``).

    Each try starts from a fresh sandbox (the runner asks its factory for one).
    Transport-level retries (HTTP 429/5xx) happen below this, in the clients.

    Returns:
        The first scored result, or the last system-error result (``reward`` None)
        when every try hit a system error. ``tries`` counts the tries;
        ``retried_system_error_kinds`` holds the kinds of the tries that were retried.
    """
    result, _ = await retry_system_errors(
        lambda: runner.run(task, trial),
        runner.config.max_system_error_retries,
        lambda played: played,
    )
    return result
