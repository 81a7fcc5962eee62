"""Rollout groups for GRPO: G episodes of one task, refilled and filtered.

A group whose rewards are all equal teaches nothing and is replaced by a fresh
group (DAPO dynamic sampling, arXiv 2503.14476). A group hit by a system error
(after the rollout's own system-error retries) either has only its failed rollouts re-run
and, if they still fail, masked (``"rerun"``, the default of
``GRPOConfig.system_error_refill``) or is replaced by a fresh task
(``"replace"``, as the reference run does). A system error is never scored.

Trial numbers (and so the per-turn sampling seeds, ``rewardbox.episode.seeds``)
are never reused for a new draw: :class:`TrialNumbers` hands every (task, draw)
the next ``G`` trials of that task, counted across refill rounds and steps and
starting after the probe's trials, so a task drawn again never replays a group
already run (the probe's or an earlier draw's). Only a system-error re-run
keeps its trial: it is a fresh try of a sample that was never scored.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.tasks.schema import Task
from rewardbox.training.advantages import group_advantages_masked, is_zero_variance

RolloutFn = Callable[[Task, int], Awaitable[EpisodeResult]]
"""Runs one rollout: ``(task, trial) -> EpisodeResult`` (system-error retries included)."""
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
    rounds: int = 0
    repeated_trials: int = 0
    truncated_failures: int = 0

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


def is_truncated(rollout: EpisodeResult) -> bool:
    """True when any agent completion of the rollout hit the token budget (``finish_reason == "length"``)."""
    return any(t.finish_reason == "length" for t in rollout.agent_turns)


class TrialNumbers:
    """Fresh trial numbers per task, across refill rounds and steps.

    Args:
        first_trial: the first trial any task gets, e.g. the probe's trial count
            ``n`` (probes run trials ``0 .. n - 1``).
        first_by_uid: optional per-task first trial (e.g. one past the task's
            highest probe trial); a task's start is the larger of the two.

    ``draw(uid, count)`` returns ``count`` consecutive trials never handed out
    for ``uid`` before. ``record`` keeps the (uid, trial) keys that actually ran
    and counts the repeats (0 unless a caller reuses trials).

    Raises:
        ValueError: a negative first trial or count.
    """

    def __init__(self, first_trial: int = 0, first_by_uid: Mapping[str, int] | None = None):
        if first_trial < 0 or any(v < 0 for v in (first_by_uid or {}).values()):
            raise ValueError(
                f"first trial numbers must be >= 0, got {first_trial} and {first_by_uid}"
            )
        self.first_trial = first_trial
        self._next = {uid: max(first_trial, v) for uid, v in (first_by_uid or {}).items()}
        self._ran: set[tuple[str, int]] = set()

    def draw(self, uid: str, count: int) -> list[int]:
        """The next ``count`` unused trials of ``uid``."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        start = self._next.get(uid, self.first_trial)
        self._next[uid] = start + count
        return list(range(start, start + count))

    def record(self, rollouts: Sequence[EpisodeResult]) -> int:
        """Note the (uid, trial) keys of freshly drawn rollouts; return how many ran before."""
        keys = [(r.uid, r.trial) for r in rollouts]
        repeats = sum(key in self._ran for key in keys)
        self._ran.update(keys)
        return repeats


def task_stream(pool: Sequence[Task], seed: int) -> Iterator[Task]:
    """Endless shuffled passes over the pool (each pass a fresh permutation)."""
    if not pool:
        raise ValueError(
            "the training pool is empty: nothing to train on (check task_difficulty bands)"
        )
    rng = random.Random(seed)
    while True:
        order = list(pool)
        rng.shuffle(order)
        yield from order


TRUNCATED_FAILURE_REWARD = 0.0
"""The reward a cut rollout enters the loss with when the budget fits every golden call (a failure)."""


def training_rewards(
    rollouts: Sequence[EpisodeResult], truncation_fails: bool = False
) -> list[float | None]:
    """The rewards the loss sees, one per rollout: the graded reward, None for a system error, and with
    ``truncation_fails`` ``TRUNCATED_FAILURE_REWARD`` for a rollout with a completion cut by the token
    budget. Used when the budget holds every golden call (``check_token_budget`` passed): a cut
    completion is then the policy running on, a policy failure, and gets a negative advantage
    whenever its group has a better rollout (issue #23 item 3)."""
    return [
        None
        if r.system_error is not None or r.reward is None
        else TRUNCATED_FAILURE_REWARD
        if truncation_fails and is_truncated(r)
        else float(r.reward)
        for r in rollouts
    ]


def classify_group(
    rollouts: Sequence[EpisodeResult], rewards: Sequence[float | None] | None = None
) -> str:
    """``"system_error"`` if any rollout is one, ``"zero_variance"`` if all rewards equal, else ``"ok"``.

    ``rewards``: the rewards to judge (``training_rewards``); default the graded ones."""
    if any(r.system_error is not None for r in rollouts):
        return "system_error"
    scored = training_rewards(rollouts) if rewards is None else rewards
    if is_zero_variance([float(x) for x in scored]):
        return "zero_variance"
    return "ok"


def classify_masked(
    rollouts: Sequence[EpisodeResult], rewards: Sequence[float | None] | None = None
) -> str:
    """Like :func:`classify_group` over the clean rollouts only: ``"zero_variance"``
    when fewer than two are clean or their rewards are all equal, else ``"ok"``."""
    scored = training_rewards(rollouts) if rewards is None else rewards
    rewards = [float(x) for r, x in zip(rollouts, scored) if r.system_error is None]
    return "zero_variance" if len(rewards) < 2 or is_zero_variance(rewards) else "ok"


async def rerun_system_errors(
    task: Task, rollouts: list[EpisodeResult], rollout_fn: RolloutFn, rounds: int, stats: GroupStats
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
    task: Task,
    rollouts: list[EpisodeResult],
    rollout_fn: RolloutFn,
    refill: str,
    reruns: int,
    estimator: str,
    stats: GroupStats,
    observe: ObserveFn | None = None,
    truncation_fails: bool = False,
) -> Group | None:
    """One drawn group -> an accepted ``Group`` with advantages, or None (counted in ``stats``).

    With ``truncation_fails`` a clean rollout with a completion cut by the token budget
    enters the group's statistics and advantages as a failure (reward 0; see
    :func:`training_rewards`); ``stats.rewards`` keeps the graded rewards."""
    if refill == "rerun" and any(r.system_error is not None for r in rollouts):
        rollouts = await rerun_system_errors(task, rollouts, rollout_fn, reruns, stats)
    if observe is not None:
        observe(task, rollouts)
    stats.rewards += [float(r.reward) for r in rollouts if r.system_error is None]
    valid = [r.system_error is None for r in rollouts]
    stats.masked_system_errors += valid.count(False) if refill == "rerun" else 0
    scored = training_rewards(rollouts, truncation_fails)
    stats.truncated_failures += sum(
        r.reward is not None and s != r.reward for r, s in zip(rollouts, scored)
    )
    kind = (
        classify_group(rollouts, scored)
        if refill == "replace"
        else classify_masked(rollouts, scored)
    )
    if kind == "system_error":
        stats.system_error += 1
        return None
    if kind == "zero_variance":
        stats.zero_variance += 1
        return None
    rewards = [s if ok else None for s, ok in zip(scored, valid)]
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
    trials: TrialNumbers | None = None,
    truncation_fails: bool = False,
) -> tuple[list[Group], GroupStats]:
    """Draw groups until ``groups_wanted`` have reward variance, or refills run out.

    Each round draws as many fresh tasks as groups are still missing and runs their ``group_size``
    rollouts concurrently. Every (task, draw) gets fresh trials from ``trials`` (a
    :class:`TrialNumbers` shared by the run's steps; default a new one from ``trial_offset``), so a
    task drawn twice never replays a group. A group with system errors is either replaced by a fresh
    task (``system_error_refill="replace"``) or has only its failed rollouts re-run (``"rerun"``, at
    most ``max_system_error_reruns`` rounds), those still failing masked: advantage 0 and statistics
    over the clean rollouts (``group_advantages_masked``). ``observe(task, rollouts)`` sees every
    drawn group, kept or not (the curriculum's running posterior,
    ``curriculum.PosteriorTaskSampler``). ``truncation_fails``: cut rollouts count as failures
    (:func:`training_rewards`).

    Returns:
        (accepted groups with advantages, sampling stats). Fewer groups than wanted when every
        refill round produced unusable groups (``stats.rounds``: rounds run).

    Raises:
        ValueError: an unknown ``system_error_refill``.
    """
    if system_error_refill not in ("rerun", "replace"):
        raise ValueError(
            f"system_error_refill must be 'rerun' or 'replace', got {system_error_refill!r}"
        )
    trials = TrialNumbers(trial_offset) if trials is None else trials
    accepted, stats = [], GroupStats()
    settle = partial(
        _settle,
        rollout_fn=rollout_fn,
        refill=system_error_refill,
        reruns=max_system_error_reruns,
        estimator=estimator,
        stats=stats,
        observe=observe,
        truncation_fails=truncation_fails,
    )
    while (missing := groups_wanted - len(accepted)) > 0 and stats.rounds <= max_refill_rounds:
        accepted += await _round(tasks, missing, rollout_fn, trials, group_size, stats, settle)
    return accepted, stats


async def _round(
    tasks: Iterator[Task],
    missing: int,
    rollout_fn: RolloutFn,
    trials: TrialNumbers,
    group_size: int,
    stats: GroupStats,
    settle: Callable[..., Awaitable[Group | None]],
) -> list[Group]:
    """One round of :func:`collect_groups` (rounds count in ``stats.rounds``): ``missing`` fresh tasks, a
    group of rollouts each, settled; the usable groups."""
    drawn = [next(tasks) for _ in range(missing)]
    runs = [
        [rollout_fn(task, trial) for trial in trials.draw(task.uid, group_size)] for task in drawn
    ]
    results = await asyncio.gather(*(asyncio.gather(*group) for group in runs))
    stats.rounds += 1
    stats.drawn += len(drawn)
    stats.episodes += sum(len(r) for r in results)
    stats.repeated_trials += trials.record([r for group in results for r in group])
    settled = await asyncio.gather(
        *(settle(task, list(rollouts)) for task, rollouts in zip(drawn, results))
    )
    return [g for g in settled if g is not None]
