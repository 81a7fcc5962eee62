"""What the probe already ran on each training task: its clean counts and its trial numbers.

GRPO starts from it twice (issue #23 items 2 and 4): the task sampler's running
posterior starts at the probe's ``(c, n)`` instead of the prior
(``curriculum.PosteriorTaskSampler``), and the run's trial numbers start after
the probe's, so no GRPO rollout replays a probe episode (``groups.TrialNumbers``;
the per-turn seeds are a function of (task, trial, turn), ``rewardbox.episode.seeds``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from rewardbox.metrics.rows import task_counts


@dataclass(frozen=True)
class ProbeHistory:
    """Per task uid: ``counts`` ``(c, n)`` clean successes and clean trials, and ``next_trial``,
    one past the highest probe trial (system errors included: their seeds were used too)."""

    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    next_trial: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, probe_rows: pl.DataFrame) -> ProbeHistory:
        """From ``probe_results`` rows (``uid``, ``trial``, ``passed`` or ``reward``, ``system_error``).

        Raises:
            ValueError: a missing column or a clean row without an outcome
                (``rewardbox.metrics.rows.task_counts``'s message).
        """
        if probe_rows.height == 0:
            return cls()
        if "trial" not in probe_rows.columns:
            raise ValueError(f"probe rows need a 'trial' column; got {probe_rows.columns}")
        counts = task_counts(probe_rows, "probe rows")
        last = probe_rows.group_by("uid").agg(pl.col("trial").max().cast(pl.Int64).alias("last"))
        return cls(
            counts={u: (int(c), int(n)) for u, c, n in counts.select("uid", "c", "n").iter_rows()},
            next_trial={u: int(t) + 1 for u, t in last.iter_rows()},
        )
