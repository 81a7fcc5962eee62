"""Base vs tuned reliability tables as markdown strings (return values, no I/O).

:func:`compute_reliability` gathers the numbers (campaign summaries, costs,
per-task and overall P(tuned better)); :func:`format_reliability_tables` turns
them into markdown; :func:`reliability_tables` does both. Rates print as
percentages with two decimals; intervals of pass@1, pass@k, pass^k and of the
change (tuned - base) are the paired task-level bootstrap at ``confidence``
(``rewardbox.metrics.bootstrap``) with the one-sided p-value of the exact paired
sign-flip test on per-task differences (``rewardbox.metrics.permutation``); a change
reads "improved" or "worse" only when both agree (interval clear of 0, p < 0.1),
else "within noise"; the tasks that changed are listed; the plug-in pass^k is labelled as such; costs carry the
price-table version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from rewardbox.metrics.campaign import NO_DOMAIN, summarise_counts
from rewardbox.metrics.comparison import compare_counts
from rewardbox.metrics.cost import PriceTable, campaign_cost
from rewardbox.metrics.bootstrap import DEFAULT_RESAMPLES, paired_bootstrap
from rewardbox.metrics.intervals import DEFAULT_DRAWS
from rewardbox.metrics.permutation import changed_tasks
from rewardbox.metrics.rows import task_counts
from rewardbox.metrics.truncation import truncation_summary
from rewardbox.report.changes import changed_tasks_table, fmt_p
from rewardbox.report.domain_tables import domain_costs, domain_markdown
from rewardbox.report.formats import NA, fmt_interval, fmt_pct, fmt_usd
from rewardbox.report.splits import split_bootstrap
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
) -> dict[str, Any]:
    """All numbers behind the reliability report.

    Args:
        base_rows, tuned_rows: trial rows of the two campaigns (``rewardbox.metrics.rows``).
        k: the headline k (usually the trials per task).
        price_table: prices for ``base_model`` and ``tuned_model``; None skips costs.
        base_model, tuned_model: model names looked up in ``price_table``.
        k_values: the k for curves; default 1..k.
        confidence: level of the bootstrap (and Wilson) intervals.
        draws, seed: Monte Carlo settings of P(tuned better); ``seed`` also seeds the bootstrap.
        resamples: task-level bootstrap resamples.
        splits: ``{split: [domain, ...]}`` (``report.splits``): a paired bootstrap per split, or none.

    Returns:
        ``k``, ``k_values``, ``base`` / ``tuned`` (``summarise_counts`` dicts),
        ``base_cost`` / ``tuned_cost`` (``campaign_cost`` dicts or None),
        ``comparison`` (``compare_counts``), ``bootstrap`` (``paired_bootstrap``
        stratified by domain, with per-domain results), ``per_domain`` (DataFrame), ``per_domain_cost``
        (``domain_costs``; None without prices), ``price_table_version``, ``per_split`` (``split_bootstrap``),
        ``changed_tasks`` (before/after), ``splits``.

    Raises: ValueError: bad rows, k or splits. KeyError: a model missing from the price table.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k_values = sorted(set(k_values or range(1, k + 1)) | {1, k})
    base_counts, tuned_counts = task_counts(base_rows, "base rows"), task_counts(tuned_rows, "tuned rows")
    comparison = compare_counts(base_counts, tuned_counts, draws=draws, seed=seed)
    boot = paired_bootstrap(base_counts, tuned_counts, k_values, confidence, resamples, seed, by_domain=True,
                            domain_k_values=[k])
    return {
        "k": k, "k_values": k_values,
        "base": summarise_counts(base_counts, k_values, confidence),
        "tuned": summarise_counts(tuned_counts, k_values, confidence),
        "base_cost": campaign_cost(base_rows, price_table, base_model) if price_table else None,
        "tuned_cost": campaign_cost(tuned_rows, price_table, tuned_model) if price_table else None,
        "comparison": comparison,
        "bootstrap": boot,
        "per_domain": _per_domain(base_counts, tuned_counts, comparison, boot, k, confidence),
        "per_domain_cost": domain_costs(base_rows, tuned_rows, price_table, base_model, tuned_model),
        "price_table_version": price_table.version if price_table else None,
        "base_truncation": truncation_summary(base_rows),
        "tuned_truncation": truncation_summary(tuned_rows),
        "per_split": split_bootstrap(base_counts, tuned_counts, splits or {}, k_values, confidence, resamples, seed),
        "changed_tasks": changed_tasks(base_counts, tuned_counts), "splits": dict(splits or {})}


def _with_domain(counts: pl.DataFrame) -> pl.DataFrame:
    if "domain" not in counts.columns:
        counts = counts.with_columns(domain=pl.lit(NO_DOMAIN))
    return counts.with_columns(pl.col("domain").cast(pl.Utf8).fill_null(NO_DOMAIN))


def _per_domain(base_counts, tuned_counts, comparison, bootstrap, k, confidence) -> pl.DataFrame:
    base_counts, tuned_counts = _with_domain(base_counts), _with_domain(tuned_counts)
    domains = sorted(set(base_counts["domain"].to_list()) | set(tuned_counts["domain"].to_list()))
    by_domain = comparison["domain_prob_tuned_better"]
    if not by_domain and comparison["overall_prob_tuned_better"] is not None:
        by_domain = {NO_DOMAIN: comparison["overall_prob_tuned_better"]}
    records = []
    for domain in domains:
        record: dict[str, Any] = {"domain": domain}
        sides = {side: counts.filter(pl.col("domain") == domain)
                 for side, counts in (("base", base_counts), ("tuned", tuned_counts))}
        boot = bootstrap["domains"].get(domain, {})
        for side, counts in sides.items():
            summary = summarise_counts(counts, [k], confidence)
            record[f"{side}_tasks"] = summary["tasks"]
            record[f"{side}_pass_at_1"] = summary["pass_at_1"]
            record[f"{side}_pass_at_1_interval"] = _ends(boot.get("pass_at_1", {}).get(side))
            record[f"{side}_pass_at_k"] = summary["pass_at_k"].get(k)
            record[f"{side}_pass_hat_k"] = summary["pass_hat_k"].get(k)
            record[f"{side}_all_pass_tasks"] = summary["observed_all_pass_tasks"]
        change = boot.get("pass_at_1", {})
        record["pass_at_1_change_interval"] = _ends(change.get("difference"))
        record["pass_at_1_verdict"] = change.get("verdict", "n/a")
        record["pass_at_1_p"] = fmt_p(change)
        record["prob_tuned_better"] = by_domain.get(domain)
        records.append(record)
    return pl.DataFrame(records, infer_schema_length=None) if records else pl.DataFrame()


def _ends(entry: tuple[float, float, float] | None) -> tuple[float, float]:
    """``(low, high)`` of a bootstrap ``(point, low, high)``; no information -> ``(0, 1)``."""
    return (0.0, 1.0) if entry is None else (entry[1], entry[2])


def _pass_k_cell(summary: dict[str, Any], key: str, k: int) -> str:
    if k in summary[key]:
        return fmt_pct(summary[key][k])
    return f"{NA} ({summary['omitted_k'].get(k, 'not computed')})"


def _all_pass_label(summary_base: dict[str, Any], summary_tuned: dict[str, Any], k: int) -> str:
    equal = all(s["clean_counts_equal"] and s["n_clean_max"] == k for s in (summary_base, summary_tuned))
    return f"observed {k}/{k} tasks" if equal else "tasks passing all their clean trials"


def fmt_change(entry: dict[str, Any] | None) -> str:
    """``+2.22 pts [+1.17, +3.27], p = 0.031, improved`` from a bootstrap metric entry; ``""`` without one."""
    if not entry or entry.get("difference") is None:
        return ""
    point, low, high = entry["difference"]
    p = fmt_p(entry)
    return f"{100 * point:+.2f} pts [{100 * low:+.2f}, {100 * high:+.2f}], {p + ', ' if p else ''}{entry['verdict']}"


def _boot_row(label: str, entry: dict[str, Any] | None, cells: tuple[str, str], change: str) -> tuple[str, str, str, str]:
    """A table row with bootstrap intervals where the entry has them, else the given cells and change."""
    if not entry:
        return (label, *cells, change)
    sides = [fmt_interval(e[0], (e[1], e[2])) if e else cell for e, cell in zip((entry["base"], entry["tuned"]), cells)]
    return (label, *sides, fmt_change(entry) or change)


def _truncation_cell(summary: dict[str, Any] | None) -> str:
    if not summary or not summary["completions"]:
        return NA
    return f"{summary['truncated_completions']} of {summary['completions']} ({fmt_pct(summary['truncated_completion_frac'])})"


def _overall_table(rel: dict[str, Any]) -> str:
    k, base, tuned = rel["k"], rel["base"], rel["tuned"]
    boot = rel["bootstrap"]["metrics"]
    level = f"{100 * base['confidence']:.0f}% task-level bootstrap"
    rows: list[tuple[str, str, str, str]] = [
        ("tasks (with a clean trial)", str(base["tasks"]), str(tuned["tasks"]), ""),
        ("clean trials", str(base["clean_trials"]), str(tuned["clean_trials"]), ""),
        _boot_row(f"pass@1 ({level})", boot.get("pass_at_1"), (NA, NA),
                  _fmt_points(base["pass_at_1"], tuned["pass_at_1"])),
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
        ("completions cut by the token budget", *(_truncation_cell(rel.get(f"{arm}_truncation")) for arm in ("base", "tuned")), ""),
    ]
    for name in ("input_tokens", "cached_input_tokens", "output_tokens"):
        rows.append((name.replace("_", " "), f"{base[name]:,}", f"{tuned[name]:,}", ""))
    rows += _cost_rows(rel)
    overall_p = rel["comparison"]["overall_prob_tuned_better"]
    rows.append(("P(tuned better), mean over shared tasks", "", NA if overall_p is None else f"{overall_p:.3f}", ""))
    df = pl.DataFrame(rows, schema=["metric", "base", "tuned", "change"], orient="row")
    return markdown_table(df)


def _cost_rows(rel: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    base_cost, tuned_cost = rel["base_cost"], rel["tuned_cost"]
    if base_cost is None or tuned_cost is None:
        return [("cost", "no price table", "no price table", "")]
    version = rel["price_table_version"]
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
        ("campaign cost (USD)", fmt_usd(base_cost["campaign_cost_usd"]), fmt_usd(tuned_cost["campaign_cost_usd"]), ""),
    ]


def _domain_table(rel: dict[str, Any]) -> str:
    return domain_markdown(rel, markdown_table)


def _task_table(rel: dict[str, Any]) -> str:
    per_task = rel["comparison"]["per_task"]
    if per_task.height == 0:
        return "(no task has clean trials in both campaigns)"
    df = per_task.select(
        "uid",
        *(["domain"] if "domain" in per_task.columns else []),
        pl.format("{}/{}", "base_c", "base_n").alias("base c/n"),
        pl.format("{}/{}", "tuned_c", "tuned_n").alias("tuned c/n"),
        pl.col("prob_tuned_better").map_elements(lambda p: f"{p:.3f}", return_dtype=pl.Utf8).alias("P(tuned better)"),
    )
    table = markdown_table(df)
    unmatched = rel["comparison"]["unmatched_tasks"]
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
            sides = [fmt_interval(e[0], (e[1], e[2])) if e else NA for e in (metric["base"], metric["tuned"])]
            rows.append({"split": split, "tasks": str(entry["tasks"]), "metric": label, f"base ({level})": sides[0],
                         f"tuned ({level})": sides[1], f"change ({level})": fmt_change(metric) or NA})
    return pl.DataFrame(rows)


def _split_table(rel: dict[str, Any]) -> str:
    result = rel["per_split"]
    rows = split_rows(result, rel["k_values"])
    table = markdown_table(rows) if rows.height else "(no split has tasks with clean trials)"
    if result["unassigned_domains"]:
        table += f"\n\nDomains in no split (left out of this table): {', '.join(result['unassigned_domains'])}"
    return table


def format_reliability_tables(reliability: dict[str, Any]) -> dict[str, str]:
    """Markdown ``overall``, ``per_domain`` and ``per_task`` tables from :func:`compute_reliability`,
    and ``per_split`` when ``report.splits`` names splits."""
    tables = {"overall": _overall_table(reliability)}
    if reliability.get("per_split", {}).get("splits"):
        tables["per_split"] = _split_table(reliability)
    if "changed_tasks" in reliability:
        tables["changed_tasks"] = changed_tasks_table(reliability["changed_tasks"], reliability.get("splits"))
    tables |= {"per_domain": _domain_table(reliability), "per_task": _task_table(reliability)}
    return tables


def reliability_tables(
    base_rows: pl.DataFrame,
    tuned_rows: pl.DataFrame,
    k: int,
    price_table: PriceTable | None = None,
    **kwargs: Any,
) -> dict[str, str]:
    """Base vs tuned markdown tables: ``overall``, ``per_domain``, ``per_task``.

    Keyword arguments are those of :func:`compute_reliability`. See its docs
    for errors; the tables show ``n/a`` with a reason for undefined values.
    """
    return format_reliability_tables(compute_reliability(base_rows, tuned_rows, k, price_table, **kwargs))


def band_table(difficulty_df: pl.DataFrame) -> str:
    """Markdown table of task counts per domain (rows) and band (columns)."""
    counts = band_counts(difficulty_df)
    wide = counts.pivot(on="band", index="domain", values="tasks", sort_columns=False)
    return markdown_table(wide)
