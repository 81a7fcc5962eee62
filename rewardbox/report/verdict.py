"""The report's verdict lines, kept beside the report for ``make demo`` to print (``pipelines.where``).

One rule everywhere: "improved" or "worse" only when the paired task-level bootstrap interval and the
exact sign-flip test agree (``rewardbox.metrics.permutation.combined_verdict``); the lines here are the
report's own numbers, formatted as in its tables.
"""

from __future__ import annotations

from typing import Any

from rewardbox.metrics.reliability import Reliability
from rewardbox.report.changes import fmt_p
from rewardbox.report.tables import fmt_change


def verdict_summary(reliability: Reliability) -> dict[str, Any]:
    """``{"lines": [str, ...], "pass_at_1_verdict": str, "changed_tasks": int}`` from a ``Reliability``:
    the overall pass@1 change and each split's, each ``+4.44 pts [+1.11, +8.89], p = 0.125, within noise``."""
    overall = reliability.pass_at_1_change
    lines = [f"pass@1 change (tuned - base), all tasks: {fmt_change(overall) or 'n/a'}"]
    for split, entry in reliability.per_split.get("splits", {}).items():
        lines.append(
            f"pass@1 change, {split}: {fmt_change(entry['metrics'].get('pass_at_1')) or 'n/a'}"
        )
    return {
        "lines": lines,
        "pass_at_1_verdict": (overall or {}).get("verdict", "n/a"),
        "pass_at_1_p": fmt_p(overall),
        "changed_tasks": int(reliability.changed_tasks.height),
    }
