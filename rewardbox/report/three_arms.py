"""The three-arm report of a warm-started run: base, warm start, warm start + GRPO (docs/warm_start.md).

With ``rft.enabled`` the tuned policy is GRPO started from the warm start's adapter, so "tuned -
base" would credit GRPO with what the warm start did. Two paired comparisons on the same tasks and
seeds are computed instead, each with the report's own statistics (paired task-level bootstrap and
exact sign-flip test, "improved" only when both agree: ``rewardbox.metrics.permutation``):

* the **warm-start effect**: warm start - base;
* the **GRPO effect**: (warm start + GRPO) - warm start. This, never the total, is GRPO's line.

String and value functions only; the asset (``assets/warm_start.py``) writes the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from rewardbox.metrics.reliability import Reliability
from rewardbox.report.changes import fmt_p
from rewardbox.report.document import METHOD_NOTES, render_report_markdown
from rewardbox.report.formats import NA, fmt_interval
from rewardbox.report.tables import fmt_change, format_reliability_tables, markdown_table

WARM = "warm start"
GRPO = "warm start + GRPO"
WARM_EFFECT = "warm-start effect (warm start - base)"
GRPO_EFFECT = "GRPO effect ((warm start + GRPO) - warm start)"

THREE_ARM_NOTES: tuple[str, ...] = (
    "Three arms on the same benchmark tasks and seeds: the base policy, the warm start (rejection-sampling "
    "fine-tuning on the base policy's own successful probe trajectories of the training pool) and the warm "
    "start + GRPO. GRPO's effect is (warm start + GRPO) - warm start; the warm start's is warm start - base. "
    "Neither is the total.",
)


@dataclass(frozen=True)
class ThreeArms:
    """The two paired comparisons of a warm-started run.

    Attributes:
        warm: base (its ``base`` side) vs warm start (its ``tuned`` side).
        grpo: warm start (its ``base`` side) vs warm start + GRPO (its ``tuned`` side).
    """

    warm: Reliability
    grpo: Reliability

    @property
    def grpo_change(self) -> dict[str, Any] | None:
        """The paired bootstrap entry of pass@1, (warm start + GRPO) - warm start, over every task."""
        return self.grpo.pass_at_1_change

    @property
    def warm_change(self) -> dict[str, Any] | None:
        """The paired bootstrap entry of pass@1, warm start - base, over every task."""
        return self.warm.pass_at_1_change


def _metric_names(k_values) -> list[tuple[str, str]]:
    names = [("pass_at_1", "pass@1")]
    for k in sorted({int(k) for k in k_values if int(k) >= 2}):
        names += [(f"pass_at_{k}", f"pass@{k}"), (f"pass_hat_{k}", f"pass^{k}")]
    return names


def _side(entry: dict[str, Any] | None, side: str) -> str:
    value = (entry or {}).get(side)
    return fmt_interval(value[0], (value[1], value[2])) if value else NA


def _scopes(arms: ThreeArms) -> list[tuple[str, str, dict, dict]]:
    """(scope, tasks, warm metrics, grpo metrics) for every task, then each split."""
    scopes = [
        (
            "all tasks",
            str(arms.grpo.bootstrap["tasks"]),
            arms.warm.bootstrap["metrics"],
            arms.grpo.bootstrap["metrics"],
        )
    ]
    warm_splits = arms.warm.per_split.get("splits", {})
    for split, entry in arms.grpo.per_split.get("splits", {}).items():
        warm = warm_splits.get(split, {}).get("metrics", {})
        scopes.append((split, str(entry["tasks"]), warm, entry["metrics"]))
    return scopes


def three_arm_rows(arms: ThreeArms) -> pl.DataFrame:
    """One row per (scope, metric): scope (all tasks, then each split), tasks, metric, the three arms
    with their intervals, the warm-start effect and the GRPO effect (each point, interval, p, verdict).
    The warm-start arm's interval is from the GRPO comparison (its ``base`` side)."""
    level = f"{100 * arms.grpo.confidence:.0f}%"
    rows = []
    for scope, tasks, warm, grpo in _scopes(arms):
        for key, label in _metric_names(arms.grpo.k_values):
            if warm.get(key) is None and grpo.get(key) is None:
                continue
            rows.append(
                {
                    "scope": scope,
                    "tasks": tasks,
                    "metric": label,
                    f"base ({level})": _side(warm.get(key), "base"),
                    f"{WARM} ({level})": _side(grpo.get(key), "base"),
                    f"{GRPO} ({level})": _side(grpo.get(key), "tuned"),
                    WARM_EFFECT: fmt_change(warm.get(key)) or NA,
                    GRPO_EFFECT: fmt_change(grpo.get(key)) or NA,
                }
            )
    return pl.DataFrame(rows)


def _relabelled(tables: dict[str, str], prefix: str) -> dict[str, str]:
    return {f"{prefix}: {key.replace('_', ' ')}": table for key, table in tables.items()}


def arm_summaries(arms: ThreeArms) -> list[tuple[str, dict[str, Any]]]:
    """``[(label, summary)]`` of base, warm start and warm start + GRPO (``summarise_counts`` dicts),
    for the three-arm plot (``plots.arms_png``)."""
    return [("base", arms.warm.base), (WARM, arms.grpo.base), (GRPO, arms.grpo.tuned)]


def render_three_arm_markdown(
    arms: ThreeArms, title: str, images: dict[str, str] | None = None
) -> str:
    """The warm-started run's report: the three-arm table (then ``images``: caption -> link), then the
    GRPO comparison's tables (its "base" columns are the warm start, "tuned" the warm start + GRPO),
    then the warm start's (its "base" is the base, "tuned" the warm start)."""
    rows = three_arm_rows(arms)
    tables = {
        "overall": markdown_table(rows) if rows.height else "(no task has clean trials)",
        **_relabelled(
            format_reliability_tables(arms.grpo),
            "GRPO effect, base = warm start, tuned = warm start + GRPO",
        ),
        **_relabelled(
            format_reliability_tables(arms.warm),
            "warm-start effect, base = base, tuned = warm start",
        ),
    }
    text = render_report_markdown(tables, images, title=title, notes=THREE_ARM_NOTES + METHOD_NOTES)
    return text.replace("## Overall: base vs tuned", f"## Three arms: base, {WARM}, {GRPO}", 1)


def three_arm_verdict(arms: ThreeArms) -> dict[str, Any]:
    """``verdict.json`` of a warm-started run (``make demo`` prints its lines): GRPO's pass@1 change
    against the warm start overall and per split, then the warm start's against the base.
    ``pass_at_1_verdict`` and ``pass_at_1_p`` are GRPO's, ``warm_start_verdict`` the warm start's."""
    lines = [f"pass@1 change, {GRPO_EFFECT}, all tasks: {fmt_change(arms.grpo_change) or NA}"]
    for split, entry in arms.grpo.per_split.get("splits", {}).items():
        change = fmt_change(entry["metrics"].get("pass_at_1")) or NA
        lines.append(f"pass@1 change, {GRPO_EFFECT}, {split}: {change}")
    lines.append(f"pass@1 change, {WARM_EFFECT}, all tasks: {fmt_change(arms.warm_change) or NA}")
    for split, entry in arms.warm.per_split.get("splits", {}).items():
        change = fmt_change(entry["metrics"].get("pass_at_1")) or NA
        lines.append(f"pass@1 change, {WARM_EFFECT}, {split}: {change}")
    return {
        "lines": lines,
        "pass_at_1_verdict": (arms.grpo_change or {}).get("verdict", "n/a"),
        "pass_at_1_p": fmt_p(arms.grpo_change),
        "warm_start_verdict": (arms.warm_change or {}).get("verdict", "n/a"),
        "warm_start_p": fmt_p(arms.warm_change),
        "changed_tasks": int(arms.grpo.changed_tasks.height),
    }
