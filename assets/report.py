"""The reliability report: base vs tuned on the held-out tasks, as markdown and PNG files."""


import dagster as dg
import polars as pl

from assets.metadata import md_chart, md_image, table_value
from assets.versions import code_version, files_version, record_versions
from resources.rewardbox import RewardboxResource
from rewardbox.metrics.bootstrap import paired_bootstrap
from rewardbox.metrics.permutation import TEST_THRESHOLD
from rewardbox.metrics.rows import task_counts
from rewardbox.report import (
    compute_reliability,
    format_reliability_tables,
    reliability_png,
    render_report_markdown,
)
from rewardbox.report.domain_tables import domain_frames
from rewardbox.report.inline_svg import fitted_markdown, reliability_svg
from rewardbox.report.tables import fmt_change
from rewardbox.report.verdict import verdict_summary
from rewardbox.strict_json import write_json

GROUP = "report"
CODE = code_version(__name__, "rewardbox.report", "rewardbox.metrics")


@dg.asset(group_name=GROUP, code_version=CODE)
def reliability_report(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                       base_evaluation_results: pl.DataFrame, evaluation_results: pl.DataFrame) -> str:
    """pass@1, pass@k, pass^k (unbiased), observed k/k, per domain, cost; base vs tuned side by side.

    Writes ``reliability_report.md`` and ``reliability.png`` under ``<data>/<profile>/report/``
    and returns the markdown path.
    """
    profile = rewardbox.load()
    k = profile.evaluation.trials
    k_values = sorted({v for v in profile.report.k_values if v <= k} | {1, k})
    reliability = compute_reliability(base_evaluation_results, evaluation_results, k, profile.report.price_table,
                                      k_values=k_values, confidence=profile.report.confidence,
                                      splits=profile.report.splits)
    tables = format_reliability_tables(reliability)
    png = reliability_png(reliability["base"], reliability["tuned"])
    out = rewardbox.path("report", "reliability_report.md")
    (out.parent / "reliability.png").write_bytes(png)
    out.write_text(render_report_markdown(tables, {"pass@k and pass^k vs k": "reliability.png"},
                                          title=f"Reliability report ({profile.name} profile)"))
    base, tuned = reliability["base"], reliability["tuned"]
    write_json(out.parent / "verdict.json", verdict_summary(reliability))  # what `make demo` prints last
    context.add_output_metadata({
        "path": dg.MetadataValue.path(str(out)), "overall": dg.MetadataValue.md(tables["overall"]),
        **md_chart("plot", fitted_markdown(lambda most: reliability_svg(base, tuned, most), "pass@k, pass^k")),
        **{f"per_domain {title}": table_value(frame) for title, frame in domain_frames(reliability).items()},
        "plot_full": md_image(png, "pass@k and pass^k, base vs tuned"),
        "plot_png": dg.MetadataValue.path(str(out.parent / "reliability.png")),
        "base_pass_at_1": base.get("pass_at_1"), "tuned_pass_at_1": tuned.get("pass_at_1"),
        "pass_at_1_verdict": reliability["bootstrap"]["metrics"].get("pass_at_1", {}).get("verdict", "n/a"),
        "pass_at_1_change": fmt_change(reliability["bootstrap"]["metrics"].get("pass_at_1")) or "n/a",
        "changed_tasks": reliability["changed_tasks"].height,
        **_split_metadata(tables, reliability["per_split"]),
        "config_hash": profile.section_hash("report", "evaluation"),
    })
    record_versions(context, files_version(out.parent))
    return str(out)


@dg.asset_check(asset=reliability_report, additional_ins={"base_evaluation_results": dg.AssetIn(),
                                                          "evaluation_results": dg.AssetIn()})
def tuned_not_worse_than_base(rewardbox: RewardboxResource, base_evaluation_results: pl.DataFrame,
                              evaluation_results: pl.DataFrame) -> dg.AssetCheckResult:
    """WARN when the tuned policy's pass@1 is worse than the base's beyond noise on the held-out tasks.

    The change (tuned - base) gets the report's paired task-level bootstrap interval at
    ``report.confidence`` (``rewardbox.metrics.bootstrap``, stratified by domain, same seed) and the exact
    paired sign-flip test on per-task differences (``rewardbox.metrics.permutation``): "worse" (fails) only
    when the interval lies below 0 and the one-sided p < 0.1; "improved" likewise above 0; else "within noise".
    The metadata carries both one-sided p-values and the interval's own verdict.
    """
    boot = paired_bootstrap(task_counts(base_evaluation_results, "base evaluation rows"),
                            task_counts(evaluation_results, "tuned evaluation rows"), [1],
                            rewardbox.load().report.confidence, by_domain=True)
    entry = boot["metrics"].get("pass_at_1")
    if entry is None or entry["difference"] is None:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN,
                                   metadata={"verdict": "n/a", "reason": "no clean trial in one of the campaigns"})
    point, low, high = entry["difference"]
    test = entry["test"]
    return dg.AssetCheckResult(
        passed=entry["verdict"] != "worse", severity=dg.AssetCheckSeverity.WARN,
        description=f"tuned - base pass@1 {fmt_change(entry)}",
        metadata={"base_pass_at_1": entry["base"][0], "tuned_pass_at_1": entry["tuned"][0],
                  "pass_at_1_change": point, "pass_at_1_change_low": low, "pass_at_1_change_high": high,
                  "verdict": entry["verdict"], "interval_verdict": entry["interval_verdict"],
                  "p_value_greater": test["p_greater"], "p_value_less": test["p_less"],
                  "p_value_exact": test["exact"], "changed_tasks": test["changed"], "test_threshold": TEST_THRESHOLD,
                  "tasks": boot["tasks"], "resamples": boot["resamples"],
                  "seed": boot["seed"], "confidence": boot["confidence"]})


def _split_metadata(tables: dict[str, str], per_split: dict) -> dict:
    """The per-split table and each split's pass@1 verdict, for the asset's metadata (none without splits)."""
    if "per_split" not in tables:
        return {}
    verdicts = {f"pass_at_1_verdict_{split}": entry["metrics"].get("pass_at_1", {}).get("verdict", "n/a")
                for split, entry in per_split["splits"].items()}
    return {"per_split": dg.MetadataValue.md(tables["per_split"]), **verdicts}
