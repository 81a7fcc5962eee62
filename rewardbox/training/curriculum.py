"""Task sampling from the GRPO groups themselves: a running Jeffreys posterior per task.

Every group of G rollouts is a probe of the *current* policy on its task. The
sampler keeps, per task of the pool, the clean successes ``c`` and clean
rollouts ``n`` seen during training (starting from the probe counts when
given, else from the prior), and draws the next task with probability
proportional to the variance of its Jeffreys posterior
``Beta(c + 1/2, n - c + 1/2)`` (the same posterior as task selection,
``rewardbox.selection.bands``): tasks whose success rate is most uncertain, or
closest to one half, are the ones whose groups most often have reward
variance. A task whose band (highest posterior mass) becomes ``too_easy``
leaves the pool: the policy being trained has learned it. Difficulty is thus
re-estimated against the policy being trained, not only the base.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.selection.bands import BANDS, DEFAULT_BOUNDARIES, JEFFREYS_PRIOR, assign_band
from rewardbox.tasks.schema import Task


def posterior_variance(c: int, n: int) -> float:
    """Variance of ``Beta(c + 1/2, n - c + 1/2)``: ``ab / ((a + b)^2 (a + b + 1))``; 1/8 at ``n = 0``."""
    a, b = c + JEFFREYS_PRIOR, n - c + JEFFREYS_PRIOR
    return a * b / ((a + b) ** 2 * (a + b + 1))


class PosteriorTaskSampler(Iterator[Task]):
    """Endless task stream weighted by posterior variance; ``observe`` feeds it each group.

    Args:
        pool: the training tasks (non-empty).
        seed: seed of the draws.
        prior_counts: optional ``uid -> (c, n)`` to start from (e.g. the probe's).
        boundaries: band cut points (``SelectionConfig.boundaries``).
        drop_band: the band that removes a task from the pool.

    Raises:
        ValueError: an empty pool.
    """

    def __init__(
        self,
        pool: Sequence[Task],
        seed: int,
        prior_counts: Mapping[str, tuple[int, int]] | None = None,
        boundaries: Sequence[float] = DEFAULT_BOUNDARIES,
        drop_band: str = "too_easy",
    ):
        if not pool:
            raise ValueError(
                "the training pool is empty: nothing to train on (check task_difficulty bands)"
            )
        self.tasks = {t.uid: t for t in pool}
        self.counts = {
            uid: tuple(prior_counts.get(uid, (0, 0))) if prior_counts else (0, 0)
            for uid in self.tasks
        }
        self.boundaries = tuple(boundaries)
        self.drop_band = drop_band
        self.dropped: set[str] = set()
        self._drawn_since_observe: set[str] = set()
        self._rng = random.Random(seed)

    def active(self) -> list[str]:
        """Uids still in the pool, in pool order."""
        return [uid for uid in self.tasks if uid not in self.dropped]

    def __next__(self) -> Task:
        fresh = [
            uid for uid in self.active() if uid not in self._drawn_since_observe
        ] or self.active()
        weights = [posterior_variance(*self.counts[uid]) for uid in fresh]
        uid = self._rng.choices(fresh, weights=weights)[0]
        self._drawn_since_observe.add(uid)
        return self.tasks[uid]

    def observe(self, task: Task, rollouts: Sequence[EpisodeResult]) -> None:
        """Add a group's clean rollouts to its task's counts; drop the task once its band is ``drop_band``.

        System-error rollouts never count. The last active task is never dropped.
        """
        clean = [r for r in rollouts if r.system_error is None]
        c, n = self.counts.get(task.uid, (0, 0))
        self.counts[task.uid] = (c + sum(bool(r.passed) for r in clean), n + len(clean))
        self._drawn_since_observe.discard(task.uid)
        if self.band(task.uid) == self.drop_band and len(self.active()) > 1:
            self.dropped.add(task.uid)

    def band(self, uid: str) -> str:
        """The task's current band under its running posterior."""
        return assign_band(*self.counts[uid], self.boundaries)

    def band_histogram(self) -> dict[str, int]:
        """Tasks of the pool (dropped included) per current band, in ``BANDS`` order."""
        hist = dict.fromkeys(BANDS, 0)
        for uid in self.tasks:
            hist[self.band(uid)] += 1
        return hist


def format_histogram(histogram: Mapping[str, int]) -> str:
    """``"too_hard 0, hard 2, ..."``: one string cell for metadata tables."""
    return ", ".join(f"{band} {count}" for band, count in histogram.items())
