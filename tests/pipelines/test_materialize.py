"""The whole asset graph materialises on temporary storage with the small ``test`` profile.

Rollouts are scripted (golden or null per episode), sandboxes in-process, the task set tiny.
GRPO's update, the merge and the merged-checkpoint gate run for real: on the embedded model in
the slow test, on a tiny randomly initialised checkpoint in the fast one (``make test-fast``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

MAIN_ASSETS = {
    "candidate_tasks",
    "benchmark_tasks",
    "screened_candidates",
    "base_checkpoint",
    "probe_results",
    "reference_probe_results",
    "task_difficulty",
    "training_pool",
    "grpo_checkpoint",
    "merged_checkpoint",
    "base_evaluation_results",
    "evaluation_results",
    "reliability_report",
}


def _materialize_main_graph(tmp_path: Path, base_checkpoint: dg.AssetsDefinition | None = None):
    """Every asset and check of the main job; ``base_checkpoint`` replaces the converting asset when given."""
    from assets import evaluation, model, report, selection, tasks, training
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    modules = [tasks, model, selection, training, evaluation, report]
    assets = [
        a
        for a in dg.load_assets_from_modules(modules)
        if "checkpoint_evaluation_results" not in str(a.keys)
    ]
    if base_checkpoint is not None:
        assets = [a for a in assets if a.key != base_checkpoint.key] + [base_checkpoint]
    resources = {
        "rewardbox": RewardboxResource(profile="test", data_dir=str(tmp_path)),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=str(tmp_path / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
    }
    return dg.materialize(
        [*assets, *dg.load_asset_checks_from_modules(modules)],
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
    )


def _check_plots_in_place(metadata: dict) -> None:
    """The band chart, the training curve and the report chart are markdown short enough for the Dagster UI
    to show in place (under 1,000 characters); the band table has named columns and every band."""
    for asset, key in (
        ("task_difficulty", "band_plot"),
        ("grpo_checkpoint", "training_curve"),
        ("reliability_report", "plot"),
    ):
        value = metadata[asset][key]
        assert isinstance(value, dg.MarkdownMetadataValue) and len(value.value) < 1000, (asset, key)
        assert "data:image/svg+xml;base64," in value.value
    bands = metadata["task_difficulty"]["band_histogram"]
    assert isinstance(bands, dg.TableMetadataValue) and [c.name for c in bands.schema.columns][
        :2
    ] == ["band", "tasks"]
    assert [r.data["band"] for r in bands.records] == [
        "too_hard",
        "hard",
        "medium",
        "easy",
        "too_easy",
    ]


def _check_main_graph(result, tmp_path: Path, audited: set[str]) -> None:
    assert result.success
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == MAIN_ASSETS
    for (
        event
    ) in result.get_asset_materialization_events():  # audit: config and content of every asset
        if event.asset_key.to_user_string() not in audited:
            continue
        metadata, tags = event.materialization.metadata, event.materialization.tags
        assert {"config_hash", "content_hash"} <= set(metadata), event.asset_key
        assert (
            tags["dagster/data_version"] == metadata["content_hash"].value
            and tags["dagster/code_version"]
        )
    evaluations = result.get_asset_check_evaluations()
    assert len(evaluations) == 9 and all(
        e.passed for e in evaluations if e.check_name != "tuned_not_worse_than_base"
    )

    probes = pl.read_parquet(tmp_path / "assets" / "probe_results.parquet")
    assert {
        "uid",
        "trial",
        "reward",
        "passed",
        "system_error",
        "termination_reason",
        "turns",
        "input_tokens",
        "output_tokens",
        "duration_s",
        "tries",
    } <= set(probes.columns)
    assert probes["uid"].n_unique() == 10 and probes.height == 10 * 4  # candidates x trials
    base = pl.read_parquet(tmp_path / "assets" / "base_evaluation_results.parquet")
    assert base.select("uid", "trial").n_unique() == base.height == 6 * 2
    report_md = (tmp_path / "test" / "report" / "reliability_report.md").read_text()
    assert "pass^2" in report_md and "| helpdesk |" in report_md
    _check_plots_in_place(
        {
            e.asset_key.to_user_string(): e.materialization.metadata
            for e in result.get_asset_materialization_events()
        }
    )
    decode_rows = (
        (tmp_path / "test" / "evaluation" / "evaluation_results.jsonl").read_text().splitlines()
    )
    assert (
        len(decode_rows) == 6 * 2 and '"test_result"' in decode_rows[0]
    )  # ThinkingBox DecodeResult rows
    merged = tmp_path / "test" / "checkpoints" / "merged"
    assert (merged / "config.json").exists() and list(merged.glob("*.safetensors"))


@pytest.mark.slow
def test_main_job_materialises_every_asset_and_passes_its_checks(tmp_path, smollm2_checkpoint):
    shutil.copytree(
        smollm2_checkpoint, tmp_path / "test" / "checkpoints" / "base"
    )  # reuse the conversion
    _check_main_graph(_materialize_main_graph(tmp_path), tmp_path, audited=MAIN_ASSETS)


def test_main_graph_materialises_fast_on_a_tiny_checkpoint(tmp_path):
    """The same graph with a tiny random checkpoint as the base: a real GRPO step, merge and gate in seconds."""
    from tests.fixtures.tiny_checkpoint import write_tiny_checkpoint

    tiny = write_tiny_checkpoint(tmp_path / "tiny")

    @dg.asset(name="base_checkpoint", group_name="model")
    def tiny_base_checkpoint() -> str:
        """Test stand-in for the GGUF conversion: the tiny checkpoint's directory."""
        return str(tiny)

    result = _materialize_main_graph(tmp_path, tiny_base_checkpoint)
    _check_main_graph(result, tmp_path, audited=MAIN_ASSETS - {"base_checkpoint"})
    grpo = next(
        e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if e.asset_key.to_user_string() == "grpo_checkpoint"
    )
    assert (
        grpo["trained"].value is True and grpo["steps"].value == 1
    )  # one real GRPO step on the tiny model
    adapter = tmp_path / "test" / "checkpoints" / "grpo_adapter"
    assert (adapter / "adapter_config.json").exists() and list(adapter.glob("*.safetensors"))
    timed = {  # each campaign and training stage records its wall time and peak memory (pipelines.where)
        e.asset_key.to_user_string(): e.materialization.metadata
        for e in result.get_asset_materialization_events()
        if "peak_rss_mib" in e.materialization.metadata
    }
    assert {"probe_results", "grpo_checkpoint", "base_evaluation_results"} <= set(timed)
    assert all(m["wall_s"].value > 0 and m["peak_rss_mib"].value > 50 for m in timed.values())
