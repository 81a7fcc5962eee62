"""The per-domain comparison as four narrow tables: pass@1, pass@k, pass^k, cost (return values, no I/O).

One wide table with every metric (a dozen columns of ``51.70% [50.73, 52.67]`` cells) wraps each
cell over several lines at 1600 px in the Dagster UI; four tables of at most six columns do not.
The same frames feed the report's markdown (:func:`domain_markdown`) and the asset's table
metadata (``assets.report``), so both show the same numbers under the same column names.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from rewardbox.metrics.reliability import Reliability
from rewardbox.report.formats import NA, fmt_pct, fmt_usd


def _interval(value: float | None, interval: tuple[float, float]) -> str:
    return NA if value is None else f"[{100 * interval[0]:.2f}, {100 * interval[1]:.2f}]"


def _points(base: float | None, tuned: float | None) -> str:
    return NA if base is None or tuned is None else f"{100 * (tuned - base):+.2f} pts"


def _pass_at_1_change(r: dict[str, Any]) -> str:
    if r["base_pass_at_1"] is None or r["tuned_pass_at_1"] is None:
        return NA
    low, high = r["pass_at_1_change_interval"]
    return f"{100 * (r['tuned_pass_at_1'] - r['base_pass_at_1']):+.2f} [{100 * low:+.2f}, {100 * high:+.2f}]"


def domain_frames(rel: Reliability) -> dict[str, pl.DataFrame]:
    """The per-domain tables of a ``rewardbox.metrics.reliability.Reliability``, every cell a string.

    Returns:
        ``{"pass@1": ..., "pass@1 change": ..., "pass@k": ..., "pass^k": ..., "cost (USD, prices v)": ...}``
        (titles name the headline k, e.g. ``pass@4``); cost only when the result has ``per_domain_cost``.
        One row per domain (pass@1 and cost: per domain and policy). ``tasks``: tasks with a clean trial;
        ``all-pass b/t``: tasks passing all their clean trials; ``verdict``: the interval and the exact
        sign-flip test agree (``metrics.permutation.combined_verdict``; the p-values are in the overall and
        per-split tables, too wide for this one); ``P(better)``: P(tuned better) (in the pass@k table, for width);
        ``$/success``: cost per successful trial; ``total``: the campaign's cost. Every table stays within
        the Dagster UI's metadata value column at a 1600 px window (about 560 px: at most about 55
        characters a row in a few columns; measured by tests/ui/test_dagster_ui.py), so no cell wraps.
        Empty dict when there are no domains.
    """
    k, per_domain = rel.k, rel.per_domain
    if per_domain.height == 0:
        return {}
    frames = _metric_frames(list(per_domain.iter_rows(named=True)), k)
    costs = rel.per_domain_cost
    if costs is not None and costs.height:
        version = rel.price_table_version
        frames[f"cost (USD, prices {version})"] = pl.DataFrame(
            [
                {
                    "domain": c["domain"],
                    "policy": side,
                    "$/success": fmt_usd(c[f"{side}_cost_per_successful_trial_usd"]),
                    "total": fmt_usd(c[f"{side}_campaign_cost_usd"]),
                }
                for c in costs.iter_rows(named=True)
                for side in ("base", "tuned")
            ]
        )
    return frames


def _metric_frames(rows: list[dict[str, Any]], k: int) -> dict[str, pl.DataFrame]:
    """The pass@1, pass@1 change, pass@k and pass^k tables of :func:`domain_frames` from its per-domain rows."""
    return {
        # one row per domain and policy: two "75.00% [50.00, 100.00]" cells side by side wrapped at 1600 px
        "pass@1": pl.DataFrame(
            [
                {
                    "domain": r["domain"],
                    "policy": side,
                    "pass@1": fmt_pct(r[f"{side}_pass_at_1"]),
                    "interval": _interval(r[f"{side}_pass_at_1"], r[f"{side}_pass_at_1_interval"]),
                    "tasks": str(r[f"{side}_tasks"]),
                }
                for r in rows
                for side in ("base", "tuned")
            ]
        ),
        "pass@1 change": pl.DataFrame(
            [
                {
                    "domain": r["domain"],
                    "tuned - base (pts)": _pass_at_1_change(r),
                    "verdict": r["pass_at_1_verdict"],
                }
                for r in rows
            ]
        ),
        f"pass@{k}": pl.DataFrame(
            [
                {
                    "domain": r["domain"],
                    "base": fmt_pct(r["base_pass_at_k"]),
                    "tuned": fmt_pct(r["tuned_pass_at_k"]),
                    "change": _points(r["base_pass_at_k"], r["tuned_pass_at_k"]),
                    "P(better)": NA
                    if r["prob_tuned_better"] is None
                    else f"{r['prob_tuned_better']:.3f}",
                }
                for r in rows
            ]
        ),
        f"pass^{k}": pl.DataFrame(
            [
                {
                    "domain": r["domain"],
                    "base": fmt_pct(r["base_pass_hat_k"]),
                    "tuned": fmt_pct(r["tuned_pass_hat_k"]),
                    "change": _points(r["base_pass_hat_k"], r["tuned_pass_hat_k"]),
                    "all-pass b/t": f"{r['base_all_pass_tasks']}/{r['tuned_all_pass_tasks']}",
                }
                for r in rows
            ]
        ),
    }


def domain_markdown(rel: Reliability, render) -> str:
    """The per-domain tables as markdown, one bold title line before each (``render``: a DataFrame -> markdown
    function, ``rewardbox.report.tables.markdown_table``); ``(no tasks)`` without domains."""
    frames = domain_frames(rel)
    if not frames:
        return "(no tasks)"
    return "\n\n".join(f"**{title}**\n\n{render(frame)}" for title, frame in frames.items())
