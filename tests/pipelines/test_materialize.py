"""The whole asset graph materialises on temporary storage with the small ``test`` profile.

Rollouts are scripted (golden or null per episode); GRPO's update, the merge and the
merged-checkpoint gate use the real embedded model.
"""

from __future__ import annotations

import shutil

import dagster as dg
import polars as pl
import pytest

pytestmark = pytest.mark.slow


def test_main_job_materialises_every_asset_and_passes_its_checks(tmp_path, smollm2_checkpoint):
    from assets import evaluation, model, report, selection, tasks, training
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource

    shutil.copytree(smollm2_checkpoint, tmp_path / "test" / "checkpoints" / "base")  # reuse the conversion
    modules = [tasks, model, selection, training, evaluation, report]
    assets = [a for a in dg.load_assets_from_modules(modules) if "checkpoint_evaluation_results" not in str(a.keys)]
    checks = dg.load_asset_checks_from_modules(modules)
    resources = {
        "rewardbox": RewardboxResource(profile="test", data_dir=str(tmp_path)),
        "ray_cluster": RayClusterResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=str(tmp_path / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
    }
    result = dg.materialize([*assets, *checks], resources=resources, instance=dg.DagsterInstance.ephemeral())
    assert result.success

    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {
        "candidate_tasks", "benchmark_tasks", "screened_candidates", "base_checkpoint", "probe_results",
        "task_difficulty", "training_pool", "grpo_checkpoint", "merged_checkpoint", "base_evaluation_results",
        "evaluation_results", "reliability_report",
    }
    for event in result.get_asset_materialization_events():  # audit: config and content of every asset
        metadata, tags = event.materialization.metadata, event.materialization.tags
        assert {"config_hash", "content_hash"} <= set(metadata), event.asset_key
        assert tags["dagster/data_version"] == metadata["content_hash"].value and tags["dagster/code_version"]
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == 6 and all(e.passed for e in evaluations if e.check_name != "tuned_not_worse_than_base")

    probes = pl.read_parquet(tmp_path / "assets" / "probe_results.parquet")
    assert {"uid", "trial", "reward", "passed", "system_error", "termination_reason", "turns", "input_tokens",
            "output_tokens", "duration_s", "tries"} <= set(probes.columns)
    assert probes["uid"].n_unique() == 10 and probes.height == 10 * 4  # candidates x trials
    base = pl.read_parquet(tmp_path / "assets" / "base_evaluation_results.parquet")
    assert base.select("uid", "trial").n_unique() == base.height == 6 * 2
    report_md = (tmp_path / "test" / "report" / "reliability_report.md").read_text()
    assert "pass^2" in report_md and "| helpdesk |" in report_md
    decode_rows = (tmp_path / "test" / "evaluation" / "evaluation_results.jsonl").read_text().splitlines()
    assert len(decode_rows) == 6 * 2 and '"test_result"' in decode_rows[0]  # ThinkingBox DecodeResult rows
    merged = tmp_path / "test" / "checkpoints" / "merged"
    assert (merged / "config.json").exists() and list(merged.glob("*.safetensors"))
