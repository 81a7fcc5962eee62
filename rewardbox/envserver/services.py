"""What every session of the environment server shares: tasks, sandbox factory, user simulator, grader.

Built once per server from parts (:func:`build_services`) that the runtime floor builds from a
profile (``rewardbox.runtime.verl_services``: the composition root's sandbox, user simulator and
the same ``TestRunner`` grading pool that evaluation uses), so a reward from the server is the
reward evaluation would give the same episode. Nothing here reads a profile.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rewardbox.episode.config import EpisodeConfig
from rewardbox.episode.runner import Grader
from rewardbox.episode.stepwise import StepwiseEpisode
from rewardbox.episode.user_simulator import UserSimulator
from rewardbox.sandbox.base import SandboxFactory
from rewardbox.tasks.schema import Task


class UnknownTaskError(LookupError):
    """``reset`` named a task uid the server does not serve (caller error; the message lists some uids)."""


class InvalidResetError(ValueError):
    """``reset`` got a value it cannot use, e.g. ``trial`` < 0 or not an integer (caller error)."""


def check_trial(trial: object) -> int:
    """``trial`` as an int >= 0 (the repetition index of an episode, as in evaluation).

    Raises:
        InvalidResetError: a negative, fractional, boolean or non-numeric ``trial``.
    """
    if isinstance(trial, bool) or not isinstance(trial, int) or trial < 0:
        raise InvalidResetError(f"trial must be an integer >= 0, got {trial!r}")
    return trial


@dataclass
class EnvServices:
    """Shared, read-only parts of the server; each session builds its own episode from them.

    Attributes:
        tasks: served tasks by uid, in load order.
        sandbox_factory: one fresh sandbox per episode (episodes never share a backend).
        user_simulator: the scripted (or endpoint) user; stateless between episodes.
        grader: the grading pool; thread-safe, shared by all sessions.
        config: episode limits (turns, steps per user turn).
    """

    tasks: dict[str, Task]
    sandbox_factory: SandboxFactory
    user_simulator: UserSimulator | None
    grader: Grader
    config: EpisodeConfig = field(default_factory=EpisodeConfig)

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("the environment server needs at least one task")

    def pick_task(self, task_uid: str | None, seed: int | None) -> Task:
        """The task named by ``task_uid``; else, by ``seed``, one of the tasks (deterministic).

        Raises:
            UnknownTaskError: ``task_uid`` is not served.
        """
        if task_uid is not None:
            if task_uid not in self.tasks:
                known = ", ".join(list(self.tasks)[:5])
                raise UnknownTaskError(
                    f"unknown task {task_uid!r}; the server has {len(self.tasks)} tasks, "
                    f"e.g. {known} (GET /tasks lists them)"
                )
            return self.tasks[task_uid]
        uids = list(self.tasks)
        if seed is None:
            return self.tasks[uids[0]]
        index = int.from_bytes(hashlib.sha256(str(seed).encode()).digest()[:8], "big") % len(uids)
        return self.tasks[uids[index]]

    def new_episode(self, task: Task, trial: int) -> StepwiseEpisode:
        """A fresh step-wise episode of ``task`` (its own sandbox when started)."""
        return StepwiseEpisode(
            task,
            trial,
            sandbox_factory=self.sandbox_factory,
            user_simulator=self.user_simulator,
            grader=self.grader,
            config=self.config,
        )

    def close(self) -> None:
        """Stop the grading workers (if the grader has any)."""
        close = getattr(self.grader, "close", None)
        if callable(close):
            close()


class SharedParts(Protocol):
    """The parts every session shares (``rewardbox.training.verl.agent_loop.LoopServices`` has them)."""

    sandbox_factory: SandboxFactory
    user_simulator: UserSimulator | None
    grader: Grader
    config: EpisodeConfig


def build_services(tasks: Sequence[Task], parts: SharedParts) -> EnvServices:
    """The server's shared services: ``tasks`` served by uid, on ``parts``
    (``rewardbox.runtime.verl_services.loop_services`` of a profile)."""
    return EnvServices(
        tasks={t.uid: t for t in tasks},
        sandbox_factory=parts.sandbox_factory,
        user_simulator=parts.user_simulator,
        grader=parts.grader,
        config=parts.config,
    )
