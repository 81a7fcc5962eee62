"""Benchmark evaluation: base and tuned policies, tasks x k trials, with coverage gates."""


import dagster as dg
import polars as pl

from assets.metadata import md_table, tasks_hash
from assets.partitions import checkpoint_partitions
from resources.rewardbox import RewardboxResource
from rewardbox.evaluation.campaign import campaign_keys, coverage_problems, merge_repair, repair_keys
from rewardbox.evaluation.interchange import export_decode_results
from rewardbox.evaluation.services import run_trials
from rewardbox.metrics.truncation import truncation_summary
from rewardbox.tasks.schema import Task

GROUP = "evaluation"
PARQUET = "parquet_io_manager"


def evaluate(context, rewardbox: RewardboxResource, tasks: list[Task], checkpoint: str) -> pl.DataFrame:
    """Every benchmark task x k trials; one repair pass re-runs system-error keys.

    Also writes the attempts as ThinkingBox ``DecodeResult`` JSONL (``tb agg`` / ``tb sbs`` read it).
    """
    profile = rewardbox.load()
    k = profile.evaluation.trials
    rows, results = run_trials(tasks, k, rewardbox.policy(checkpoint or None), profile, log=context.log.info)
    redo = repair_keys(rows, campaign_keys(tasks, k))
    if redo:
        context.log.info(f"repair run: {len(redo)} missing or system-error keys")
        repaired, repaired_results = run_trials(tasks, k, rewardbox.policy(checkpoint or None), profile, keys=redo)
        rows = merge_repair(rows, repaired)
        latest = {(r.uid, r.trial): r for r in [*results, *repaired_results]}
        results = [latest[key] for key in sorted(latest)]
    decode_path = export_decode_results(results, tasks, rewardbox.path("evaluation", f"{context.asset_key.path[-1]}"
                                                                       f"{'-' + context.partition_key if context.has_partition_key else ''}.jsonl"))
    context.add_output_metadata({
        "attempts": rows.height, "tasks": len(tasks), "trials": k, "checkpoint": checkpoint,
        "pass_at_1": float(rows["passed"].mean() or 0.0), "system_errors": int(rows["system_error"].is_not_null().sum()),
        "repaired_keys": len(redo), **truncation_summary(rows), "decode_results_jsonl": dg.MetadataValue.path(str(decode_path)), "per_domain": md_table(rows.group_by("domain").agg(pl.col("passed").mean(), pl.len())),
        "config_hash": profile.section_hash("evaluation", "policy", "episode"), "input_hash": tasks_hash(tasks),
    })
    return rows


@dg.asset(group_name=GROUP, io_manager_key=PARQUET)
def base_evaluation_results(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                            benchmark_tasks: list[Task], base_checkpoint: str) -> pl.DataFrame:
    """The base policy on the held-out benchmark: tasks x k trials."""
    return evaluate(context, rewardbox, benchmark_tasks, base_checkpoint)


@dg.asset(group_name=GROUP, io_manager_key=PARQUET)
def evaluation_results(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                       benchmark_tasks: list[Task], merged_checkpoint: str) -> pl.DataFrame:
    """The tuned (merged) policy on the held-out benchmark: tasks x k trials."""
    return evaluate(context, rewardbox, benchmark_tasks, merged_checkpoint)


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, partitions_def=checkpoint_partitions)
def checkpoint_evaluation_results(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                                  benchmark_tasks: list[Task]) -> pl.DataFrame:
    """Any checkpoint directory dropped under ``<data>/<profile>/checkpoints/incoming/``,
    evaluated on the benchmark (one partition per checkpoint; the new-checkpoint sensor adds them)."""
    checkpoint = rewardbox.path("checkpoints", "incoming", context.partition_key)
    return evaluate(context, rewardbox, benchmark_tasks, str(checkpoint))


def _coverage_check(rows: pl.DataFrame, tasks: list[Task], rewardbox: RewardboxResource) -> dg.AssetCheckResult:
    problems = coverage_problems(rows, campaign_keys(tasks, rewardbox.load().evaluation.trials))
    return dg.AssetCheckResult(passed=not problems, metadata={"problems": len(problems),
                                                              "examples": dg.MetadataValue.json(problems[:20])})


@dg.asset_check(asset=base_evaluation_results, additional_ins={"benchmark_tasks": dg.AssetIn()}, blocking=True)
def base_evaluation_coverage(rewardbox: RewardboxResource, base_evaluation_results: pl.DataFrame,
                             benchmark_tasks: list[Task]) -> dg.AssetCheckResult:
    """Blocking: every (uid, trial) key exactly once, none unexpected."""
    return _coverage_check(base_evaluation_results, benchmark_tasks, rewardbox)


@dg.asset_check(asset=evaluation_results, additional_ins={"benchmark_tasks": dg.AssetIn()}, blocking=True)
def evaluation_coverage(rewardbox: RewardboxResource, evaluation_results: pl.DataFrame,
                        benchmark_tasks: list[Task]) -> dg.AssetCheckResult:
    """Blocking: every (uid, trial) key exactly once, none unexpected."""
    return _coverage_check(evaluation_results, benchmark_tasks, rewardbox)
