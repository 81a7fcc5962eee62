"""The shared episode parts of a verl worker and of the environment server, built from a profile.

``verl_loop_services`` is the verl agent loop's default ``services_factory``
(``rewardbox.training.verl.agent_loop.DEFAULT_SERVICES``, named as ``"module:function"`` and
called once per verl loop process); ``loop_services`` and ``load_served_tasks`` build the same
parts for ``python -m rewardbox.envserver``. One composition root (``rewardbox.runtime.compose``)
for all of them and for evaluation, so a reward from verl or the server is the reward evaluation
would give the same episode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rewardbox.config.profile import Profile, load_profile, profile_from_env
from rewardbox.episode.config import EpisodeConfig
from rewardbox.runtime.compose import build_grader, build_sandbox, build_user_simulator
from rewardbox.tasks.config import TaskSource
from rewardbox.tasks.schema import Task
from rewardbox.tasks.sources import load_sources
from rewardbox.training.verl.agent_loop import LoopServices


def load_served_tasks(
    profile: Profile, domains: Sequence[str] = (), datasets: Sequence[str] = ()
) -> list[Task]:
    """Tasks to serve: the named embedded domains and ThinkingBox dataset directories, else the profile's candidates.

    Raises:
        ValueError: nothing loaded; the message carries the loaders' errors (file, line, field).
    """
    sources = [TaskSource(dataset=f"embedded:{d}") for d in domains] + [
        TaskSource(dataset=p) for p in datasets
    ]
    loaded = load_sources(sources or profile.tasks.candidates, "candidate")
    if not loaded.tasks:
        raise ValueError("no task loaded: " + ("; ".join(loaded.errors) or "the sources are empty"))
    return loaded.tasks


def loop_services(profile: Profile) -> LoopServices:
    """What every episode of one process shares, from the profile's ``sandbox``, ``user``, ``grading``
    and ``episode`` sections: sandbox factory, user simulator, grader (the caller closes it), limits."""
    return LoopServices(
        build_sandbox(profile),
        build_user_simulator(profile),
        build_grader(profile),
        profile.episode,
    )


def server_parts(
    profile_name: str,
    domains: Sequence[str] = (),
    datasets: Sequence[str] = (),
    limits: Mapping[str, Any] | None = None,
) -> tuple[list[Task], LoopServices]:
    """The environment server's tasks and shared parts for a profile (name or YAML path).

    Args:
        domains, datasets: what to serve (:func:`load_served_tasks`; none: the profile's candidates).
        limits: ``EpisodeConfig`` fields that override the profile's ``episode`` section.

    Raises:
        FileNotFoundError: no such profile. pydantic.ValidationError: a bad limit (before serving).
        ValueError: no task loaded (:func:`load_served_tasks`).
    """
    profile = load_profile(profile_name)
    episode = EpisodeConfig.model_validate({**profile.episode.model_dump(), **(limits or {})})
    tasks = load_served_tasks(profile, domains, datasets)
    return tasks, loop_services(profile.model_copy(update={"episode": episode}))


def verl_loop_services() -> LoopServices:
    """The verl agent loop's services for the profile named by ``REWARDBOX_PROFILE`` (default ``demo``).

    Returns:
        ``rewardbox.training.verl.agent_loop.LoopServices``: sandbox factory, user simulator, grader, limits.
    """
    return loop_services(profile_from_env())
