"""The composition root: sandbox, user simulator, grader and policy built from the profile.

This is the one place where the embedded defaults and the real external
components are picked from config. Every stage that runs episodes (screening,
probes, GRPO rollouts, evaluation, the environment server) asks this module for
its parts and none rebuilds them; :func:`campaign_parts` bundles them for
``rewardbox.episode.run.run_trials`` and the stages below ``runtime``, which never
read the profile themselves.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

from rewardbox.config.profile import Profile
from rewardbox.episode.budget import check_policy_budget as check_episode_budget
from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.parts import CampaignParts
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.user_simulator import EndpointUser, ScriptedUser, UserSimulator
from rewardbox.grading.testrunner import TestRunner
from rewardbox.policy.base import Policy
from rewardbox.policy.config import PolicyConfig
from rewardbox.policy.factory import build_policy as build_policy_from_config
from rewardbox.policy.preflight import Endpoint, preflight
from rewardbox.sandbox.base import SandboxFactory
from rewardbox.sandbox.factory import build_sandbox_factory
from rewardbox.sandbox.servers_config import (
    ServersConfig,
    load_servers_config,
    merge_servers_configs,
)
from rewardbox.tasks.config import TaskSource
from rewardbox.tasks.schema import Task
from rewardbox.tasks.sources import resolve_dataset

SandboxReportSink = Callable[[dict], None]
"""Receives a sandbox factory's ``report()`` when a runner closes (``ExternalSandboxFactory.report``)."""


def build_user_simulator(profile: Profile) -> UserSimulator:
    """The user simulator ``profile.user`` names: an endpoint LLM, or the scripted user (embedded)."""
    cfg = profile.user
    if cfg.kind == "endpoint":
        return EndpointUser(cfg.base_url, cfg.model, cfg.api_key_env, cfg.temperature)
    return ScriptedUser()


def build_grader(profile: Profile) -> TestRunner:
    """The grading worker pool ``profile.grading`` describes; the caller closes it (``close()``)."""
    cfg = profile.grading
    return TestRunner(
        max_workers=cfg.workers, timeout_s=cfg.timeout_s, judge_config=cfg.judge_config()
    )


def build_policy(profile: Profile, checkpoint_dir: str | Path | None = None) -> Policy:
    """The policy ``profile.policy`` names (``rewardbox.policy.factory.build_policy``).

    Args:
        profile: the run's profile.
        checkpoint_dir: for a local policy, the checkpoint to load (overrides the profile's).

    Returns:
        A policy the caller owns and must ``await policy.aclose()``.

    Raises:
        ValueError, FileNotFoundError: a bad policy config or a missing local checkpoint.
    """
    return build_policy_from_config(profile.policy, checkpoint_dir=checkpoint_dir)


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
    paths = (
        [Path(profile.sandbox.servers_yaml).expanduser()] if profile.sandbox.servers_yaml else []
    )
    paths += [_source_servers_path(s) for s in sources if s.servers]
    paths = list(dict.fromkeys(p.resolve() for p in paths))
    if not paths:
        raise ValueError(
            f"profile {profile.name!r}: sandbox.kind 'external' needs sandbox.servers_yaml "
            "or a 'servers' file on at least one task source"
        )
    return merge_servers_configs([load_servers_config(p) for p in paths])


def build_sandbox(profile: Profile) -> SandboxFactory:
    """A zero-argument factory of fresh sandboxes, as the profile says.

    ``external`` serves the union of the profile's and the task sources'
    servers files (``profile_servers_config``); ``sandbox.tool_timeout_s`` is
    the per-tool-call limit. Config errors surface here, before any episode.
    """
    cfg = profile.sandbox
    if cfg.kind == "external":
        return build_sandbox_factory(
            "external",
            servers=profile_servers_config(profile),
            timeouts={"tool_s": cfg.tool_timeout_s},
        )
    if cfg.kind == "proxy":
        return build_sandbox_factory("proxy", base_url=cfg.proxy_url)
    return build_sandbox_factory("inprocess")


@asynccontextmanager
async def episode_runner(
    profile: Profile,
    policy: Policy,
    grader: TestRunner | None = None,
    *,
    episode: EpisodeConfig | None = None,
    on_sandbox_report: SandboxReportSink | None = None,
) -> AsyncIterator[EpisodeRunner]:
    """An ``EpisodeRunner`` for ``policy`` with the profile's sandbox, user and grader.

    The grading worker pool is created here unless one is passed, and closed on exit,
    as is the sandbox factory's warm server pool (when it has one). ``episode`` replaces
    ``profile.episode`` (screening lifts the agent limits); ``on_sandbox_report`` receives the
    sandbox factory's ``report()`` on exit, when it has one (``ExternalSandboxFactory``: per server,
    template start or fallback, reuse status, retirement reason).
    """
    own = grader is None
    if own:
        grader = build_grader(profile)
    sandboxes = build_sandbox(profile)
    try:
        yield EpisodeRunner(
            policy, sandboxes, build_user_simulator(profile), grader, episode or profile.episode
        )
    finally:
        if on_sandbox_report is not None and hasattr(sandboxes, "report"):
            on_sandbox_report(sandboxes.report())
        if hasattr(sandboxes, "aclose"):
            await sandboxes.aclose()
        if own:
            grader.close()


def campaign_parts(
    profile: Profile, on_sandbox_report: SandboxReportSink | None = None
) -> CampaignParts:
    """The explicit parts a campaign below ``runtime`` runs with (``rewardbox.episode.parts``).

    The runner is :func:`episode_runner` bound to ``profile`` (picklable for Ray workers when
    ``on_sandbox_report`` is, e.g. None), the executor is ``profile.executor`` bounded by
    ``episode.concurrency``, and the preflight is :func:`preflight_step` for the profile's endpoints.
    """
    return CampaignParts(
        episode=profile.episode,
        runner=partial(episode_runner, profile, on_sandbox_report=on_sandbox_report),
        executor=profile.executor,
        preflight=partial(preflight_step, profile),
    )


def check_policy_budget(policy: Policy, profile: Profile, tasks: Sequence[Task]) -> None:
    """``rewardbox.episode.budget.check_policy_budget`` with ``profile.episode``.

    Raises:
        TokenBudgetError: the budget cannot hold the longest golden call (a config error).
        TurnBudgetError: the agent limits cannot hold the deepest golden trajectory (a config error).
    """
    check_episode_budget(policy, profile.episode, tasks)


def step_endpoints(
    profile: Profile, policy: Policy | None = None, role: str = "policy"
) -> list[Endpoint]:
    """The OpenAI-compatible endpoints an episode step with ``policy`` calls: the policy (when it is an
    endpoint policy, e.g. a served vLLM checkpoint or the reference), the user simulator and the judge
    (when the profile configures them as endpoints). Keys are read as the clients read them."""
    out = []
    client = getattr(policy, "_client", None)  # EndpointPolicy: its client holds the key it sends
    if getattr(policy, "base_url", None) and getattr(policy, "model", None):
        out.append(Endpoint(role, policy.base_url, policy.model, getattr(client, "api_key", None)))
    if profile.user.kind == "endpoint":
        out.append(
            Endpoint(
                "user simulator",
                profile.user.base_url,
                profile.user.model,
                os.environ.get(profile.user.api_key_env),
            )
        )
    judge = profile.grading.judge_config()
    if judge is not None:
        out.append(
            Endpoint(
                "judge", judge["base_url"], judge["model"], os.environ.get(judge["api_key_env"])
            )
        )
    return out


def policy_config_endpoint(
    config: PolicyConfig, role: str = "policy", api_key: str | None = None
) -> list[Endpoint]:
    """``[Endpoint]`` for an endpoint policy's config (key: ``api_key``, else its ``api_key_env``); ``[]`` otherwise."""
    if config.kind != "endpoint":
        return []
    return [
        Endpoint(role, config.base_url, config.model, api_key or os.environ.get(config.api_key_env))
    ]


def preflight_step(
    profile: Profile,
    policy: Policy | None = None,
    role: str = "policy",
    extra: Sequence[Endpoint] = (),
) -> None:
    """Before any episode: every endpoint of :func:`step_endpoints` (and ``extra``) answers and serves
    its model (``rewardbox.policy.preflight``).

    Raises:
        EndpointPreflightError: one does not; names the role, URL, model and error (a config fault
            of the step, not a system error of an episode).
    """
    preflight([*extra, *step_endpoints(profile, policy, role)])
