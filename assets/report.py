"""The reliability report: base vs tuned on the held-out tasks, as markdown and PNG files.

The numbers are computed once per materialisation (``rewardbox.metrics.reliability.compute_reliability``,
a typed ``Reliability``): the report formats them and the ``tuned_not_worse_than_base`` check, a check of
the same asset, reads its verdict from the same value (no second bootstrap).
"""

from pathlib import Path

import dagster as dg
import polars as pl

from assets.metadata import md_chart, md_image, table_value
from assets.versions import code_version, files_version
from resources.rewardbox import RewardboxResource
from rewardbox.config.profile import Profile
from rewardbox.metrics.permutation import TEST_THRESHOLD
from rewardbox.metrics.reliability import Reliability, compute_reliability
from rewardbox.report import format_reliability_tables, reliability_png, render_report_markdown
from rewardbox.report.domain_tables import domain_frames
from rewardbox.report.inline_svg import fitted_markdown, reliability_svg
from rewardbox.report.tables import fmt_change
from rewardbox.report.verdict import verdict_summary
from rewardbox.strict_json import write_json

GROUP = "report"
CODE = code_version(__name__, "rewardbox.report", "rewardbox.metrics")
CHECK = "tuned_not_worse_than_base"


@dg.asset(
    group_name=GROUP,
    code_version=CODE,
    check_specs=[
        dg.AssetCheckSpec(
            CHECK,
            asset="reliability_report",
            blocking=False,
            description="WARN when tuned pass@1 is worse than base beyond noise",
        )
    ],
)
def reliability_report(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    base_evaluation_results: pl.DataFrame,
    evaluation_results: pl.DataFrame,
):
    """pass@1, pass@k, pass^k (unbiased), observed k/k, per domain, cost; base vs tuned side by side.

    Writes ``reliability_report.md``, ``reliability.png`` and ``verdict.json`` under
    ``<data>/<profile>/report/``, outputs the markdown path, then the ``tuned_not_worse_than_base`` check.
    """
    profile = rewardbox.load()
    reliability = reliability_of(profile, base_evaluation_results, evaluation_results)
    out = rewardbox.path("report", "reliability_report.md")
    metadata = write_report(out, reliability, profile.name) | {
        "config_hash": profile.section_hash("report", "evaluation")
    }
    version = files_version(
        out.parent
    )  # record_versions' two steps: this asset has a check beside its output
    context.set_data_version(context.asset_key, dg.DataVersion(version))
    yield dg.Output(str(out), metadata=metadata | {"content_hash": version})
    yield tuned_not_worse_than_base(reliability)


def reliability_of(
    profile: Profile, base_rows: pl.DataFrame, tuned_rows: pl.DataFrame
) -> Reliability:
    """The profile's reliability result: k = ``evaluation.trials``, curves at ``report.k_values`` up to k,
    ``report.confidence``, ``report.price_table`` and ``report.splits``."""
    k = profile.evaluation.trials
    k_values = sorted({v for v in profile.report.k_values if v <= k} | {1, k})
    return compute_reliability(
        base_rows,
        tuned_rows,
        k,
        profile.report.price_table,
        k_values=k_values,
        confidence=profile.report.confidence,
        splits=profile.report.splits,
    )


def write_report(out: Path, reliability: Reliability, profile_name: str) -> dict:
    """Write the markdown report at ``out`` with ``reliability.png`` and ``verdict.json`` beside it (what
    ``make demo`` prints last); returns the asset's metadata (tables, charts, pass@1 verdict)."""
    tables = format_reliability_tables(reliability)
    png = reliability_png(reliability.base, reliability.tuned)
    (out.parent / "reliability.png").write_bytes(png)
    out.write_text(
        render_report_markdown(
            tables,
            {"pass@k and pass^k vs k": "reliability.png"},
            title=f"Reliability report ({profile_name} profile)",
        )
    )
    write_json(out.parent / "verdict.json", verdict_summary(reliability))
    base, tuned, change = reliability.base, reliability.tuned, reliability.pass_at_1_change
    return {
        "location": dg.MetadataValue.path(str(out)),
        "overall": dg.MetadataValue.md(tables["overall"]),
        **md_chart(
            "plot",
            fitted_markdown(lambda most: reliability_svg(base, tuned, most), "pass@k, pass^k"),
        ),
        **{
            f"per_domain {title}": table_value(frame)
            for title, frame in domain_frames(reliability).items()
        },
        "plot_full": md_image(png, "pass@k and pass^k, base vs tuned"),
        "plot_png": dg.MetadataValue.path(str(out.parent / "reliability.png")),
        "base_pass_at_1": base.get("pass_at_1"),
        "tuned_pass_at_1": tuned.get("pass_at_1"),
        "pass_at_1_verdict": (change or {}).get("verdict", "n/a"),
        "pass_at_1_change": fmt_change(change) or "n/a",
        "changed_tasks": reliability.changed_tasks.height,
        **_split_metadata(tables, reliability.per_split),
    }


def tuned_not_worse_than_base(reliability: Reliability) -> dg.AssetCheckResult:
    """WARN when the tuned policy's pass@1 is worse than the base's beyond noise on the held-out tasks.

    Reads the report's own pass@1 change (``Reliability.pass_at_1_change``): the paired task-level bootstrap
    interval at ``report.confidence`` (``rewardbox.metrics.bootstrap``, stratified by domain) and the exact
    paired sign-flip test on per-task differences (``rewardbox.metrics.permutation``): "worse" (fails) only
    when the interval lies below 0 and the one-sided p < 0.1; "improved" likewise above 0; else "within noise".
    The metadata carries both one-sided p-values and the interval's own verdict.
    """
    entry, boot = reliability.pass_at_1_change, reliability.bootstrap
    if entry is None or entry["difference"] is None:
        return dg.AssetCheckResult(
            check_name=CHECK,
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"verdict": "n/a", "reason": "no clean trial in one of the campaigns"},
        )
    point, low, high = entry["difference"]
    test = entry["test"]
    return dg.AssetCheckResult(
        check_name=CHECK,
        passed=entry["verdict"] != "worse",
        severity=dg.AssetCheckSeverity.WARN,
        description=f"tuned - base pass@1 {fmt_change(entry)}",
        metadata={
            "base_pass_at_1": entry["base"][0],
            "tuned_pass_at_1": entry["tuned"][0],
            "pass_at_1_change": point,
            "pass_at_1_change_low": low,
            "pass_at_1_change_high": high,
            "verdict": entry["verdict"],
            "interval_verdict": entry["interval_verdict"],
            "p_value_greater": test["p_greater"],
            "p_value_less": test["p_less"],
            "p_value_exact": test["exact"],
            "changed_tasks": test["changed"],
            "test_threshold": TEST_THRESHOLD,
            "tasks": boot["tasks"],
            "resamples": boot["resamples"],
            "seed": boot["seed"],
            "confidence": boot["confidence"],
        },
    )


def _split_metadata(tables: dict[str, str], per_split: dict) -> dict:
    """The per-split table and each split's pass@1 verdict, for the asset's metadata (none without splits)."""
    if "per_split" not in tables:
        return {}
    verdicts = {
        f"pass_at_1_verdict_{split}": entry["metrics"].get("pass_at_1", {}).get("verdict", "n/a")
        for split, entry in per_split["splits"].items()
    }
    return {"per_split": dg.MetadataValue.md(tables["per_split"]), **verdicts}
