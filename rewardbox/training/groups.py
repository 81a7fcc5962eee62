"""Rollout groups for GRPO: G episodes of one task, refilled and filtered.

A group whose rewards are all equal teaches nothing and is replaced by a fresh
group (DAPO dynamic sampling, arXiv 2503.14476). A group hit by a system error
(after the rollout's own system-error retries) either has only its failed rollouts re-run
and, if they still fail, masked (``"rerun"``, the default of
``GRPOConfig.system_error_refill``) or is replaced by a fresh task
(``"replace"``, as the reference run does). A system error is never scored.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.tasks.schema import Task
from rewardbox.training.advantages import group_advantages_masked, is_zero_variance

RolloutFn = Callable[[Task, int], Awaitable[EpisodeResult]]
"""Runs one rollout: ``(task, trial) -> EpisodeResult`` (system-error retries included)."""
AttemptFn = RolloutFn  # kept for users of the old name
ObserveFn = Callable[[Task, list[EpisodeResult]], None]


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
    reruns: int = 0
    masked_system_errors: int = 0
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


def classify_masked(rollouts: Sequence[EpisodeResult]) -> str:
    """Like :func:`classify_group` over the clean rollouts only: ``"zero_variance"``
    when fewer than two are clean or their rewards are all equal, else ``"ok"``."""
    rewards = [float(r.reward) for r in rollouts if r.system_error is None]
    return "zero_variance" if len(rewards) < 2 or is_zero_variance(rewards) else "ok"


async def rerun_system_errors(
    task: Task, rollouts: list[EpisodeResult], rollout_fn: RolloutFn, rounds: int, stats: "GroupStats"
) -> list[EpisodeResult]:
    """Re-run only the system-error rollouts of one group, same task and trial, up to ``rounds`` times.

    A trial keeps its key (task uid, trial) and so its sampling seeds; a system
    error is an infrastructure fault, so re-running the same trial is a fresh
    try of the same sample. Returns the group with each re-run result in its slot.
    """
    rollouts = list(rollouts)
    for _ in range(rounds):
        failed = [i for i, r in enumerate(rollouts) if r.system_error is not None]
        if not failed:
            break
        stats.reruns += len(failed)
        stats.episodes += len(failed)
        again = await asyncio.gather(*(rollout_fn(task, rollouts[i].trial) for i in failed))
        for i, result in zip(failed, again):
            rollouts[i] = result
    return rollouts


async def _settle(
    task: Task, rollouts: list[EpisodeResult], rollout_fn: RolloutFn, refill: str, reruns: int,
    estimator: str, stats: "GroupStats", observe: ObserveFn | None = None,
) -> Group | None:
    """One drawn group -> an accepted ``Group`` with advantages, or None (counted in ``stats``)."""
    if refill == "rerun" and any(r.system_error is not None for r in rollouts):
        rollouts = await rerun_system_errors(task, rollouts, rollout_fn, reruns, stats)
    if observe is not None:
        observe(task, rollouts)
    stats.rewards += [float(r.reward) for r in rollouts if r.system_error is None]
    valid = [r.system_error is None for r in rollouts]
    stats.masked_system_errors += valid.count(False) if refill == "rerun" else 0
    kind = classify_group(rollouts) if refill == "replace" else classify_masked(rollouts)
    if kind == "system_error":
        stats.system_error += 1
        return None
    if kind == "zero_variance":
        stats.zero_variance += 1
        return None
    rewards = [r.reward if ok else None for r, ok in zip(rollouts, valid)]
    return Group(task, list(rollouts), group_advantages_masked(rewards, valid, estimator))


async def collect_groups(
    tasks: Iterator[Task],
    rollout_fn: RolloutFn,
    *,
    group_size: int,
    groups_wanted: int,
    max_refill_rounds: int,
    estimator: str = "grpo",
    trial_offset: int = 0,
    system_error_refill: str = "replace",
    max_system_error_reruns: int = 0,
    observe: ObserveFn | None = None,
) -> tuple[list[Group], GroupStats]:
    """Draw groups until ``groups_wanted`` have reward variance, or refills run out.

    Each round draws as many fresh tasks as groups are still missing and runs
    their ``group_size`` rollouts concurrently. Trials are numbered from
    ``trial_offset`` so seeds differ between steps. A group with system errors
    is either replaced by a fresh task (``system_error_refill="replace"``) or
    has only its failed rollouts re-run (``"rerun"``, at most
    ``max_system_error_reruns`` rounds), those still failing masked: advantage 0
    and statistics over the clean rollouts (``group_advantages_masked``).
    ``observe(task, rollouts)`` sees every drawn group, kept or not (the
    curriculum's running posterior, ``curriculum.PosteriorTaskSampler``).

    Returns:
        (accepted groups with advantages, sampling stats). Fewer groups than
        wanted when every refill round produced unusable groups.

    Raises:
        ValueError: an unknown ``system_error_refill``.
    """
    if system_error_refill not in ("rerun", "replace"):
        raise ValueError(f"system_error_refill must be 'rerun' or 'replace', got {system_error_refill!r}")
    accepted: list[Group] = []
    stats = GroupStats()
    for _ in range(max_refill_rounds + 1):
        missing = groups_wanted - len(accepted)
        if missing <= 0:
            break
        drawn = [next(tasks) for _ in range(missing)]
        runs = [[rollout_fn(task, trial_offset + i) for i in range(group_size)] for task in drawn]
        results = await asyncio.gather(*(asyncio.gather(*group) for group in runs))
        stats.drawn += len(drawn)
        stats.episodes += sum(len(r) for r in results)
        settled = await asyncio.gather(*(
            _settle(task, list(rollouts), rollout_fn, system_error_refill, max_system_error_reruns, estimator, stats,
                    observe)
            for task, rollouts in zip(drawn, results)
        ))
        accepted += [g for g in settled if g is not None]
    return accepted, stats
