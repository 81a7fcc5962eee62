"""Probes, offline policy-relative difficulty, and the training pool."""


import dagster as dg
import polars as pl

from assets.metadata import md_image, md_table, tasks_hash
from assets.versions import EPISODE_ENGINE, code_version, frame_version, record_versions, tasks_version
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from rewardbox.episode.campaign import ROW_SCHEMA, system_error_counts
from rewardbox.episode.journal import campaign_journal
from rewardbox.episode.run import run_trials
from rewardbox.evaluation.interchange import import_infer_report
from rewardbox.metrics.truncation import truncation_summary
from rewardbox.report import band_histogram_png
from rewardbox.selection import task_difficulty as compute_difficulty
from rewardbox.selection import teachable
from rewardbox.selection import training_pool as select_pool
from rewardbox.tasks.schema import Task

GROUP = "selection"
PROBE_CODE = code_version(__name__, *EPISODE_ENGINE)
SELECT_CODE = code_version(__name__, "rewardbox.selection")
PARQUET = "parquet_io_manager"


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=PROBE_CODE)
def probe_results(context: dg.AssetExecutionContext, rewardbox: RewardboxResource, ray_cluster: RayClusterResource,
                  screened_candidates: list[Task], base_checkpoint: str) -> pl.DataFrame:
    """One row per probe trial: uid, trial, reward, passed, system_error, termination_reason,
    turns, tokens (input, output), duration_s. n trials per candidate with the base policy, or the
    rows of an existing ``tb infer`` JSONL run when ``probe.import_results`` is set."""
    profile = rewardbox.load()
    if profile.probe.import_results:
        rows, left_out = import_infer_report(profile.probe.import_results, screened_candidates)
        context.log.info(f"probe results imported from {profile.probe.import_results}: {rows.height} trials")
        for line in left_out:
            context.log.warning(f"probe import left out {line}")
    else:
        policy = rewardbox.policy(base_checkpoint or None)
        identity = [profile.section_hash("probe", "policy", "episode"), tasks_hash(screened_candidates), base_checkpoint]
        journal = campaign_journal(rewardbox.path("campaigns", "probe_results").parent, "probe_results", identity,
                                   ROW_SCHEMA)  # a killed probe run resumes where it stopped
        rows, _ = run_trials(screened_candidates, profile.probe.trials, policy, profile, log=context.log, label="probe_results",
                             journal=journal, keep_results=False,  # rows only: memory stays flat over the probe
                             executor=ray_cluster.executor(profile, context))
        journal.discard()
    summary = rows.group_by("termination_reason").len().sort("len", descending=True)
    context.add_output_metadata({
        "episodes": rows.height, "tasks": len(screened_candidates), "trials": profile.probe.trials,
        "pass_rate": float(rows["passed"].mean() or 0.0), "system_errors": int(rows["system_error"].is_not_null().sum()),
        "system_errors_by_kind": dg.MetadataValue.json(system_error_counts(rows)), "termination_reasons": md_table(summary), "sample": md_table(rows.head(20)), **truncation_summary(rows),
        "config_hash": profile.section_hash("probe", "policy", "episode"), "input_hash": tasks_hash(screened_candidates),
    })
    record_versions(context, frame_version(rows))
    return rows


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=SELECT_CODE)
def task_difficulty(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                    probe_results: pl.DataFrame) -> pl.DataFrame:
    """Jeffreys posterior per task, five bands, highest-mass band (ties to the harder band)."""
    profile = rewardbox.load()
    difficulty = compute_difficulty(probe_results, profile.selection)
    histogram = difficulty.group_by("domain", "band").len().sort("domain", "band")
    kept = difficulty.filter(pl.col("band").is_in(list(profile.selection.kept_bands)))
    context.add_output_metadata({
        "tasks": difficulty.height, "kept": kept.height,
        "kept_frac": round(kept.height / difficulty.height, 3) if difficulty.height else 0.0,
        "band_histogram": md_table(histogram), "band_plot": md_image(band_histogram_png(difficulty), "bands"),
        "table": md_table(difficulty), "config_hash": profile.section_hash("selection"),
    })
    record_versions(context, frame_version(difficulty))
    return difficulty


@dg.asset(group_name=GROUP, code_version=SELECT_CODE)
def training_pool(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                  task_difficulty: pl.DataFrame, screened_candidates: list[Task]) -> list[Task]:
    """The candidates in the kept bands: tasks the current policy can still learn from."""
    profile = rewardbox.load()
    pool_rows = select_pool(task_difficulty, profile.selection)
    uids = set(pool_rows["uid"].to_list())
    pool, teach_nothing = teachable([t for t in screened_candidates if t.uid in uids and t.split == "candidate"])
    context.add_output_metadata({
        "tasks": len(pool), "kept_bands": dg.MetadataValue.json(list(profile.selection.kept_bands)),
        "left_out_teach_nothing": dg.MetadataValue.json(teach_nothing),
        "table": md_table(pool_rows), "input_hash": tasks_hash(pool),
    })
    record_versions(context, tasks_version(pool), profile.section_hash("selection"))
    return pool
