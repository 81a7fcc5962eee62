"""Base vs tuned, task by task: the probability that the tuned policy is better.

Per task: ``P(p_tuned > p_base)`` under independent Jeffreys posteriors
``Beta(c + 1/2, n - c + 1/2)`` built from each policy's clean counts, by
quadrature vectorised over tasks (:func:`rewardbox.metrics.intervals.prob_better_many`,
within 1e-10 of adaptive quadrature).
Overall: ``P(mean_i p_tuned,i > mean_i p_base,i)`` over the tasks both
campaigns share and within each domain, by inversion of the characteristic
function, Monte Carlo with a fixed seed only where that cannot converge
(:func:`rewardbox.metrics.intervals.prob_better_by_group`). Tasks present in
only one campaign, or with no clean trial in either, are left out and
counted. This is the same model ``tb sbs`` uses (docs/thinkingbox.md, "Aggregation").
"""

from __future__ import annotations

from typing import Any

import polars as pl

from rewardbox.metrics.campaign import NO_DOMAIN
from rewardbox.metrics.intervals import DEFAULT_DRAWS, prob_better_by_group, prob_better_many
from rewardbox.metrics.rows import task_counts


def compare_counts(
    base_counts: pl.DataFrame, tuned_counts: pl.DataFrame, draws: int = DEFAULT_DRAWS, seed: int = 0
) -> dict[str, Any]:
    """Compare two policies from per-task counts (``task_counts`` output).

    Returns:
        ``per_task``: a DataFrame sorted by uid with ``uid``, ``domain`` (if
        either side has it), ``base_n``, ``base_c``, ``tuned_n``, ``tuned_c``,
        ``prob_tuned_better``; ``overall_prob_tuned_better`` (None when no task
        is shared); ``domain_prob_tuned_better`` (domain -> probability;
        empty without a domain column); ``matched_tasks``; ``unmatched_tasks`` (uids in only one
        campaign or without clean trials in one); ``draws`` and ``seed``.
    """
    joined = (
        _side(base_counts, "base")
        .join(_side(tuned_counts, "tuned"), on="uid", how="inner")
        .sort("uid")
    )
    domains = [
        df.select("uid", pl.col("domain").cast(pl.Utf8))
        for df in (base_counts, tuned_counts)
        if "domain" in df.columns
    ]
    if domains:
        domain_of = (
            pl.concat(domains).drop_nulls().unique(subset="uid", keep="first", maintain_order=True)
        )
        joined = joined.join(domain_of, on="uid", how="left").select(
            "uid", "domain", pl.exclude("uid", "domain")
        )
    probs = prob_better_many(
        *(joined[name].to_numpy() for name in ("base_c", "base_n", "tuned_c", "tuned_n"))
    )
    joined = joined.with_columns(prob_tuned_better=pl.Series(probs, dtype=pl.Float64))
    all_uids = set(base_counts["uid"].to_list()) | set(tuned_counts["uid"].to_list())
    overall, by_domain = None, {}
    if joined.height:
        groups = (
            joined["domain"].fill_null(NO_DOMAIN).to_list() if "domain" in joined.columns else None
        )
        overall, by_domain = prob_better_by_group(
            list(zip(joined["base_c"].to_list(), joined["base_n"].to_list())),
            list(zip(joined["tuned_c"].to_list(), joined["tuned_n"].to_list())),
            groups,
            draws=draws,
            seed=seed,
        )
    return {
        "per_task": joined,
        "overall_prob_tuned_better": overall,
        "domain_prob_tuned_better": by_domain,
        "matched_tasks": joined.height,
        "unmatched_tasks": sorted(all_uids - set(joined["uid"].to_list())),
        "draws": draws,
        "seed": seed,
    }


def compare_campaigns(
    base_rows: pl.DataFrame, tuned_rows: pl.DataFrame, draws: int = DEFAULT_DRAWS, seed: int = 0
) -> dict[str, Any]:
    """Compare two campaigns from their trial rows; see :func:`compare_counts`.

    Raises:
        ValueError: bad rows (see ``rewardbox.metrics.rows.with_outcome``).
    """
    return compare_counts(
        task_counts(base_rows, "base rows"), task_counts(tuned_rows, "tuned rows"), draws, seed
    )


def _side(counts: pl.DataFrame, prefix: str) -> pl.DataFrame:
    return counts.filter(pl.col("n") > 0).select(
        "uid", pl.col("n").alias(f"{prefix}_n"), pl.col("c").alias(f"{prefix}_c")
    )
