"""Wiring: build an episode runner (sandbox, user simulator, grader) from a profile.

This is the one place where the embedded defaults and the real external
components are picked from config; assets and tests call ``run_trials``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from rewardbox.tasks.config import TaskSource
from rewardbox.episode.budget import check_token_budget
from rewardbox.episode.executor import EpisodeExecutor, build_executor
from rewardbox.episode.progress import Progress, ProgressSink, emit
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.episode.user_simulator import EndpointUser, ScriptedUser, UserSimulator
from rewardbox.evaluation.campaign import campaign_keys, result_row, results_frame, rows_frame, run_campaign
from rewardbox.evaluation.journal import CampaignJournal
from rewardbox.grading.testrunner import TestRunner
from rewardbox.policy.base import Policy
from rewardbox.sandbox.base import SandboxFactory
from rewardbox.sandbox.factory import build_sandbox_factory
from rewardbox.sandbox.servers_config import ServersConfig, load_servers_config, merge_servers_configs
from rewardbox.tasks.schema import Task
from rewardbox.tasks.sources import resolve_dataset

if TYPE_CHECKING:  # the profile composes this package's config; a runtime import would be a cycle
    from rewardbox.config.profile import Profile


def build_user_simulator(profile: Profile) -> UserSimulator:
    cfg = profile.user
    if cfg.kind == "endpoint":
        return EndpointUser(cfg.base_url, cfg.model, cfg.api_key_env, cfg.temperature)
    return ScriptedUser()


def _source_servers_path(source: TaskSource) -> Path:
    """A source's ``servers`` file: absolute, or relative to the working directory, else to the dataset."""
    path = Path(source.servers).expanduser()
    if path.is_absolute() or path.exists():
        return path
    return resolve_dataset(source.dataset) / source.servers


def profile_servers_config(profile: Profile) -> ServersConfig:
    """The union of ``sandbox.servers_yaml`` and every task source's ``servers`` file.

    Files are read once each (the same path twice counts once). Server names
    are global across the files (``merge_servers_configs``).

    Raises:
        ValueError: no servers file is configured at all.
        ServersConfigError: a file is unreadable or invalid, or one server name
            has two different definitions (names the files and the field).
    """
    sources = [*profile.tasks.candidates, *profile.tasks.benchmark]
    paths = [Path(profile.sandbox.servers_yaml).expanduser()] if profile.sandbox.servers_yaml else []
    paths += [_source_servers_path(s) for s in sources if s.servers]
    paths = list(dict.fromkeys(p.resolve() for p in paths))
    if not paths:
        raise ValueError(f"profile {profile.name!r}: sandbox.kind 'external' needs sandbox.servers_yaml "
                         "or a 'servers' file on at least one task source")
    return merge_servers_configs([load_servers_config(p) for p in paths])


def build_sandbox(profile: Profile) -> SandboxFactory:
    """A zero-argument factory of fresh sandboxes, as the profile says.

    ``external`` serves the union of the profile's and the task sources'
    servers files (``profile_servers_config``); ``sandbox.tool_timeout_s`` is
    the per-tool-call limit. Config errors surface here, before any episode.
    """
    cfg = profile.sandbox
    if cfg.kind == "external":
        return build_sandbox_factory("external", servers=profile_servers_config(profile),
                                     timeouts={"tool_s": cfg.tool_timeout_s})
    if cfg.kind == "proxy":
        return build_sandbox_factory("proxy", base_url=cfg.proxy_url)
    return build_sandbox_factory("inprocess")


@asynccontextmanager
async def episode_runner(profile: Profile, policy: Policy, grader: TestRunner | None = None) -> AsyncIterator[EpisodeRunner]:
    """An ``EpisodeRunner`` for ``policy`` with the profile's sandbox, user and grader.

    The grading worker pool is created here unless one is passed, and closed on exit,
    as is the sandbox factory's warm server pool (when it has one).
    """
    own = grader is None
    if own:
        grader = TestRunner(max_workers=profile.grading.workers, timeout_s=profile.grading.timeout_s,
                            judge_config=profile.grading.judge_config())
    sandboxes = build_sandbox(profile)
    try:
        yield EpisodeRunner(policy, sandboxes, build_user_simulator(profile), grader, profile.episode)
    finally:
        if hasattr(sandboxes, "aclose"):
            await sandboxes.aclose()
        if own:
            grader.close()


def check_policy_budget(policy: Policy, profile: Profile, tasks: Sequence[Task]) -> None:
    """Fail before any episode when a policy with a known tokenizer (local) has a budget below the
    tasks' longest golden call (``episode.budget.check_token_budget``); endpoints are not checked."""
    tokenizer = getattr(policy, "tokenizer", None)
    if tokenizer is not None:
        budget = getattr(policy, "max_new_tokens", None) or profile.episode.max_new_tokens
        check_token_budget(budget, tasks, tokenizer)


async def run_trials_async(
    tasks: Sequence[Task], trials: int, policy: Policy, profile: Profile,
    *, keys: Sequence[tuple[str, int]] | None = None, log: ProgressSink | None = None,
    label: str = "episodes",
    keep_results: bool = True, on_result: Callable[[EpisodeResult], None] | None = None,
    journal: CampaignJournal | None = None, grader: TestRunner | None = None,
    journal_extra: Callable[[EpisodeResult, Task], dict] | None = None,
    executor: EpisodeExecutor | None = None,
) -> tuple[pl.DataFrame, list[EpisodeResult]]:
    """Run ``tasks x trials`` (or the given keys) with ``policy``; one row per attempt.

    With a ``journal``, keys that already have a clean row there are not run
    again (resume after a crash), every finished attempt is made durable at
    once, and the rows returned are the journal's: one per expected key.

    Args:
        log: where progress lines go (a ``logging.Logger`` such as Dagster's ``context.log``, or a
            ``str -> None`` callable): episodes done / total, running pass rate, system errors and
            ETA at a steady cadence (``rewardbox.episode.progress.Progress``).
        label: names the stage in the progress lines.
        keep_results: keep every full ``EpisodeResult`` (messages, effects with
            three database states: hundreds of KiB each); False keeps only the
            rows, so memory stays flat however many attempts run.
        on_result: called with each finished attempt.
        journal: the campaign's crash-safe journal, or None.
        grader: replaces the profile's grading worker pool (not closed here;
            local executor only: a worker pool does not travel to Ray workers).
        journal_extra: ``(result, task) -> dict`` of extra columns for each
            journal row (e.g. the attempt's DecodeResult JSON, so an export
            after a resume is complete).
        executor: where the episodes run; None builds the profile's
            (``executor.kind``, bounded by ``episode.concurrency``) and closes it after.

    Returns:
        (rows in ``campaign.ROW_SCHEMA``, the full episode results run by this
        call, or ``[]`` without ``keep_results``).

    Raises:
        ValueError: ``executor.kind: ray`` with the local model policy (in-process only).
        TokenBudgetError: a local policy's token budget cannot hold the tasks' golden calls.
    """
    expected = list(keys) if keys is not None else campaign_keys(tasks, trials)
    check_policy_budget(policy, profile, tasks)
    keys = journal.todo(expected) if journal is not None else expected
    if journal is not None and len(keys) < len(expected):
        emit(log, f"resuming: {len(expected) - len(keys)} of {len(expected)} attempts already in {journal.directory}")
    owned = executor is None
    executor = executor or build_executor(profile.executor, profile.episode.concurrency)
    runner_factory = partial(episode_runner, profile, grader=grader)
    domain = {t.uid: t.domain for t in tasks}
    try:
        with Progress(len(keys), label, log) as progress:
            finished = _on_finished(tasks, progress, on_result, journal, journal_extra)
            async with executor.session(runner_factory, policy) as session:
                collected = await run_campaign(tasks, keys, session.run_one,
                                               concurrency=executor.concurrency, on_result=finished,
                                               collect=None if keep_results else partial(result_row, domain=domain))
    finally:
        if owned:
            executor.close()
    if journal is not None:
        journal.flush()
        return journal.rows(expected), (collected if keep_results else [])
    if not keep_results:
        return rows_frame(collected), []
    return results_frame(collected, tasks), collected


def _on_finished(
    tasks: Sequence[Task], progress: Progress, on_result: Callable[[EpisodeResult], None] | None,
    journal: CampaignJournal | None, journal_extra: Callable[[EpisodeResult, Task], dict] | None,
) -> Callable[[EpisodeResult], None]:
    """The per-attempt hook: the caller's ``on_result``, the journal row, then the progress line."""
    by_uid = {t.uid: t for t in tasks}

    def finished(result: EpisodeResult) -> None:
        if on_result is not None:
            on_result(result)
        if journal is not None:
            extra = journal_extra(result, by_uid[result.uid]) if journal_extra else {}
            journal.append({**result.to_row(), "domain": by_uid[result.uid].domain, **extra})
        progress.episode(result)

    return finished


def run_trials(tasks: Sequence[Task], trials: int, policy: Policy, profile: Profile, **kwargs):
    """Synchronous wrapper of ``run_trials_async`` (closes the policy's resources after)."""

    async def main():
        try:
            return await run_trials_async(tasks, trials, policy, profile, **kwargs)
        finally:
            await policy.aclose()

    return asyncio.run(main())
