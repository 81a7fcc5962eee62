"""The explicit parts a campaign runs with, so that nothing below ``rewardbox.runtime`` reads a profile.

``rewardbox.runtime.compose.campaign_parts(profile)`` builds a :class:`CampaignParts` from a profile;
``rewardbox.episode.run.run_trials``, the screen, the reference probes and the evaluation take one
(docs/package_layers.md, docs/episode_layer.md).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from rewardbox.episode.config import EpisodeConfig, ExecutorConfig
from rewardbox.episode.executor import EpisodeExecutor, RunnerFactory, build_executor
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.policy.base import Policy


class RunnerBuilder(Protocol):
    """``(policy, *, grader, episode) -> async context manager of EpisodeRunner``; picklable for Ray workers."""

    def __call__(
        self, policy: Policy, *, grader: Any = None, episode: EpisodeConfig | None = None
    ) -> AbstractAsyncContextManager[EpisodeRunner]: ...


def _no_preflight(policy: Policy) -> None:
    """No endpoint to check (the default of :class:`CampaignParts`)."""


@dataclass(frozen=True)
class CampaignParts:
    """Everything a campaign needs besides its tasks and policy.

    Attributes:
        episode: the episode limits (``EpisodeConfig``); also the token/turn budget the campaign is
            checked against before any episode (``rewardbox.episode.budget.check_policy_budget``).
        runner: builds the ``EpisodeRunner`` (sandbox factory, user simulator, grader) for a policy
            with a given ``episode`` config (the composition root's ``episode_runner``).
        executor: the executor config used when a campaign is not given an executor; bounded by
            ``episode.concurrency`` open sandboxes.
        preflight: ``policy -> None``; raises ``EndpointPreflightError`` when an endpoint the episodes
            would call does not answer (run once, before any episode, and only when keys remain).
    """

    episode: EpisodeConfig
    runner: RunnerBuilder
    executor: ExecutorConfig
    preflight: Callable[[Policy], None] = _no_preflight

    def runner_factory(self, grader: Any = None) -> RunnerFactory:
        """The executor's ``policy -> runner`` factory with this campaign's episode config (and ``grader``)."""
        return partial(self.runner, grader=grader, episode=self.episode)

    def build_executor(self) -> EpisodeExecutor:
        """A fresh executor of ``executor``'s kind, bounded by ``episode.concurrency`` (the caller closes it)."""
        return build_executor(self.executor, self.episode.concurrency)

    def with_episode(self, **update: Any) -> CampaignParts:
        """These parts with ``episode`` fields replaced (e.g. screening's lifted agent limits)."""
        return replace(self, episode=self.episode.model_copy(update=update))
