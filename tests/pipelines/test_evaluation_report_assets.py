"""Evaluation and report assets on the ``test`` profile with scripted policies (no model): rows, JSONL, check."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl


def test_evaluations_stream_their_decode_results_and_the_check_reads_the_paired_interval(tmp_path):
    from assets import evaluation, report, tasks
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    @dg.asset(name="base_checkpoint")
    def base_checkpoint() -> str:  # scripted policies need no weights
        return ""

    @dg.asset(name="merged_checkpoint")
    def merged_checkpoint() -> str:
        return ""

    modules = [tasks, evaluation, report]
    assets = [
        a
        for a in dg.load_assets_from_modules(modules)
        if any(
            k.to_user_string()
            in {
                "candidate_tasks",
                "benchmark_tasks",
                "base_evaluation_results",
                "evaluation_results",
                "reliability_report",
            }
            for k in a.keys
        )
    ]
    checks = [
        c
        for c in dg.load_asset_checks_from_modules(modules)
        if any(
            k.name
            in {"tuned_not_worse_than_base", "base_evaluation_coverage", "evaluation_coverage"}
            for k in c.check_keys
        )
    ]
    resources = {
        "rewardbox": RewardboxResource(profile="test", data_dir=str(tmp_path)),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=str(tmp_path / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
    }
    result = dg.materialize(
        [*assets, base_checkpoint, merged_checkpoint, *checks],
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
    )
    assert result.success
    rows = pl.read_parquet(tmp_path / "assets" / "evaluation_results.parquet")
    decode = [
        json.loads(line)
        for line in (tmp_path / "test" / "evaluation" / "evaluation_results.jsonl")
        .read_text()
        .splitlines()
    ]
    assert [(d["uid"], d["metadata"]["repetition"]) for d in decode] == sorted(
        zip(rows["uid"], rows["trial"])
    )
    check = next(
        e
        for e in result.get_asset_check_evaluations()
        if e.check_name == "tuned_not_worse_than_base"
    )
    assert check.metadata["verdict"].value in {"within noise", "improved", "worse"}
    assert check.passed == (check.metadata["verdict"].value != "worse")
    # issue #23 item 7: the sign-flip test's p-values sit beside the interval in the check
    assert (
        0.0 < check.metadata["p_value_greater"].value <= 1.0
        and 0.0 < check.metadata["p_value_less"].value <= 1.0
    )
    assert check.metadata["interval_verdict"].value in {"within noise", "improved", "worse"}
    report_md = (tmp_path / "test" / "report" / "reliability_report.md").read_text()
    assert "task-level bootstrap" in report_md and "pass@1 change" in report_md
    assert "sign-flip permutation test" in report_md and "## Tasks that changed" in report_md
    summary = json.loads(
        (tmp_path / "test" / "report" / "verdict.json").read_text()
    )  # make demo prints it
    assert summary["pass_at_1_verdict"] == check.metadata["verdict"].value
    assert "**pass@1**" in report_md and "**pass^2**" in report_md
    metadata = next(
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "reliability_report"
    ).materialization.metadata
    assert (
        isinstance(metadata["plot"], dg.MarkdownMetadataValue)
        and len(metadata["plot"].value) < 1000
    )  # in place
    assert metadata["plot"].value.startswith("![pass@k, pass^k](data:image/svg+xml;base64,")
    pass_at_1 = metadata["per_domain pass@1"]
    assert isinstance(pass_at_1, dg.TableMetadataValue)
    assert [c.name for c in pass_at_1.schema.columns] == [
        "domain",
        "policy",
        "pass@1",
        "interval",
        "tasks",
    ]
    assert {"per_domain pass@1 change", "per_domain pass@2", "per_domain pass^2"} <= set(metadata)
