"""Paired task-level bootstrap of pass@1, pass@k and pass^k for two policies and their difference.

Trials cluster by task (a hard task fails most of its trials), so intervals
that treat pooled trials as independent, such as Wilson's, are too narrow for
a campaign of few tasks times many trials. The bootstrap here resamples
**tasks** with replacement (Efron & Tibshirani 1993, "An Introduction to the
Bootstrap", ch. 13, percentile intervals), the same resampled tasks for both
policies (paired), and recomputes each statistic on every resample:

* pass@1 = sum of successes / sum of clean trials over the resampled tasks
  (the pooled point estimate of ``rewardbox.metrics.campaign``);
* pass@k, pass^k = mean over the resampled tasks of the unbiased per-task
  estimators (``rewardbox.metrics.passk``).

The tasks are the union of both campaigns' tasks with a clean trial; each
policy's statistic uses the resampled tasks it has, so its centre is its own
point estimate, and the difference is tuned minus base on the same resample.
Resample weights are counts of tasks drawn with replacement by
``numpy.random.default_rng(seed)``, and every statistic of every resample is
one matrix product. With very few tasks (a handful) every resample can agree
and the interval collapses; read such intervals as "too few tasks to tell". With the default
4,000 resamples the Monte Carlo error of a 95 % percentile end is about 3 % of
the interval's half-width (``sqrt(q (1 - q) / B) / phi(z_q)`` in standard-error units).

Verdict on a difference (``rewardbox.metrics.permutation.combined_verdict``): ``"improved"``
when its interval lies above 0 **and** the exact paired sign-flip permutation test on the per-task
differences gives one-sided p < 0.1; ``"worse"`` when below 0 and the other one-sided p < 0.1;
else ``"within noise"``. Each difference entry carries the test (``"test"``: p-values, tasks,
changed tasks) and the interval's own verdict (``"interval_verdict"``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from rewardbox.metrics.passk import pass_at_k, pass_hat_k
from rewardbox.metrics.permutation import combined_verdict, sign_flip_tests

DEFAULT_RESAMPLES = 4_000
"""Bootstrap resamples (percentile-end Monte Carlo error about 3 % of the half-width)."""

ARMS = ("base", "tuned")


def verdict(interval: tuple[float, float] | None) -> str:
    """``"improved"`` (interval above 0), ``"worse"`` (below 0), else ``"within noise"``; None -> ``"n/a"``."""
    if interval is None:
        return "n/a"
    low, high = interval
    if low > 0:
        return "improved"
    if high < 0:
        return "worse"
    return "within noise"


def _per_task_estimates(
    n: np.ndarray, c: np.ndarray, k_values: Sequence[int]
) -> dict[str, np.ndarray]:
    """Columns ``pass_at_{k}`` / ``pass_hat_{k}`` per task (0 where n < k), exact per distinct (n, c)."""
    pairs, inverse = np.unique(np.stack([n, c], axis=1), axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    out = {}
    for k in k_values:
        for name, fn in (("pass_at", pass_at_k), ("pass_hat", pass_hat_k)):
            table = np.array([fn(int(pn), int(pc), k) if pn >= k else 0.0 for pn, pc in pairs])
            out[f"{name}_{k}"] = table[inverse]
    return out


def _arm_columns(
    counts: pl.DataFrame, uids: list[str], k_values: Sequence[int]
) -> tuple[np.ndarray, list[str], int]:
    """Matrix (tasks x statistics inputs) of one arm aligned on ``uids``; columns named; n_min."""
    aligned = (
        pl.DataFrame({"uid": uids})
        .join(counts.filter(pl.col("n") > 0).select("uid", "n", "c"), on="uid", how="left")
        .fill_null(0)
    )
    n, c = aligned["n"].to_numpy().astype(np.int64), aligned["c"].to_numpy().astype(np.int64)
    has = (n > 0).astype(float)
    n_min = int(n[n > 0].min()) if has.any() else 0
    ks = [k for k in k_values if 2 <= k <= n_min]  # k = 1 is the pooled pass@1
    columns = {"has": has, "c": c.astype(float), "n": n.astype(float)}
    columns.update(_per_task_estimates(n, c, ks))
    return np.stack(list(columns.values()), axis=1), list(columns), n_min


def _statistics(sums: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    """Statistics from weighted column sums (rows: resamples or the point estimate)."""
    col = {name: sums[..., i] for i, name in enumerate(names)}
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {"pass_at_1": col["c"] / col["n"]}
        for name in names:
            if name.startswith(("pass_at_", "pass_hat_")):
                out[name] = col[name] / col["has"]
    return out


def paired_bootstrap(
    base_counts: pl.DataFrame,
    tuned_counts: pl.DataFrame,
    k_values: Sequence[int],
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    *,
    by_domain: bool = False,
    domain_k_values: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Percentile intervals of pass@1, pass@k, pass^k per policy and of tuned - base.

    Args:
        base_counts, tuned_counts: per-task clean counts (``task_counts`` output:
            ``uid``, ``n``, ``c``, optional ``domain``); tasks with ``n = 0`` are left out.
        k_values: the k for pass@k and pass^k (k >= 2; k = 1 is the pooled
            pass@1); a k above a policy's smallest clean trial count is left out
            for that policy (and the difference), as in ``summarise_counts``.
        confidence: two-sided level in (0, 1).
        resamples: bootstrap resamples, ``>= 1``.
        seed: seed of ``numpy.random.default_rng``.
        by_domain: add per-domain results, each from its own resamples of
            the domain's tasks (drawn after the overall ones, same generator).
        domain_k_values: the k of the per-domain results (default ``k_values``).

    Returns:
        ``{"metrics": {name: {"base": (point, low, high) | None, "tuned": ...,
        "difference": (point, low, high) | None, "verdict": str}}, "tasks",
        "resamples", "seed", "confidence"}``, plus ``"domains": {domain: metrics}``
        with ``by_domain``; names are ``pass_at_1``, ``pass_at_{k}``,
        ``pass_hat_{k}``; fractions in [0, 1] (difference in [-1, 1]).

    Raises:
        ValueError: confidence outside (0, 1) or ``resamples < 1``.
    """
    _check_levels(confidence, resamples)
    ks, tasks = _ks(k_values), _tasks(base_counts, tuned_counts)
    out: dict[str, Any] = dict(
        metrics={}, tasks=tasks.height, resamples=resamples, seed=seed, confidence=confidence
    )
    out |= {"domains": {}} if by_domain else {}
    if not tasks.height:
        return out
    rng = np.random.default_rng(seed)
    uids, alpha = tasks["uid"].to_list(), (1 - confidence) / 2
    out["metrics"] = _compare(
        base_counts, tuned_counts, uids, _weights(len(uids), resamples, rng), ks, alpha
    )
    if by_domain:
        domain_ks = ks if domain_k_values is None else _ks(domain_k_values)
        out["domains"] = _compare_domains(
            base_counts, tuned_counts, tasks, resamples, rng, domain_ks, alpha
        )
    return out


def _check_levels(confidence: float, resamples: int) -> None:
    """ValueError unless ``0 < confidence < 1`` and ``resamples >= 1``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")


def _ks(k_values: Sequence[int]) -> list[int]:
    """The distinct k >= 1 of ``k_values``, ascending."""
    return sorted({int(k) for k in k_values if int(k) >= 1})


def _compare_domains(
    base_counts: pl.DataFrame,
    tuned_counts: pl.DataFrame,
    tasks: pl.DataFrame,
    resamples: int,
    rng: np.random.Generator,
    ks: list[int],
    alpha: float,
) -> dict[str, Any]:
    """``{domain: metrics}``, each domain from its own resamples of its tasks, domains in sorted order."""
    uids, domains = tasks["uid"].to_list(), tasks["domain"].to_list()
    out = {}
    for domain in sorted(set(domains)):
        members = [uid for uid, d in zip(uids, domains) if d == domain]
        weights = _weights(len(members), resamples, rng)
        out[domain] = _compare(base_counts, tuned_counts, members, weights, ks, alpha)
    return out


def _tasks(base_counts: pl.DataFrame, tuned_counts: pl.DataFrame) -> pl.DataFrame:
    """``uid``, ``domain`` of the tasks with a clean trial in either campaign, sorted by uid."""
    frames = [
        df.filter(pl.col("n") > 0).select(
            "uid",
            (
                pl.col("domain").cast(pl.Utf8)
                if "domain" in df.columns
                else pl.lit(None, dtype=pl.Utf8)
            ).alias("domain"),
        )
        for df in (base_counts, tuned_counts)
    ]
    tasks = pl.concat(frames).group_by("uid").agg(pl.col("domain").drop_nulls().first())
    return tasks.with_columns(pl.col("domain").fill_null("(all)")).sort("uid")


def _weights(tasks: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``(resamples, tasks)`` float counts: how often each task was drawn in each resample (rows sum to ``tasks``)."""
    index = (
        rng.integers(0, tasks, size=(resamples, tasks)) + (np.arange(resamples) * tasks)[:, None]
    )
    return (
        np.bincount(index.ravel(), minlength=resamples * tasks)
        .reshape(resamples, tasks)
        .astype(float)
    )


def _compare(
    base_counts: pl.DataFrame,
    tuned_counts: pl.DataFrame,
    uids: list[str],
    weights: np.ndarray,
    ks: list[int],
    alpha: float,
) -> dict[str, Any]:
    """Metric entries of both policies and their difference on ``uids`` under ``weights``."""
    stats: dict[str, dict[str, tuple[float, np.ndarray]]] = {}
    columns_of: dict[str, dict[str, np.ndarray]] = {}
    for arm, counts in zip(ARMS, (base_counts, tuned_counts)):
        matrix, names, _ = _arm_columns(counts, uids, ks)
        columns_of[arm] = dict(zip(names, matrix.T))
        point = _statistics(matrix.sum(axis=0), names)
        draws = _statistics(weights @ matrix, names)
        stats[arm] = {
            name: (float(point[name]), draws[name]) for name in point if np.isfinite(point[name])
        }
    names = list(dict.fromkeys([*stats["base"], *stats["tuned"]]))
    columns, points = [], []
    for name in names:
        for arm in ARMS:
            if name in stats[arm]:
                columns.append((name, arm)), points.append(stats[arm][name][0])
        if name in stats["base"] and name in stats["tuned"]:
            columns.append((name, "difference"))
            points.append(stats["tuned"][name][0] - stats["base"][name][0])
    draws = np.stack(
        [
            stats[arm][name][1]
            if arm != "difference"
            else stats["tuned"][name][1] - stats["base"][name][1]
            for name, arm in columns
        ],
        axis=1,
    )
    with warnings.catch_warnings():  # a resample may miss every task of a policy: NaN, left out
        warnings.simplefilter("ignore", RuntimeWarning)
        ends = np.nanquantile(draws, [alpha, 1 - alpha], axis=0)
    metrics: dict[str, Any] = {
        name: {"base": None, "tuned": None, "difference": None} for name in names
    }
    for j, (name, arm) in enumerate(columns):
        metrics[name][arm] = (float(points[j]), float(ends[0, j]), float(ends[1, j]))
    tests = _task_tests(
        columns_of, [name for name, entry in metrics.items() if entry["difference"]]
    )
    for name, entry in metrics.items():
        interval = entry["difference"][1:] if entry["difference"] else None
        entry["test"] = tests.get(name)
        entry["interval_verdict"] = verdict(interval)
        entry["verdict"] = combined_verdict(interval, entry["test"])
    return metrics


def _task_tests(
    columns: dict[str, dict[str, np.ndarray]], names: list[str]
) -> dict[str, dict[str, Any]]:
    """The sign-flip test of each metric in ``names`` on the per-task differences tuned - base, over the
    tasks with a clean trial in both arms (pass@1 per task: c / n; pass@k, pass^k: the per-task estimators)."""
    if not names:
        return {}
    both = (columns["base"]["has"] > 0) & (columns["tuned"]["has"] > 0)
    diffs = []
    for name in names:
        per_arm = []
        for arm in ARMS:
            col = columns[arm]
            with np.errstate(invalid="ignore", divide="ignore"):
                per_arm.append(
                    col["c"][both] / col["n"][both] if name == "pass_at_1" else col[name][both]
                )
        diffs.append(per_arm[1] - per_arm[0])
    return dict(zip(names, sign_flip_tests(np.stack(diffs, axis=1))))
