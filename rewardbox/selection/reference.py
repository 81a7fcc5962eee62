"""Reference screening: the reference policy's trials -> a verdict per task -> the pool gate.

docs/method.md, "Reference screening". The reference's trial rows have the
probe-row schema (``rewardbox.metrics.rows``); system-error rows count neither
as runs nor as failures. Verdicts:

- ``passed``: the rule holds;
- ``failed``: the reference had its ``min_clean_runs`` clean runs and the rule fails;
- ``incomplete``: too few clean runs to decide (system errors outlived their
  refills); the task stays out of the pool but is counted apart from failures.

Counts rule: at least ``min_successes`` successes among the first
``min_clean_runs`` clean runs (by trial). Posterior rule: with c successes in n
clean runs, P(p > t | c, n) = 1 - I_t(c + 1/2, n - c + 1/2) >= q, where I is
the regularised incomplete beta function (``scipy.special.betaincc`` gives
1 - I directly), the Jeffreys posterior of ``rewardbox.selection.bands``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
from scipy import special

from rewardbox.metrics.rows import task_counts, with_outcome
from rewardbox.selection.bands import JEFFREYS_PRIOR, _check_count_arrays
from rewardbox.selection.reference_config import ReferenceConfig

VERDICTS = ("passed", "failed", "incomplete")
"""Reference verdicts, in report order."""

REFERENCE_COLUMNS = ("uid", "n", "c", "system_errors", "c_first_runs", "exceedance_prob", "verdict")
"""Columns of :func:`reference_verdicts` output, in order (``c`` successes of ``n`` clean trials; computed
from the stored trial rows each time, never stored themselves)."""


def exceedance_probability(
    c: np.ndarray | Sequence[int], n: np.ndarray | Sequence[int], threshold: float
) -> np.ndarray:
    """P(p > threshold) under the Jeffreys posterior Beta(c + 1/2, n - c + 1/2), for many tasks at once.

    Evaluated once per distinct (c, n) pair with ``scipy.special.betaincc`` (the
    survival function behind ``scipy.stats.beta.sf``) and broadcast back, as
    ``band_mass_matrix`` does.

    Args:
        c: clean successes per task, integer array of shape ``(tasks,)``.
        n: clean runs per task (system errors excluded), same shape; n = 0 gives the prior's value.
        threshold: the success rate to exceed, in (0, 1).

    Returns:
        float64 array of shape ``(tasks,)``, each value in [0, 1].

    Raises:
        ValueError: non-integer or out-of-range counts, mismatched shapes, or a threshold outside (0, 1).
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must lie strictly inside (0, 1), got {threshold}")
    c_arr, n_arr = _check_count_arrays(c, n)
    if not c_arr.size:
        return np.zeros(0)
    pairs, inverse = np.unique(np.stack([c_arr, n_arr], axis=1), axis=0, return_inverse=True)
    a = pairs[:, 0] + JEFFREYS_PRIOR
    b = pairs[:, 1] - pairs[:, 0] + JEFFREYS_PRIOR
    return special.betaincc(a, b, threshold)[inverse.reshape(-1)]


def _first_run_successes(rows: pl.DataFrame, runs: int) -> pl.DataFrame:
    """Per uid, successes among its first ``runs`` clean trials by trial number: ``uid``, ``c_first_runs``."""
    clean = (
        with_outcome(rows, "reference rows").filter(~pl.col("is_system_error")).sort("uid", "trial")
    )
    return clean.group_by("uid").agg(
        pl.col("success").head(runs).sum().cast(pl.Int64).alias("c_first_runs")
    )


def reference_verdicts(rows: pl.DataFrame, config: ReferenceConfig) -> pl.DataFrame:
    """One verdict per task the reference ran.

    Args:
        rows: the reference's trial rows (``uid``, ``trial``, ``passed`` or
            ``reward``, ``system_error``), one per (uid, trial).
        config: the gate's rule and thresholds.

    Returns:
        One row per uid, sorted, with ``REFERENCE_COLUMNS``: ``n`` clean runs,
        ``c`` successes in them, ``system_errors`` left unrepaired,
        ``c_first_runs`` (successes in the first ``min_clean_runs`` clean runs),
        ``exceedance_prob`` (P(p > posterior_threshold | c, n); null under the
        counts rule) and ``verdict`` (one of ``VERDICTS``).

    Raises:
        ValueError: missing columns, a repeated (uid, trial), or a clean row
            without an outcome (names the uid and trial).
    """
    counts = task_counts(rows, "reference rows").select("uid", "n", "c", "system_errors")
    first = _first_run_successes(rows, config.min_clean_runs)
    table = counts.join(first, on="uid", how="left").with_columns(
        pl.col("c_first_runs").fill_null(0)
    )
    enough = pl.col("n") >= config.min_clean_runs
    if config.rule == "posterior":
        prob = exceedance_probability(
            table["c"].to_numpy(), table["n"].to_numpy(), config.posterior_threshold
        )
        table = table.with_columns(exceedance_prob=pl.Series(prob, dtype=pl.Float64))
        passes = pl.col("exceedance_prob") >= config.posterior_q
        verdict = pl.when(~enough).then(pl.lit("incomplete")).when(passes).then(pl.lit("passed"))
    else:
        table = table.with_columns(exceedance_prob=pl.lit(None, dtype=pl.Float64))
        passes = pl.col("c_first_runs") >= config.min_successes
        verdict = pl.when(passes).then(pl.lit("passed")).when(~enough).then(pl.lit("incomplete"))
    table = table.with_columns(verdict=verdict.otherwise(pl.lit("failed")))
    return table.select(REFERENCE_COLUMNS).sort("uid")


def gate_pool(pool_rows: pl.DataFrame, verdicts: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Keep the pool rows whose task the reference passed.

    A pool task the reference never ran (e.g. absent from an imported
    run) has no evidence and is removed with verdict ``not_probed``.

    Args:
        pool_rows: the band-selected pool (any frame with a ``uid`` column).
        verdicts: output of :func:`reference_verdicts`.

    Returns:
        ``(kept rows, removed)``: the kept pool rows in input order, and one row per
        removed task, sorted by uid: ``uid``, ``verdict``, ``n``, ``c``.
    """
    joined = pool_rows.select("uid").join(
        verdicts.select("uid", "verdict", "n", "c"), on="uid", how="left"
    )
    joined = joined.with_columns(pl.col("verdict").fill_null("not_probed"))
    passed = joined.filter(pl.col("verdict") == "passed")["uid"]
    removed = joined.filter(pl.col("verdict") != "passed").sort("uid")
    return pool_rows.filter(pl.col("uid").is_in(passed.implode())), removed


def successes_histogram(verdicts: pl.DataFrame) -> pl.DataFrame:
    """Tasks per (clean runs n, successes c), with the verdicts in each cell: ``n``, ``c``, ``tasks``, ``passed``."""
    passed = (pl.col("verdict") == "passed").sum().cast(pl.Int64).alias("passed")
    return (
        verdicts.group_by("n", "c")
        .agg(pl.len().cast(pl.Int64).alias("tasks"), passed)
        .sort("n", "c")
    )


def verdict_counts(verdicts: pl.DataFrame) -> dict[str, int]:
    """Tasks per verdict, every verdict of ``VERDICTS`` present (0 when none)."""
    found = dict(verdicts.group_by("verdict").len().iter_rows())
    return {v: int(found.get(v, 0)) for v in VERDICTS}
