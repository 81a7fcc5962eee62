"""Base vs tuned per benchmark *split*: named groups of domains (in distribution, out of distribution).

A learning result is read per split: the held-out tasks of the trained families (in distribution)
and a domain never trained on (out of distribution) answer different questions, and pooling them
hides both. ``report.splits`` names the groups, e.g.
``{in_distribution: [retail, hotel], out_of_distribution: [helpdesk]}``; each split gets the same
paired task-level bootstrap as the overall table (``rewardbox.metrics.bootstrap``: the tasks of the
split are resampled with replacement, the same tasks for both policies) for pass@1, pass@k and pass^k
of each policy and of the difference tuned - base, with the verdict "improved", "worse" or
"within noise".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from rewardbox.metrics.bootstrap import DEFAULT_RESAMPLES, paired_bootstrap
from rewardbox.metrics.campaign import NO_DOMAIN


def domain_to_split(splits: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """``{domain: split}`` from ``{split: [domain, ...]}``.

    Raises:
        ValueError: a domain listed under two splits, or a split with no domain (configuration errors).
    """
    owner: dict[str, str] = {}
    for split, domains in splits.items():
        if not domains:
            raise ValueError(f"report.splits: split {split!r} lists no domain")
        for domain in domains:
            if domain in owner and owner[domain] != split:
                raise ValueError(
                    f"report.splits: domain {domain!r} is in both {owner[domain]!r} and {split!r}"
                )
            owner[domain] = split
    return owner


def _relabel(counts: pl.DataFrame, owner: Mapping[str, str]) -> pl.DataFrame:
    """Per-task counts with ``domain`` replaced by the task's split (tasks of no split dropped)."""
    domain = (
        pl.col("domain").cast(pl.Utf8).fill_null(NO_DOMAIN)
        if "domain" in counts.columns
        else pl.lit(NO_DOMAIN)
    )
    split = domain.replace_strict(dict(owner), default=None, return_dtype=pl.Utf8)
    return counts.with_columns(domain=split).filter(pl.col("domain").is_not_null())


def _domains_seen(counts: pl.DataFrame) -> set[str]:
    """The domains of a campaign's per-task counts (``NO_DOMAIN`` for rows without one)."""
    if "domain" in counts.columns:
        return set(counts["domain"].cast(pl.Utf8).fill_null(NO_DOMAIN).to_list())
    return {NO_DOMAIN} if counts.height else set()


def _split_task_counts(
    base_counts: pl.DataFrame,
    tuned_counts: pl.DataFrame,
    owner: Mapping[str, str],
    splits: Mapping[str, Sequence[str]],
) -> dict[str, int]:
    """``{split: tasks with a clean trial in either campaign}``, every split of ``splits`` present."""
    counts = {name: 0 for name in splits}
    relabelled = pl.concat(
        [
            _relabel(c, owner).filter(pl.col("n") > 0).select("uid", "domain")
            for c in (base_counts, tuned_counts)
        ]
    ).unique()
    for split, tasks in relabelled.group_by("domain").len().iter_rows():
        counts[split] = tasks
    return counts


def split_bootstrap(
    base_counts: pl.DataFrame,
    tuned_counts: pl.DataFrame,
    splits: Mapping[str, Sequence[str]],
    k_values: Sequence[int],
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """Paired task-level bootstrap of each split.

    Args:
        base_counts, tuned_counts: per-task clean counts (``rewardbox.metrics.rows.task_counts``:
            ``uid``, ``n``, ``c``, ``domain``).
        splits: ``{split: [domain, ...]}``; an empty mapping gives no splits.
        k_values: the k of pass@k and pass^k (k = 1 is the pooled pass@1).
        confidence, resamples, seed: as ``paired_bootstrap``.

    Returns:
        ``{"splits": {split: {"tasks": int, "metrics": <paired_bootstrap metrics>}}, "confidence",
        "unassigned_domains": [domain, ...]}`` (domains of the campaigns in no split, left out),
        in the order of ``splits``; a split none of whose domains has a clean trial has ``tasks`` 0 and
        no metrics.

    Raises:
        ValueError: invalid ``splits`` (see :func:`domain_to_split`), confidence or resamples.
    """
    owner = domain_to_split(splits)
    seen = _domains_seen(base_counts) | _domains_seen(tuned_counts)
    out: dict[str, Any] = {
        "splits": {},
        "confidence": confidence,
        "unassigned_domains": sorted(seen - set(owner)),
    }
    if not splits:
        return out
    boot = paired_bootstrap(
        _relabel(base_counts, owner),
        _relabel(tuned_counts, owner),
        k_values,
        confidence,
        resamples,
        seed,
        by_domain=True,
    )
    counts = _split_task_counts(base_counts, tuned_counts, owner, splits)
    for split in splits:
        out["splits"][split] = {
            "tasks": counts[split],
            "metrics": boot.get("domains", {}).get(split, {}),
        }
    return out
