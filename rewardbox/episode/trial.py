"""One trial: an episode of (task, trial), retried on system errors with a fresh sandbox."""

from __future__ import annotations

from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.tasks.schema import Task


async def run_trial(runner: EpisodeRunner, task: Task, trial: int) -> EpisodeResult:
    """Run (task, trial); a transient system error is retried up to ``max_system_error_retries`` times.

    A permanent one (``EpisodeResult.system_error_permanent``: no judge endpoint,
    test code that cannot be imported) is returned at once: retrying cannot fix it.

    Each try starts from a fresh sandbox (the runner asks its factory for one).
    Transport-level retries (HTTP 429/5xx) happen below this, in the clients.

    Returns:
        The first scored result, or the last system-error result (``reward`` None)
        when every try hit a system error. ``tries`` counts the tries;
        ``retried_system_error_kinds`` holds the kinds of the tries that were retried.
    """
    tries = runner.config.max_system_error_retries + 1
    retried: list[str] = []
    for count in range(1, tries + 1):
        result = await runner.run(task, trial)
        result.tries = count
        if result.system_error is None or result.system_error_permanent or count == tries:
            break
        retried.append(result.system_error_kind or "system_error")
    result.retried_system_error_kinds = retried
    return result
