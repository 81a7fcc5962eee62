"""Wiring: build an episode runner (sandbox, user simulator, grader) from a profile.

This is the one place where the embedded defaults and the real external
components are picked from config; assets and tests call ``run_trials``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial

import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.episode.attempt import run_attempt
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.episode.user_simulator import EndpointUser, ScriptedUser, UserSimulator
from rewardbox.evaluation.campaign import campaign_keys, results_frame, run_campaign
from rewardbox.grading.testrunner import TestRunner
from rewardbox.policy.base import Policy
from rewardbox.sandbox.factory import build_sandbox_factory
from rewardbox.tasks.schema import Task


def build_user_simulator(profile: Profile) -> UserSimulator:
    cfg = profile.user
    if cfg.kind == "endpoint":
        return EndpointUser(cfg.base_url, cfg.model, cfg.api_key_env, cfg.temperature)
    return ScriptedUser()


def build_sandbox(profile: Profile):
    """A zero-argument factory of fresh sandboxes, as the profile says."""
    cfg = profile.sandbox
    if cfg.kind == "external":
        return build_sandbox_factory("external", servers_yaml=cfg.servers_yaml, tool_timeout_s=cfg.tool_timeout_s)
    if cfg.kind == "proxy":
        return build_sandbox_factory("proxy", base_url=cfg.proxy_url)
    return build_sandbox_factory("inprocess")


@asynccontextmanager
async def episode_runner(profile: Profile, policy: Policy, grader: TestRunner | None = None) -> AsyncIterator[EpisodeRunner]:
    """An ``EpisodeRunner`` for ``policy`` with the profile's sandbox, user and grader.

    The grading worker pool is created here unless one is passed, and closed on exit.
    """
    own = grader is None
    if own:
        grader = TestRunner(max_workers=profile.grading.workers, timeout_s=profile.grading.timeout_s,
                            judge_config=profile.grading.judge_config())
    try:
        yield EpisodeRunner(policy, build_sandbox(profile), build_user_simulator(profile), grader, profile.episode)
    finally:
        if own:
            grader.close()


async def run_trials_async(
    tasks: Sequence[Task], trials: int, policy: Policy, profile: Profile,
    *, keys: Sequence[tuple[str, int]] | None = None, log: Callable[[str], None] | None = None,
) -> tuple[pl.DataFrame, list[EpisodeResult]]:
    """Run ``tasks x trials`` (or the given keys) with ``policy``; one row per attempt.

    Returns:
        (rows in ``campaign.ROW_SCHEMA``, the full episode results).
    """
    keys = list(keys) if keys is not None else campaign_keys(tasks, trials)
    done = 0

    def progress(result: EpisodeResult) -> None:
        nonlocal done
        done += 1
        if log and (done % 10 == 0 or done == len(keys)):
            log(f"{done}/{len(keys)} attempts; last {result.uid}#{result.trial} reward={result.reward} "
                f"finish={result.finish_reason}")

    async with episode_runner(profile, policy) as runner:
        results = await run_campaign(tasks, keys, partial(run_attempt, runner),
                                     concurrency=profile.episode.concurrency, on_result=progress)
    return results_frame(results, tasks), results


def run_trials(tasks: Sequence[Task], trials: int, policy: Policy, profile: Profile, **kwargs):
    """Synchronous wrapper of ``run_trials_async`` (closes the policy's resources after)."""

    async def main():
        try:
            return await run_trials_async(tasks, trials, policy, profile, **kwargs)
        finally:
            await policy.aclose()

    return asyncio.run(main())
