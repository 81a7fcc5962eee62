"""The training pool from a profile: kept difficulty bands, the reference gate, teachable tasks only."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from rewardbox.config.profile import Profile
from rewardbox.runtime.stages import StageRun
from rewardbox.selection import teachable
from rewardbox.selection import training_pool as select_pool
from rewardbox.selection.reference import gate_pool, reference_verdicts
from rewardbox.tasks.schema import Task, task_set_version


def training_pool(
    profile: Profile,
    difficulty: pl.DataFrame,
    reference_rows: pl.DataFrame,
    candidates: Sequence[Task],
) -> StageRun:
    """The candidates in ``selection.kept_bands`` that the reference solved (when one is configured).

    Args:
        difficulty: one row per candidate (``selection.difficulty.DIFFICULTY_COLUMNS``).
        reference_rows: the reference policy's trial rows (ignored without ``profile.reference``).
        candidates: the screened candidates; only ``split == "candidate"`` tasks can enter.

    Returns:
        ``extra``: the pool (``list[Task]``, never a benchmark task); ``metadata``: its size, the kept
        bands, the reference gate's removals, the tasks left out because they teach nothing
        (``selection.teachable``), the pool's rows and its task-set version.
    """
    rows = select_pool(difficulty, profile.selection)
    gate: dict = {"reference_gate": "off"}
    if profile.reference is not None:
        verdicts = reference_verdicts(reference_rows, profile.reference)
        rows, removed = gate_pool(rows, verdicts)
        gate = {
            "reference_gate": f"{profile.reference.rule} rule",
            "reference_removed": removed.height,
            "reference_removed_tasks": removed,
        }
    uids = set(rows["uid"].to_list())
    pool, teach_nothing = teachable(
        [t for t in candidates if t.uid in uids and t.split == "candidate"]
    )
    metadata = {"tasks": len(pool), "kept_bands": list(profile.selection.kept_bands), **gate}
    metadata |= {"left_out_teach_nothing": teach_nothing, "table": rows}
    return StageRun(rows, metadata | {"input_hash": task_set_version(pool)}, extra=pool)
