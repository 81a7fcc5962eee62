"""Campaign summaries: pass@1, pass@k, pass^k, observed k/k, system errors, tokens.

Conventions (docs/method.md, "Metrics"):

* **pass@1** = successes / clean trials, pooled over all clean trials,
  with a Wilson interval. The interval treats trials as independent, which
  ignores clustering by task; it is a yardstick, not a test.
* **pass@k, pass^k** = mean over tasks of the per-task unbiased estimators
  (``rewardbox.metrics.passk``), each task with **its own** clean trial count
  n_i. This stays unbiased per task when a few system errors leave tasks with
  unequal n (``tb agg`` instead drops every k when counts differ). A k is
  omitted, with the reason in ``omitted_k``, when it exceeds the smallest n_i.
  ``clean_counts_equal`` says whether all n_i match; when they do and k = n,
  pass^k equals the observed n/n share.
* **observed k/k** = tasks that passed every one of their clean trials
  (``c_i == n_i``), with a Wilson interval on that share of tasks.
* **system errors** are counted in their own field and never enter n or c.
  Tasks with no clean trial at all are counted in ``tasks_without_clean_trials``
  and left out of every rate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import polars as pl

from rewardbox.metrics.intervals import wilson_interval
from rewardbox.metrics.passk import pass_at_k, pass_hat_k, pass_hat_k_plugin
from rewardbox.metrics.rows import TOKEN_COLUMNS, task_counts

NO_DOMAIN = "(all)"
"""Domain label used when the rows carry no ``domain`` column."""


def summarise_counts(
    counts: pl.DataFrame, k_values: Sequence[int], confidence: float = 0.95
) -> dict[str, Any]:
    """Summarise per-task counts (the output of ``task_counts``). See module docstring.

    Returns:
        A dict with ``tasks``, ``tasks_without_clean_trials``, ``trials``,
        ``clean_trials``, ``successes``, ``system_errors``, ``pass_at_1``,
        ``pass_at_1_interval`` (low, high), ``pass_at_k`` / ``pass_hat_k`` /
        ``pass_hat_k_plugin`` (dict k -> fraction), ``omitted_k`` (dict k ->
        reason), ``n_clean_min``, ``n_clean_max``, ``clean_counts_equal``,
        ``observed_all_pass_tasks``, ``observed_all_pass_frac``,
        ``observed_all_pass_interval``, token sums, and ``confidence``.
        Rates are fractions in [0, 1]; a rate with no data is None.
    """
    scored = counts.filter(pl.col("n") > 0)
    n_list, c_list = scored["n"].to_list(), scored["c"].to_list()
    tasks, clean, successes = len(n_list), sum(n_list), sum(c_list)
    all_pass = sum(1 for n, c in zip(n_list, c_list) if c == n)
    out: dict[str, Any] = {
        "tasks": tasks,
        "tasks_without_clean_trials": counts.height - tasks,
        "trials": int(counts["trials"].sum()) if counts.height else 0,
        "clean_trials": clean,
        "successes": successes,
        "system_errors": int(counts["system_errors"].sum()) if counts.height else 0,
        "pass_at_1": successes / clean if clean else None,
        "pass_at_1_interval": wilson_interval(successes, clean, confidence),
        "n_clean_min": min(n_list) if n_list else 0,
        "n_clean_max": max(n_list) if n_list else 0,
        "clean_counts_equal": len(set(n_list)) <= 1,
        "observed_all_pass_tasks": all_pass,
        "observed_all_pass_frac": all_pass / tasks if tasks else None,
        "observed_all_pass_interval": wilson_interval(all_pass, tasks, confidence),
        "confidence": confidence,
    }
    out.update(_pass_k_means(n_list, c_list, k_values))
    for name in TOKEN_COLUMNS:
        out[name] = int(counts[name].sum()) if counts.height else 0
    return out


def _pass_k_means(n_list: list[int], c_list: list[int], k_values: Sequence[int]) -> dict[str, Any]:
    at, hat, plug, omitted = {}, {}, {}, {}
    n_min = min(n_list) if n_list else 0
    for k in sorted(set(int(k) for k in k_values)):
        if k < 1:
            raise ValueError(f"k_values must be >= 1, got {k}")
        if not n_list:
            omitted[k] = "no task has a clean trial"
            continue
        if k > n_min:
            omitted[k] = f"k = {k} exceeds the smallest clean trial count n = {n_min}"
            continue
        at[k], hat[k], plug[k] = _task_means(n_list, c_list, k)
    return {"pass_at_k": at, "pass_hat_k": hat, "pass_hat_k_plugin": plug, "omitted_k": omitted}


def _task_means(n_list: list[int], c_list: list[int], k: int) -> tuple[float, float, float]:
    """Means over tasks of pass@k, pass^k and the plug-in, each estimator evaluated once per distinct (n, c)."""
    weight = Counter(zip(n_list, c_list))
    sums = [
        math.fsum(m * fn(n, c, k) for (n, c), m in weight.items())
        for fn in (pass_at_k, pass_hat_k, pass_hat_k_plugin)
    ]
    return sums[0] / len(n_list), sums[1] / len(n_list), sums[2] / len(n_list)


def summarise_campaign(
    rows: pl.DataFrame, k_values: Sequence[int], confidence: float = 0.95
) -> dict[str, Any]:
    """Summarise one campaign (one policy, tasks x trials) from its trial rows.

    Args:
        rows: trial rows with ``uid``, ``trial``, ``reward``/``passed``,
            ``system_error``, optional ``domain`` and token columns
            (``rewardbox.metrics.rows``).
        k_values: the k to report pass@k and pass^k at, each ``>= 1``.
        confidence: level of the Wilson intervals.

    Returns:
        See :func:`summarise_counts`; fractions in [0, 1].

    Raises:
        ValueError: missing columns, duplicated (uid, trial) keys, a clean
            trial without an outcome, or ``k < 1``.
    """
    return summarise_counts(task_counts(rows), k_values, confidence)


def summarise_by_domain(
    rows: pl.DataFrame, k_values: Sequence[int], confidence: float = 0.95
) -> pl.DataFrame:
    """Per-domain table: one row per domain (``"(all)"`` without a domain column).

    Columns: ``domain``, ``tasks``, ``clean_trials``, ``successes``,
    ``system_errors``, ``pass_at_1``, ``pass_at_1_low``, ``pass_at_1_high``,
    ``observed_all_pass_tasks``, and ``pass_at_{k}``, ``pass_hat_{k}`` per k
    (null where the k is omitted in that domain). Sorted by domain.
    """
    counts = task_counts(rows)
    if "domain" not in counts.columns:
        counts = counts.with_columns(domain=pl.lit(NO_DOMAIN))
    counts = counts.with_columns(pl.col("domain").fill_null(NO_DOMAIN).cast(pl.Utf8))
    records = []
    for domain in sorted(counts["domain"].unique().to_list()):
        summary = summarise_counts(counts.filter(pl.col("domain") == domain), k_values, confidence)
        record = {
            "domain": domain,
            **{
                key: summary[key]
                for key in ("tasks", "clean_trials", "successes", "system_errors", "pass_at_1")
            },
            "pass_at_1_low": summary["pass_at_1_interval"][0],
            "pass_at_1_high": summary["pass_at_1_interval"][1],
            "observed_all_pass_tasks": summary["observed_all_pass_tasks"],
        }
        for k in sorted(set(int(k) for k in k_values)):
            record[f"pass_at_{k}"] = summary["pass_at_k"].get(k)
            record[f"pass_hat_{k}"] = summary["pass_hat_k"].get(k)
        records.append(record)
    return pl.DataFrame(records, infer_schema_length=None)
