"""Probes, offline policy-relative difficulty, and the training pool."""


import dagster as dg
import polars as pl

from assets.metadata import md_image, md_table, tasks_hash
from resources.rewardbox import RewardboxResource
from rewardbox.evaluation.interchange import import_infer_results
from rewardbox.evaluation.services import run_trials
from rewardbox.metrics.truncation import truncation_summary
from rewardbox.report import band_histogram_png
from rewardbox.selection import task_difficulty as compute_difficulty
from rewardbox.selection import training_pool as select_pool
from rewardbox.tasks.schema import Task

GROUP = "selection"
PARQUET = "parquet_io_manager"


@dg.asset(group_name=GROUP, io_manager_key=PARQUET)
def probe_results(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                  screened_candidates: list[Task], base_checkpoint: str) -> pl.DataFrame:
    """One row per probe attempt: uid, trial, reward, passed, system_error, finish_reason,
    turns, tokens (input, output), seconds. n trials per candidate with the base policy, or the
    rows of an existing ``tb infer`` JSONL run when ``probe.import_results`` is set."""
    profile = rewardbox.load()
    if profile.probe.import_results:
        rows = import_infer_results(profile.probe.import_results, screened_candidates)
        context.log.info(f"probe results imported from {profile.probe.import_results}: {rows.height} attempts")
    else:
        policy = rewardbox.policy(base_checkpoint or None)
        rows, _ = run_trials(screened_candidates, profile.probe.trials, policy, profile, log=context.log.info)
    summary = rows.group_by("finish_reason").len().sort("len", descending=True)
    context.add_output_metadata({
        "attempts": rows.height, "tasks": len(screened_candidates), "trials": profile.probe.trials,
        "pass_rate": float(rows["passed"].mean() or 0.0), "system_errors": int(rows["system_error"].is_not_null().sum()),
        "finish_reasons": md_table(summary), "sample": md_table(rows.head(20)), **truncation_summary(rows),
        "config_hash": profile.section_hash("probe", "policy", "episode"), "input_hash": tasks_hash(screened_candidates),
    })
    return rows


@dg.asset(group_name=GROUP, io_manager_key=PARQUET)
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
    return difficulty


@dg.asset(group_name=GROUP)
def training_pool(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                  task_difficulty: pl.DataFrame, screened_candidates: list[Task]) -> list[Task]:
    """The candidates in the kept bands: tasks the current policy can still learn from."""
    profile = rewardbox.load()
    pool_rows = select_pool(task_difficulty, profile.selection)
    uids = set(pool_rows["uid"].to_list())
    pool = [t for t in screened_candidates if t.uid in uids and t.split == "candidate"]
    context.add_output_metadata({
        "tasks": len(pool), "kept_bands": dg.MetadataValue.json(list(profile.selection.kept_bands)),
        "table": md_table(pool_rows), "input_hash": tasks_hash(pool),
    })
    return pool
