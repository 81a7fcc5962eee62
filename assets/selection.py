"""Probes, reference screening, offline policy-relative difficulty, and the training pool."""

import dagster as dg
import polars as pl

from assets.clean_trials import failure_on_unclean, stage_io
from assets.metadata import (
    as_metadata,
    md_chart,
    md_image,
    md_table,
    parser_parity_result,
    table_value,
)
from assets.versions import EPISODE_ENGINE, code_version, frame_version, record_versions
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from resources.vllm_server import VllmServerResource
from rewardbox.report import band_histogram_png
from rewardbox.report.inline_svg import band_svg, fitted_markdown
from rewardbox.runtime.probe import probe, reference_probe
from rewardbox.runtime.select import training_pool as select_training_pool
from rewardbox.selection import task_difficulty as compute_difficulty
from rewardbox.selection.difficulty import band_summary
from rewardbox.tasks.schema import Task, task_set_version

GROUP = "selection"
PROBE_CODE = code_version(__name__, *EPISODE_ENGINE)
SELECT_CODE = code_version(__name__, "rewardbox.selection", "rewardbox.runtime.select")
PARQUET = "parquet_io_manager"


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=PROBE_CODE)
def probe_results(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    vllm_server: VllmServerResource,
    screened_candidates: list[Task],
    base_checkpoint: str,
) -> pl.DataFrame:
    """One row per probe trial: uid, trial, reward, passed, system_error, termination_reason,
    turns, tokens (input, output), duration_s. n trials per candidate with the base policy, or the
    rows of an existing ``tb infer`` JSONL run when ``probe.import_results`` is set. With
    ``probe.family_screening`` only the candidates family-level screening picks are probed (the others get
    no rows; the ``family_screening`` metadata counts both). With ``serving.kind: vllm``
    the base checkpoint is served by vLLM for the probes; a sample of raw completions is kept for the
    parser-parity check (``rewardbox.runtime.probe.probe``)."""
    profile = rewardbox.load()
    io = stage_io(context, rewardbox, profile, ray_cluster, vllm_server)
    with failure_on_unclean():
        run = probe(
            profile, screened_candidates, base_checkpoint, task_set_version(screened_candidates), io
        )
    context.add_output_metadata(as_metadata(run.metadata))
    record_versions(context, frame_version(run.rows))
    return run.rows


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=PROBE_CODE)
def reference_probe_results(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    screened_candidates: list[Task],
) -> pl.DataFrame:
    """The reference policy's trials of every candidate (probe-row schema), the pool's first gate:
    ``reference.min_clean_runs`` trials with system errors re-run, or an imported ``tb infer`` run.
    Without a ``reference`` section: no rows, and metadata saying it was skipped
    (``rewardbox.runtime.probe.reference_probe``)."""
    profile = rewardbox.load()
    io = stage_io(context, rewardbox, profile, ray_cluster)
    with failure_on_unclean():
        run = reference_probe(
            profile, screened_candidates, task_set_version(screened_candidates), io
        )
    context.add_output_metadata(as_metadata(run.metadata))
    record_versions(context, frame_version(run.rows))
    return run.rows


@dg.asset_check(asset=probe_results, blocking=True)
def probe_parser_parity(rewardbox: RewardboxResource) -> dg.AssetCheckResult:
    """Blocking: the probes' raw completions (and the shipped corpus) read alike on the training path and the
    evaluation paths, so the difficulty they measure is the one training acts on."""
    return parser_parity_result(rewardbox.load(), rewardbox.path("parity", "probe_results.json"))


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=SELECT_CODE)
def task_difficulty(
    context: dg.AssetExecutionContext, rewardbox: RewardboxResource, probe_results: pl.DataFrame
) -> pl.DataFrame:
    """Jeffreys posterior per task, five bands, highest-mass band (ties to the harder band)."""
    profile = rewardbox.load()
    difficulty = compute_difficulty(probe_results, profile.selection)
    kept = difficulty.filter(pl.col("band").is_in(list(profile.selection.kept_bands)))
    context.add_output_metadata(
        {
            "tasks": difficulty.height,
            "kept": kept.height,
            "kept_frac": round(kept.height / difficulty.height, 3) if difficulty.height else 0.0,
            "band_histogram": table_value(band_summary(difficulty)),
            **md_chart(
                "band_plot", fitted_markdown(lambda _: band_svg(difficulty), "tasks per band")
            ),
            "band_plot_png": md_image(band_histogram_png(difficulty), "tasks per band and domain"),
            "table": md_table(difficulty),
            "config_hash": profile.section_hash("selection"),
        }
    )
    record_versions(context, frame_version(difficulty))
    return difficulty


@dg.asset(group_name=GROUP, code_version=SELECT_CODE)
def training_pool(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    task_difficulty: pl.DataFrame,
    reference_probe_results: pl.DataFrame,
    screened_candidates: list[Task],
) -> list[Task]:
    """The candidates in the kept bands that the reference solved (when a reference is configured):
    tasks the current policy can still learn from and that are known to be solvable."""
    profile = rewardbox.load()
    run = select_training_pool(
        profile, task_difficulty, reference_probe_results, screened_candidates
    )
    context.add_output_metadata(as_metadata(run.metadata))
    reference = () if profile.reference is None else ("reference",)
    record_versions(
        context, run.metadata["input_hash"], profile.section_hash(*reference, "selection")
    )
    return run.extra
