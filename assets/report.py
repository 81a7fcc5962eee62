"""The reliability report: base vs tuned on the held-out tasks, as markdown and PNG files."""


import dagster as dg
import polars as pl

from assets.metadata import md_image
from assets.versions import code_version, files_version, record_versions
from resources.rewardbox import RewardboxResource
from rewardbox.report import (
    compute_reliability,
    format_reliability_tables,
    reliability_png,
    render_report_markdown,
)

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
                                      k_values=k_values)
    tables = format_reliability_tables(reliability)
    png = reliability_png(reliability["base"], reliability["tuned"])
    out = rewardbox.path("report", "reliability_report.md")
    (out.parent / "reliability.png").write_bytes(png)
    out.write_text(render_report_markdown(tables, {"pass@k and pass^k vs k": "reliability.png"},
                                          title=f"Reliability report ({profile.name} profile)"))
    base, tuned = reliability["base"], reliability["tuned"]
    context.add_output_metadata({
        "path": dg.MetadataValue.path(str(out)), "overall": dg.MetadataValue.md(tables["overall"]),
        "per_domain": dg.MetadataValue.md(tables["per_domain"]), "plot": md_image(png, "reliability"),
        "base_pass_at_1": base.get("pass_at_1"), "tuned_pass_at_1": tuned.get("pass_at_1"),
        "config_hash": profile.section_hash("report", "evaluation"),
    })
    record_versions(context, files_version(out.parent))
    return str(out)


@dg.asset_check(asset=reliability_report, additional_ins={"base_evaluation_results": dg.AssetIn(),
                                                          "evaluation_results": dg.AssetIn()})
def tuned_not_worse_than_base(base_evaluation_results: pl.DataFrame, evaluation_results: pl.DataFrame) -> dg.AssetCheckResult:
    """WARN: the tuned policy's pass@1 is below the base policy's on the held-out tasks."""
    def rate(rows: pl.DataFrame) -> float:
        clean = rows.filter(pl.col("system_error").is_null())
        return float(clean["passed"].mean() or 0.0) if clean.height else 0.0

    base, tuned = rate(base_evaluation_results), rate(evaluation_results)
    return dg.AssetCheckResult(passed=tuned >= base, severity=dg.AssetCheckSeverity.WARN,
                               metadata={"base_pass_at_1": base, "tuned_pass_at_1": tuned})
