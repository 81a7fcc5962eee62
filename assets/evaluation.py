"""Benchmark evaluation: base and tuned policies, tasks x n trials, with coverage gates."""

import dagster as dg
import polars as pl

from assets.clean_trials import failure_on_unclean, stage_io
from assets.metadata import as_metadata, parser_parity_result
from assets.partitions import checkpoint_partitions
from assets.versions import EPISODE_ENGINE, code_version, frame_version, record_versions
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from resources.vllm_server import VllmServerResource
from rewardbox.evaluation.benchmark import check_coverage
from rewardbox.runtime.evaluate import evaluate as evaluate_stage
from rewardbox.tasks.schema import Task, task_set_version

GROUP = "evaluation"
CODE = code_version(__name__, *EPISODE_ENGINE)
PARQUET = "parquet_io_manager"


def parity_path(rewardbox: RewardboxResource, name: str):
    """Where a campaign's recorded raw completions go for the parser-parity check."""
    return rewardbox.path("parity", f"{name}.json")


def evaluate(
    context,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    vllm_server: VllmServerResource,
    tasks: list[Task],
    checkpoint: str,
) -> pl.DataFrame:
    """Every benchmark task x n trials, one repair pass (``rewardbox.runtime.evaluate.evaluate``).

    Trials go to a crash-safe journal first, so a run that is killed resumes where it stopped
    (same config, tasks and checkpoint); the journal is removed once the rows are complete.
    Also writes the trials as ThinkingBox ``DecodeResult`` JSONL (``tb agg`` / ``tb sbs`` read it), and a sample
    of raw completions for the parser-parity check. With ``serving.kind: vllm`` the checkpoint is served by vLLM
    for the campaign (``vllm_server``) and the episodes use an endpoint policy at it.
    """
    profile = rewardbox.load()
    name = f"{context.asset_key.path[-1]}{'-' + context.partition_key if context.has_partition_key else ''}"
    io = stage_io(context, rewardbox, profile, ray_cluster, vllm_server)
    with failure_on_unclean():
        run = evaluate_stage(
            profile,
            tasks,
            checkpoint,
            name,
            task_set_version(tasks),
            io,
            label=context.asset_key.to_user_string(),
        )
    context.add_output_metadata(as_metadata(run.metadata))
    record_versions(context, frame_version(run.rows))
    return run.rows


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=CODE)
def base_evaluation_results(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    vllm_server: VllmServerResource,
    benchmark_tasks: list[Task],
    base_checkpoint: str,
) -> pl.DataFrame:
    """The base policy on the held-out benchmark: tasks x n trials."""
    return evaluate(context, rewardbox, ray_cluster, vllm_server, benchmark_tasks, base_checkpoint)


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=CODE)
def evaluation_results(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    vllm_server: VllmServerResource,
    benchmark_tasks: list[Task],
    merged_checkpoint: str,
) -> pl.DataFrame:
    """The tuned (merged) policy on the held-out benchmark: tasks x n trials."""
    return evaluate(
        context, rewardbox, ray_cluster, vllm_server, benchmark_tasks, merged_checkpoint
    )


@dg.asset(
    group_name=GROUP,
    io_manager_key=PARQUET,
    partitions_def=checkpoint_partitions,
    code_version=CODE,
)
def checkpoint_evaluation_results(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    vllm_server: VllmServerResource,
    benchmark_tasks: list[Task],
) -> pl.DataFrame:
    """Any checkpoint directory dropped under ``<data>/<profile>/checkpoints/incoming/``,
    evaluated on the benchmark (one partition per checkpoint; the new-checkpoint sensor adds them)."""
    checkpoint = rewardbox.incoming_checkpoint(context.partition_key)
    return evaluate(context, rewardbox, ray_cluster, vllm_server, benchmark_tasks, str(checkpoint))


def _coverage_check(
    rows: pl.DataFrame, tasks: list[Task], rewardbox: RewardboxResource
) -> dg.AssetCheckResult:
    problems = check_coverage(rows, tasks, rewardbox.load().evaluation.trials)
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"problems": len(problems), "examples": dg.MetadataValue.json(problems[:20])},
    )


@dg.asset_check(
    asset=base_evaluation_results, additional_ins={"benchmark_tasks": dg.AssetIn()}, blocking=True
)
def base_evaluation_coverage(
    rewardbox: RewardboxResource, base_evaluation_results: pl.DataFrame, benchmark_tasks: list[Task]
) -> dg.AssetCheckResult:
    """Blocking: every (uid, trial) key exactly once, none unexpected."""
    return _coverage_check(base_evaluation_results, benchmark_tasks, rewardbox)


@dg.asset_check(
    asset=evaluation_results, additional_ins={"benchmark_tasks": dg.AssetIn()}, blocking=True
)
def evaluation_coverage(
    rewardbox: RewardboxResource, evaluation_results: pl.DataFrame, benchmark_tasks: list[Task]
) -> dg.AssetCheckResult:
    """Blocking: every (uid, trial) key exactly once, none unexpected."""
    return _coverage_check(evaluation_results, benchmark_tasks, rewardbox)


@dg.asset_check(asset=base_evaluation_results, blocking=True)
def base_evaluation_parser_parity(rewardbox: RewardboxResource) -> dg.AssetCheckResult:
    """Blocking: the campaign's raw completions (and the shipped corpus) read alike on training and evaluation paths."""
    return parser_parity_result(rewardbox.load(), parity_path(rewardbox, "base_evaluation_results"))


@dg.asset_check(asset=evaluation_results, blocking=True)
def evaluation_parser_parity(rewardbox: RewardboxResource) -> dg.AssetCheckResult:
    """Blocking: the campaign's raw completions (and the shipped corpus) read alike on training and evaluation paths."""
    return parser_parity_result(rewardbox.load(), parity_path(rewardbox, "evaluation_results"))
