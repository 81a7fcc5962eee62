"""Rollout groups for GRPO: G episodes of one task, refilled and filtered.

A group whose rewards are all equal teaches nothing and is replaced by a fresh
group (DAPO dynamic sampling, arXiv 2503.14476). A group hit by a system error
(after the attempt's own retries) is refilled from a fresh task, never scored.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.tasks.schema import Task
from rewardbox.training.advantages import ADVANTAGE_ESTIMATORS, is_zero_variance

AttemptFn = Callable[[Task, int], Awaitable[EpisodeResult]]


@dataclass
class Group:
    """G rollouts of one task with their advantages (one per rollout)."""

    task: Task
    rollouts: list[EpisodeResult]
    advantages: list[float] = field(default_factory=list)

    @property
    def rewards(self) -> list[float]:
        return [float(r.reward) for r in self.rollouts if r.reward is not None]


@dataclass
class GroupStats:
    """What one step's sampling saw: groups drawn and why groups were dropped."""

    drawn: int = 0
    zero_variance: int = 0
    system_error: int = 0
    episodes: int = 0
    rewards: list[float] = field(default_factory=list)

    @property
    def mean_reward(self) -> float | None:
        """Mean reward over every scored rollout drawn, dropped groups included.

        None when no rollout was scored (every one a system error): a mean of
        nothing is no value, never NaN (see ``scored_rollouts``).
        """
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    @property
    def scored_rollouts(self) -> int:
        """Rollouts that got a reward (not system errors); the count behind ``mean_reward``."""
        return len(self.rewards)

    @property
    def zero_variance_frac(self) -> float:
        return self.zero_variance / self.drawn if self.drawn else 0.0


def task_stream(pool: Sequence[Task], seed: int) -> Iterator[Task]:
    """Endless shuffled passes over the pool (each pass a fresh permutation)."""
    if not pool:
        raise ValueError("the training pool is empty: nothing to train on (check task_difficulty bands)")
    rng = random.Random(seed)
    while True:
        order = list(pool)
        rng.shuffle(order)
        yield from order


def classify_group(rollouts: Sequence[EpisodeResult]) -> str:
    """``"system_error"`` if any rollout is one, ``"zero_variance"`` if all rewards equal, else ``"ok"``."""
    if any(r.system_error is not None for r in rollouts):
        return "system_error"
    if is_zero_variance([float(r.reward) for r in rollouts]):
        return "zero_variance"
    return "ok"


async def collect_groups(
    tasks: Iterator[Task],
    attempt_fn: AttemptFn,
    *,
    group_size: int,
    groups_wanted: int,
    max_refill_rounds: int,
    estimator: str = "grpo",
    trial_offset: int = 0,
) -> tuple[list[Group], GroupStats]:
    """Draw groups until ``groups_wanted`` have reward variance, or refills run out.

    Each round draws as many fresh tasks as groups are still missing and runs
    their ``group_size`` rollouts concurrently. Trials are numbered from
    ``trial_offset`` so seeds differ between steps.

    Returns:
        (accepted groups with advantages, sampling stats). Fewer groups than
        wanted when every refill round produced zero-variance groups.
    """
    accepted: list[Group] = []
    stats = GroupStats()
    advantage_fn = ADVANTAGE_ESTIMATORS[estimator]
    for _ in range(max_refill_rounds + 1):
        missing = groups_wanted - len(accepted)
        if missing <= 0:
            break
        drawn = [next(tasks) for _ in range(missing)]
        runs = [[attempt_fn(task, trial_offset + i) for i in range(group_size)] for task in drawn]
        results = await asyncio.gather(*(asyncio.gather(*group) for group in runs))
        for task, rollouts in zip(drawn, results):
            stats.drawn += 1
            stats.episodes += len(rollouts)
            stats.rewards += [float(r.reward) for r in rollouts if r.system_error is None]
            kind = classify_group(rollouts)
            if kind == "ok":
                rewards = [float(r.reward) for r in rollouts]
                accepted.append(Group(task, list(rollouts), list(advantage_fn(rewards))))
            elif kind == "zero_variance":
                stats.zero_variance += 1
            else:
                stats.system_error += 1
    return accepted, stats
