"""Base vs tuned reliability tables as markdown strings (return values, no I/O).

:func:`format_reliability_tables` turns a ``rewardbox.metrics.reliability.Reliability`` (computed by
``rewardbox.metrics.reliability.compute_reliability``) into markdown; :func:`reliability_tables` does both. Rates print as
percentages with two decimals; intervals of pass@1, pass@k, pass^k and of the
change (tuned - base) are the paired task-level bootstrap at ``confidence``
(``rewardbox.metrics.bootstrap``) with the one-sided p-value of the exact paired
sign-flip test on per-task differences (``rewardbox.metrics.permutation``); a change
reads "improved" or "worse" only when both agree (interval clear of 0, p < 0.1),
else "within noise"; the tasks that changed are listed; the plug-in pass^k is labelled as such; costs carry the
price-table version.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from rewardbox.metrics.cost import PriceTable
from rewardbox.metrics.reliability import Reliability, compute_reliability
from rewardbox.report.changes import changed_tasks_table, fmt_p
from rewardbox.report.domain_tables import domain_markdown
from rewardbox.report.formats import NA, fmt_interval, fmt_pct, fmt_usd
from rewardbox.selection.difficulty import band_counts


def markdown_table(df: pl.DataFrame, float_format: str | None = None) -> str:
    """Render a DataFrame as a GitHub markdown table: every row and column, cells unabridged.

    Cells print with ``str()`` (None as empty), floats with ``float_format`` when given
    (e.g. ``".3f"``); ``|`` inside a cell is escaped. (polars' own MARKDOWN formatting
    wraps or truncates wide cells and caps the table width at 65535 characters, so it is
    not used for report tables.)
    """

    def cell(value: Any) -> str:
        if float_format and isinstance(value, float):
            return format(value, float_format)
        return "" if value is None else str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in df.columns) + " |", "|" + "---|" * df.width]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.iter_rows()]
    return "\n".join(lines)


def markdown_preview(df: pl.DataFrame, max_rows: int = 30) -> str:
    """The first ``max_rows`` rows as a markdown table (floats to 3 decimals), then a line
    saying how many rows were left out: asset metadata, where a table must stay readable."""
    text = markdown_table(df.head(max_rows), float_format=".3f")
    if df.height > max_rows:
        text += f"\n\n… {df.height - max_rows} more rows"
    return text


def _fmt_points(base: float | None, tuned: float | None) -> str:
    if base is None or tuned is None:
        return ""
    return f"{100 * (tuned - base):+.2f} pts"


def _pass_k_cell(summary: dict[str, Any], key: str, k: int) -> str:
    if k in summary[key]:
        return fmt_pct(summary[key][k])
    return f"{NA} ({summary['omitted_k'].get(k, 'not computed')})"


def _all_pass_label(summary_base: dict[str, Any], summary_tuned: dict[str, Any], k: int) -> str:
    equal = all(
        s["clean_counts_equal"] and s["n_clean_max"] == k for s in (summary_base, summary_tuned)
    )
    return f"observed {k}/{k} tasks" if equal else "tasks passing all their clean trials"


def fmt_change(entry: dict[str, Any] | None) -> str:
    """``+2.22 pts [+1.17, +3.27], p = 0.031, improved`` from a bootstrap metric entry; ``""`` without one."""
    if not entry or entry.get("difference") is None:
        return ""
    point, low, high = entry["difference"]
    p = fmt_p(entry)
    return f"{100 * point:+.2f} pts [{100 * low:+.2f}, {100 * high:+.2f}], {p + ', ' if p else ''}{entry['verdict']}"


def _boot_row(
    label: str, entry: dict[str, Any] | None, cells: tuple[str, str], change: str
) -> tuple[str, str, str, str]:
    """A table row with bootstrap intervals where the entry has them, else the given cells and change."""
    if not entry:
        return (label, *cells, change)
    sides = [
        fmt_interval(e[0], (e[1], e[2])) if e else cell
        for e, cell in zip((entry["base"], entry["tuned"]), cells)
    ]
    return (label, *sides, fmt_change(entry) or change)


def _truncation_cell(summary: dict[str, Any] | None) -> str:
    if not summary or not summary["completions"]:
        return NA
    return f"{summary['truncated_completions']} of {summary['completions']} ({fmt_pct(summary['truncated_completion_frac'])})"


def _overall_table(rel: Reliability) -> str:
    k, base, tuned = rel.k, rel.base, rel.tuned
    boot = rel.bootstrap["metrics"]
    level = f"{100 * base['confidence']:.0f}% task-level bootstrap"
    rows: list[tuple[str, str, str, str]] = [
        ("tasks (with a clean trial)", str(base["tasks"]), str(tuned["tasks"]), ""),
        ("clean trials", str(base["clean_trials"]), str(tuned["clean_trials"]), ""),
        _boot_row(
            f"pass@1 ({level})",
            boot.get("pass_at_1"),
            (NA, NA),
            _fmt_points(base["pass_at_1"], tuned["pass_at_1"]),
        ),
    ]
    for key, boot_key, label in (
        ("pass_at_k", f"pass_at_{k}", f"pass@{k} (at least one of {k}, unbiased)"),
        ("pass_hat_k", f"pass_hat_{k}", f"pass^{k} (all {k}, unbiased)"),
        ("pass_hat_k_plugin", None, f"pass^{k} plug-in (c/n)^{k}, biased"),
    ):
        change = _fmt_points(base[key].get(k), tuned[key].get(k))
        cells = (_pass_k_cell(base, key, k), _pass_k_cell(tuned, key, k))
        rows.append(_boot_row(label, boot.get(boot_key) if boot_key else None, cells, change))
    rows += [
        (
            _all_pass_label(base, tuned, k),
            f"{base['observed_all_pass_tasks']} of {base['tasks']}",
            f"{tuned['observed_all_pass_tasks']} of {tuned['tasks']}",
            f"{tuned['observed_all_pass_tasks'] - base['observed_all_pass_tasks']:+d}",
        ),
        ("system errors (not scored)", str(base["system_errors"]), str(tuned["system_errors"]), ""),
        (
            "completions cut by the token budget",
            _truncation_cell(rel.base_truncation),
            _truncation_cell(rel.tuned_truncation),
            "",
        ),
    ]
    for name in ("input_tokens", "cached_input_tokens", "output_tokens"):
        rows.append((name.replace("_", " "), f"{base[name]:,}", f"{tuned[name]:,}", ""))
    rows += _cost_rows(rel)
    overall_p = rel.comparison["overall_prob_tuned_better"]
    rows.append(
        (
            "P(tuned better), mean over shared tasks",
            "",
            NA if overall_p is None else f"{overall_p:.3f}",
            "",
        )
    )
    df = pl.DataFrame(rows, schema=["metric", "base", "tuned", "change"], orient="row")
    return markdown_table(df)


def _cost_rows(rel: Reliability) -> list[tuple[str, str, str, str]]:
    base_cost, tuned_cost = rel.base_cost, rel.tuned_cost
    if base_cost is None or tuned_cost is None:
        return [("cost", "no price table", "no price table", "")]
    version = rel.price_table_version
    return [
        (
            f"cost per successful trial (USD, prices {version})",
            fmt_usd(base_cost["cost_per_successful_trial_usd"]),
            fmt_usd(tuned_cost["cost_per_successful_trial_usd"]),
            "",
        ),
        (
            f"cost per dependable task (USD, prices {version})",
            fmt_usd(base_cost["cost_per_dependable_task_usd"]),
            fmt_usd(tuned_cost["cost_per_dependable_task_usd"]),
            "",
        ),
        (
            "campaign cost (USD)",
            fmt_usd(base_cost["campaign_cost_usd"]),
            fmt_usd(tuned_cost["campaign_cost_usd"]),
            "",
        ),
    ]


def _domain_table(rel: Reliability) -> str:
    return domain_markdown(rel, markdown_table)


def _task_table(rel: Reliability) -> str:
    per_task = rel.comparison["per_task"]
    if per_task.height == 0:
        return "(no task has clean trials in both campaigns)"
    df = per_task.select(
        "uid",
        *(["domain"] if "domain" in per_task.columns else []),
        pl.format("{}/{}", "base_c", "base_n").alias("base c/n"),
        pl.format("{}/{}", "tuned_c", "tuned_n").alias("tuned c/n"),
        pl.col("prob_tuned_better")
        .map_elements(lambda p: f"{p:.3f}", return_dtype=pl.Utf8)
        .alias("P(tuned better)"),
    )
    table = markdown_table(df)
    unmatched = rel.comparison["unmatched_tasks"]
    if unmatched:
        table += f"\n\n{len(unmatched)} task(s) not in both campaigns with clean trials: {', '.join(unmatched)}"
    return table


def split_rows(result: dict[str, Any], k_values: Sequence[int]) -> pl.DataFrame:
    """One row per (split, metric) of a ``split_bootstrap`` result: base, tuned and the change (tuned - base)
    with their intervals and verdict, at the result's confidence; pass@k and pass^k for each k >= 2 of
    ``k_values``. Empty when no split has a metric."""
    level = f"{100 * result['confidence']:.0f}%"
    names = [("pass_at_1", "pass@1")]
    for k in sorted({int(k) for k in k_values if int(k) >= 2}):
        names += [(f"pass_at_{k}", f"pass@{k}"), (f"pass_hat_{k}", f"pass^{k}")]
    rows = []
    for split, entry in result["splits"].items():
        for key, label in names:
            if (metric := entry["metrics"].get(key)) is None:
                continue
            sides = [
                fmt_interval(e[0], (e[1], e[2])) if e else NA
                for e in (metric["base"], metric["tuned"])
            ]
            rows.append(
                {
                    "split": split,
                    "tasks": str(entry["tasks"]),
                    "metric": label,
                    f"base ({level})": sides[0],
                    f"tuned ({level})": sides[1],
                    f"change ({level})": fmt_change(metric) or NA,
                }
            )
    return pl.DataFrame(rows)


def _split_table(rel: Reliability) -> str:
    result = rel.per_split
    rows = split_rows(result, rel.k_values)
    table = markdown_table(rows) if rows.height else "(no split has tasks with clean trials)"
    if result["unassigned_domains"]:
        table += f"\n\nDomains in no split (left out of this table): {', '.join(result['unassigned_domains'])}"
    return table


def format_reliability_tables(reliability: Reliability) -> dict[str, str]:
    """Markdown ``overall``, ``changed_tasks``, ``per_domain`` and ``per_task`` tables of a :class:`Reliability`,
    and ``per_split`` when ``report.splits`` names splits."""
    tables = {"overall": _overall_table(reliability)}
    if reliability.per_split.get("splits"):
        tables["per_split"] = _split_table(reliability)
    tables["changed_tasks"] = changed_tasks_table(reliability.changed_tasks, reliability.splits)
    tables |= {"per_domain": _domain_table(reliability), "per_task": _task_table(reliability)}
    return tables


def reliability_tables(
    base_rows: pl.DataFrame,
    tuned_rows: pl.DataFrame,
    k: int,
    price_table: PriceTable | None = None,
    **kwargs: Any,
) -> dict[str, str]:
    """Base vs tuned markdown tables (:func:`format_reliability_tables`) of two campaigns' rows.

    Keyword arguments are those of ``rewardbox.metrics.reliability.compute_reliability``. See its docs
    for errors; the tables show ``n/a`` with a reason for undefined values.
    """
    return format_reliability_tables(
        compute_reliability(base_rows, tuned_rows, k, price_table, **kwargs)
    )


def band_table(difficulty_df: pl.DataFrame) -> str:
    """Markdown table of task counts per domain (rows) and band (columns)."""
    counts = band_counts(difficulty_df)
    wide = counts.pivot(on="band", index="domain", values="tasks", sort_columns=False)
    return markdown_table(wide)
