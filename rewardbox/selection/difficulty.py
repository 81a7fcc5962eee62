"""Probe rows -> per-task difficulty table -> training pool.

Probe rows have the trial-row schema of ``rewardbox.metrics.rows`` (``uid``,
``trial``, ``passed`` or ``reward``, ``system_error``, optional ``domain``).
System-error rows are excluded from n and c and counted separately; they are
infrastructure faults, not evidence that the task is hard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from rewardbox.metrics.rows import task_counts
from rewardbox.selection.bands import (
    BANDS,
    JEFFREYS_PRIOR,
    SelectionConfig,
    band_indices,
    band_mass_matrix,
)

if TYPE_CHECKING:
    from rewardbox.tasks.schema import Task

DIFFICULTY_COLUMNS = (
    "uid",
    "domain",
    "n",
    "c",
    "system_errors",
    "posterior_mean",
    "band",
    *(f"mass_{band}" for band in BANDS),
)
"""Columns of :func:`task_difficulty` output, in order (``domain`` only when the probes have it)."""


def task_difficulty(
    probe_rows: pl.DataFrame, config: SelectionConfig | None = None
) -> pl.DataFrame:
    """Per-task policy-relative difficulty from probe rows.

    Args:
        probe_rows: one row per (uid, trial) probe trial of the base policy, ``[trials]``
            rows with ``uid``, ``trial``, ``system_error`` (string or bool) and ``passed``
            (or ``reward``, success when ``>= 1``); optional ``domain``
            (``rewardbox.metrics.rows``). System errors are dropped from n and c, never failures.
        config: selection settings; defaults to ``SelectionConfig()``.

    Returns:
        ``[tasks]`` rows: one per uid, sorted by uid, with ``DIFFICULTY_COLUMNS``: ``n`` clean
        trials, ``c`` clean successes, ``system_errors``, ``posterior_mean``
        = (c + 1/2) / (n + 1), ``band`` (null when ``n < config.min_clean_trials``),
        and ``mass_<band>`` for the five bands (Jeffreys posterior Beta(c + 1/2,
        n - c + 1/2), always filled; with n = 0 they are the prior's masses).
        Source: docs/method.md, "Difficulty bands" (Jeffreys posterior, band of largest mass).

    Raises:
        ValueError: missing columns, duplicated (uid, trial) keys, or a clean
            probe without an outcome; the message names the field and uid.
    """
    config = config or SelectionConfig()
    counts = task_counts(probe_rows, "probe rows")
    n, c = counts["n"].to_numpy(), counts["c"].to_numpy()
    masses = band_mass_matrix(c, n, config.boundaries)
    bands = np.asarray(BANDS, dtype=object)[band_indices(masses)]
    bands[n < config.min_clean_trials] = None
    with_domain = "domain" in counts.columns
    columns = {
        "uid": counts["uid"],
        **({"domain": counts["domain"]} if with_domain else {}),
        "n": counts["n"],
        "c": counts["c"],
        "system_errors": counts["system_errors"],
        "posterior_mean": (c + JEFFREYS_PRIOR) / (n + 2 * JEFFREYS_PRIOR),
        "band": pl.Series(bands.tolist(), dtype=pl.Utf8),
        **{f"mass_{name}": masses[:, i] for i, name in enumerate(BANDS)},
    }
    return pl.DataFrame(columns, schema=_difficulty_schema(with_domain))


def _difficulty_schema(with_domain: bool) -> dict[str, pl.DataType]:
    schema: dict[str, pl.DataType] = {"uid": pl.Utf8}
    if with_domain:
        schema["domain"] = pl.Utf8
    schema.update(
        n=pl.Int64, c=pl.Int64, system_errors=pl.Int64, posterior_mean=pl.Float64, band=pl.Utf8
    )
    schema.update({f"mass_{band}": pl.Float64 for band in BANDS})
    return schema


def training_pool(
    difficulty_df: pl.DataFrame, config: SelectionConfig | None = None
) -> pl.DataFrame:
    """The tasks whose band is in ``config.kept_bands`` (the rows of ``task_difficulty``).

    Tasks without a band (too few clean trials) never enter the pool.

    Args:
        difficulty_df: output of :func:`task_difficulty`, ``[tasks]`` rows.
        config: selection settings; defaults to ``SelectionConfig()`` (kept bands hard,
            medium, easy: the tasks whose GRPO groups can have non-zero reward variance).

    Returns:
        The kept rows ``[kept tasks]``, same columns, sorted by uid; empty when no band is kept.

    Raises:
        ValueError: ``difficulty_df`` has no ``band`` or ``uid`` column.
    """
    config = config or SelectionConfig()
    missing = [c for c in ("uid", "band") if c not in difficulty_df.columns]
    if missing:
        raise ValueError(
            f"difficulty table: missing column(s) {missing}; pass the output of task_difficulty"
        )
    return difficulty_df.filter(pl.col("band").is_in(list(config.kept_bands))).sort("uid")


def teachable(tasks: Sequence[Task]) -> tuple[list[Task], list[str]]:
    """Split screened tasks into those that can teach and the uids of those that cannot.

    A task whose right answer changes nothing and whose do-nothing (null) run
    already passes (``metadata["read_only"]`` and ``metadata["null_passes"]``, set
    by screening) rewards every policy that does nothing: its GRPO groups can only
    be all-pass, so it never enters a training pool. It stays valid for evaluation.

    Returns:
        (tasks kept, in input order; uids left out, in input order).
    """
    kept, left_out = [], []
    for task in tasks:
        if task.metadata.get("read_only") and task.metadata.get("null_passes"):
            left_out.append(task.uid)
        else:
            kept.append(task)
    return kept, left_out


def band_counts(difficulty_df: pl.DataFrame) -> pl.DataFrame:
    """Tasks per (domain, band): ``domain`` (``"(all)"`` if absent), ``band``, ``tasks``.

    Every band of ``BANDS`` appears for every domain (count 0 if empty); tasks
    without a band are counted under band ``"unbanded"``.
    """
    df = difficulty_df
    if "domain" not in df.columns:
        df = df.with_columns(domain=pl.lit("(all)"))
    df = df.with_columns(
        pl.col("domain").fill_null("(all)").cast(pl.Utf8), pl.col("band").fill_null("unbanded")
    )
    domains = sorted(df["domain"].unique().to_list())
    bands = list(BANDS) + (["unbanded"] if (df["band"] == "unbanded").any() else [])
    grid = pl.DataFrame(
        {"domain": [d for d in domains for _ in bands], "band": bands * len(domains)}
    )
    counts = df.group_by("domain", "band").agg(pl.len().cast(pl.Int64).alias("tasks"))
    return grid.join(counts, on=["domain", "band"], how="left").with_columns(
        pl.col("tasks").fill_null(0)
    )


def band_summary(difficulty_df: pl.DataFrame) -> pl.DataFrame:
    """Tasks per band, one row per band in band order (hardest first, empty bands as 0, ``unbanded`` last
    when present): ``band``, ``tasks`` (all domains), then one count column per domain (sorted).

    Args:
        difficulty_df: output of :func:`task_difficulty` (``band``; ``domain`` optional).
    """
    counts = band_counts(difficulty_df)
    wide = counts.pivot(on="domain", index="band", values="tasks", sort_columns=True)
    domains = [c for c in wide.columns if c != "band"]
    per_domain = domains if domains != ["(all)"] else []  # no domain column: the total says it all
    return wide.select(
        "band", pl.sum_horizontal(domains).cast(pl.Int64).alias("tasks"), *per_domain
    )
