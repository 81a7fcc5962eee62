"""The report's list of tasks that changed, with before/after counts (issue #23 item 7).

A pass@1 change rests on the tasks whose pass rate moved; the report names them so a reader
sees how many carry the result (``rewardbox.metrics.permutation.changed_tasks``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from rewardbox.metrics.splits import domain_to_split


def changed_tasks_table(
    changed: pl.DataFrame, splits: Mapping[str, Sequence[str]] | None = None
) -> str:
    """Markdown table of ``changed_tasks`` rows: uid, domain, split (with ``splits``), base c/n,
    tuned c/n, change in points; a sentence when no task changed."""
    if changed.height == 0:
        return "(no task's pass rate changed between base and tuned)"
    from rewardbox.report.tables import markdown_table  # tables imports this module

    owner = domain_to_split(splits or {})
    columns = [pl.col("uid"), pl.col("domain").fill_null("")]
    if owner:
        columns.append(
            pl.col("domain")
            .replace_strict(owner, default="(none)", return_dtype=pl.Utf8)
            .alias("split")
        )
    columns += [
        pl.format("{}/{}", "base_c", "base_n").alias("base c/n"),
        pl.format("{}/{}", "tuned_c", "tuned_n").alias("tuned c/n"),
        (pl.col("change") * 100)
        .map_elements(lambda v: f"{v:+.2f} pts", return_dtype=pl.Utf8)
        .alias("change"),
    ]
    gained = int((changed["change"] > 0).sum())
    note = f"\n\n{changed.height} task(s) changed: {gained} up, {changed.height - gained} down."
    return markdown_table(changed.select(columns)) + note


def fmt_p(entry: dict[str, Any] | None) -> str:
    """``p = 0.125`` (or ``p < 0.001``): the sign-flip test's one-sided p-value in the direction of the
    change (``p_greater`` for a gain or no change, ``p_less`` for a loss); ``""`` without a test. A
    Monte Carlo p-value (more than ``EXACT_MAX_CHANGED`` changed tasks, ``exact`` False) reads
    ``p ≈ 0.012 (sampled)``, so an approximate value is never shown as an exact one."""
    test = (entry or {}).get("test")
    if not test or entry.get("difference") is None:
        return ""
    p = test["p_greater"] if entry["difference"][0] >= 0 else test["p_less"]
    if not test.get("exact", True):
        return ("p < 0.001" if p < 0.001 else f"p ≈ {p:.3f}") + " (sampled)"
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
