"""Base vs tuned reliability on the same tasks: one typed result, computed once.

:func:`compute_reliability` gathers every number the reliability report shows and the
``tuned_not_worse_than_base`` check reads: campaign summaries (``rewardbox.metrics.campaign``), the
paired task-level bootstrap stratified by domain (``rewardbox.metrics.bootstrap``, with the exact
sign-flip test of ``rewardbox.metrics.permutation`` in each entry), P(tuned better) per task
(``rewardbox.metrics.comparison``), per-domain and per-split numbers, truncation and costs.
``rewardbox.report`` only formats a :class:`Reliability`; the check reuses the same value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from rewardbox.metrics.bootstrap import DEFAULT_RESAMPLES, paired_bootstrap
from rewardbox.metrics.campaign import NO_DOMAIN, summarise_counts
from rewardbox.metrics.comparison import compare_counts
from rewardbox.metrics.cost import PriceTable, campaign_cost, domain_costs
from rewardbox.metrics.intervals import DEFAULT_DRAWS
from rewardbox.metrics.permutation import changed_tasks
from rewardbox.metrics.rows import task_counts
from rewardbox.metrics.splits import split_bootstrap
from rewardbox.metrics.truncation import truncation_summary


@dataclass(frozen=True)
class Reliability:
    """Every number behind the reliability report (base vs tuned; rates are fractions in [0, 1]).

    Attributes:
        k: the headline k (usually the trials per task); ``k_values``: the k of the curves (1 and k included).
        confidence: level of the bootstrap and Wilson intervals.
        base, tuned: ``summarise_counts`` dicts of each campaign.
        comparison: ``compare_counts`` (P(tuned better) per task and overall, unmatched tasks).
        bootstrap: ``paired_bootstrap`` stratified by domain, with per-domain results
            (``metrics``: ``{"pass_at_1": entry, "pass_at_<k>": ..., "pass_hat_<k>": ...}``, ``tasks``,
            ``resamples``, ``seed``, ``confidence``).
        per_domain: one row per domain: tasks, pass@1 with its interval, pass@k, pass^k, all-pass tasks
            for each side, the pass@1 change interval and verdict, P(tuned better).
        per_split: ``split_bootstrap`` (``splits`` names the groups; ``{}`` gives none).
        changed_tasks: tasks whose pass rate changed (``metrics.permutation.changed_tasks``).
        base_truncation, tuned_truncation: ``truncation_summary`` of each campaign's rows.
        base_cost, tuned_cost, per_domain_cost, price_table_version: costs (USD); None without a price table.
    """

    k: int
    k_values: list[int]
    confidence: float
    base: dict[str, Any]
    tuned: dict[str, Any]
    comparison: dict[str, Any]
    bootstrap: dict[str, Any]
    per_domain: pl.DataFrame
    per_split: dict[str, Any]
    changed_tasks: pl.DataFrame
    splits: dict[str, list[str]]
    base_truncation: dict[str, Any] | None
    tuned_truncation: dict[str, Any] | None
    base_cost: dict[str, Any] | None = None
    tuned_cost: dict[str, Any] | None = None
    per_domain_cost: pl.DataFrame | None = None
    price_table_version: str | None = None

    @property
    def pass_at_1_change(self) -> dict[str, Any] | None:
        """The paired bootstrap entry of pass@1 over every task (``base``, ``tuned``, ``difference`` as
        ``(point, low, high)``, ``verdict``, ``interval_verdict``, ``test``); None when no task has clean
        trials in both campaigns."""
        return self.bootstrap["metrics"].get("pass_at_1")


def compute_reliability(
    base_rows: pl.DataFrame,
    tuned_rows: pl.DataFrame,
    k: int,
    price_table: PriceTable | None = None,
    *,
    base_model: str = "base",
    tuned_model: str = "tuned",
    k_values: Sequence[int] | None = None,
    confidence: float = 0.95,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    splits: Mapping[str, Sequence[str]] | None = None,
) -> Reliability:
    """The :class:`Reliability` of two campaigns over the same tasks.

    Args:
        base_rows, tuned_rows: trial rows of the two campaigns (``rewardbox.metrics.rows``).
        k: the headline k (usually the trials per task); ``k_values``: the k of curves (default 1..k).
        price_table: prices of ``base_model`` and ``tuned_model``; None skips costs.
        confidence: level of the bootstrap (and Wilson) intervals; ``resamples``: task-level resamples.
        draws, seed: Monte Carlo settings of P(tuned better); ``seed`` also seeds the bootstrap.
        splits: ``{split: [domain, ...]}`` (``report.splits``): a paired bootstrap per split, or none.
    Raises: ValueError: bad rows, k or splits. KeyError: a model missing from the price table.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k_values = sorted(set(k_values or range(1, k + 1)) | {1, k})
    base, tuned = task_counts(base_rows, "base rows"), task_counts(tuned_rows, "tuned rows")
    comparison = compare_counts(base, tuned, draws=draws, seed=seed)
    boot = paired_bootstrap(
        base, tuned, k_values, confidence, resamples, seed, by_domain=True, domain_k_values=[k]
    )
    numbers = {
        "base": summarise_counts(base, k_values, confidence),
        "tuned": summarise_counts(tuned, k_values, confidence),
        "per_domain": _per_domain(base, tuned, comparison, boot, k, confidence),
        "per_split": split_bootstrap(
            base, tuned, splits or {}, k_values, confidence, resamples, seed
        ),
        "changed_tasks": changed_tasks(base, tuned),
        "splits": {split: list(domains) for split, domains in (splits or {}).items()},
        "base_truncation": truncation_summary(base_rows),
        "tuned_truncation": truncation_summary(tuned_rows),
    }
    costs = _costs(base_rows, tuned_rows, price_table, base_model, tuned_model)
    return Reliability(
        k, k_values, confidence, comparison=comparison, bootstrap=boot, **numbers, **costs
    )


def _costs(
    base_rows: pl.DataFrame,
    tuned_rows: pl.DataFrame,
    price_table: PriceTable | None,
    base_model: str,
    tuned_model: str,
) -> dict[str, Any]:
    """The cost fields of a :class:`Reliability` (USD); ``{}`` (all None) without a price table."""
    if not price_table:
        return {}
    return {
        "base_cost": campaign_cost(base_rows, price_table, base_model),
        "tuned_cost": campaign_cost(tuned_rows, price_table, tuned_model),
        "per_domain_cost": domain_costs(
            base_rows, tuned_rows, price_table, base_model, tuned_model
        ),
        "price_table_version": price_table.version,
    }


def _with_domain(counts: pl.DataFrame) -> pl.DataFrame:
    if "domain" not in counts.columns:
        counts = counts.with_columns(domain=pl.lit(NO_DOMAIN))
    return counts.with_columns(pl.col("domain").cast(pl.Utf8).fill_null(NO_DOMAIN))


def _ends(entry: tuple[float, float, float] | None) -> tuple[float, float]:
    """``(low, high)`` of a bootstrap ``(point, low, high)``; no information -> ``(0, 1)``."""
    return (0.0, 1.0) if entry is None else (entry[1], entry[2])


def _per_domain(base_counts, tuned_counts, comparison, bootstrap, k, confidence) -> pl.DataFrame:
    base_counts, tuned_counts = _with_domain(base_counts), _with_domain(tuned_counts)
    domains = sorted(set(base_counts["domain"].to_list()) | set(tuned_counts["domain"].to_list()))
    by_domain = comparison["domain_prob_tuned_better"]
    if not by_domain and comparison["overall_prob_tuned_better"] is not None:
        by_domain = {NO_DOMAIN: comparison["overall_prob_tuned_better"]}
    records = []
    for domain in domains:
        record: dict[str, Any] = {"domain": domain}
        boot = bootstrap["domains"].get(domain, {})
        for side, counts in (("base", base_counts), ("tuned", tuned_counts)):
            summary = summarise_counts(counts.filter(pl.col("domain") == domain), [k], confidence)
            record[f"{side}_tasks"] = summary["tasks"]
            record[f"{side}_pass_at_1"] = summary["pass_at_1"]
            record[f"{side}_pass_at_1_interval"] = _ends(boot.get("pass_at_1", {}).get(side))
            record[f"{side}_pass_at_k"] = summary["pass_at_k"].get(k)
            record[f"{side}_pass_hat_k"] = summary["pass_hat_k"].get(k)
            record[f"{side}_all_pass_tasks"] = summary["observed_all_pass_tasks"]
        change = boot.get("pass_at_1", {})
        record["pass_at_1_change_interval"] = _ends(change.get("difference"))
        record["pass_at_1_verdict"] = change.get("verdict", "n/a")
        record["prob_tuned_better"] = by_domain.get(domain)
        records.append(record)
    return pl.DataFrame(records, infer_schema_length=None) if records else pl.DataFrame()
