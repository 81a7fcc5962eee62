"""The optional warm start (``rft.enabled``; docs/warm_start.md): its adapter, its merge, its benchmark
evaluation, GRPO started from it, and the three-arm report.

Only ``pipelines.graph.asset_definitions`` loads this module, and only when the profile enables the
warm start: it then replaces ``grpo_checkpoint`` and ``reliability_report`` with the versions here
(same names, same checks, one more input each). With the warm start off (every shipped profile)
the graph is the one without it.
"""

import dagster as dg
import polars as pl

from assets.evaluation import evaluate
from assets.metadata import md_image, md_table
from assets.report import CHECK, reliability_of, tuned_not_worse_than_base
from assets.training import train_grpo
from assets.versions import EPISODE_ENGINE, code_version, files_version, record_versions
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from resources.vllm_server import VllmServerResource
from rewardbox.evaluation.benchmark import check_coverage
from rewardbox.report.plots import arms_png
from rewardbox.report.three_arms import (
    ThreeArms,
    arm_summaries,
    render_three_arm_markdown,
    three_arm_rows,
    three_arm_verdict,
)
from rewardbox.runtime import train
from rewardbox.runtime.warm_start import RFTRun, train_rft
from rewardbox.strict_json import write_json
from rewardbox.tasks.schema import Task

GROUP = "warm_start"
RFT_CODE = code_version(
    __name__, "rewardbox.training", "rewardbox.runtime.warm_start", *EPISODE_ENGINE
)
TRAIN_CODE = code_version(
    __name__, "rewardbox.training", "rewardbox.runtime.train", *EPISODE_ENGINE
)
EVAL_CODE = code_version(__name__, *EPISODE_ENGINE)
REPORT_CODE = code_version(__name__, "rewardbox.report", "rewardbox.metrics")
PARQUET = "parquet_io_manager"


@dg.asset(group_name=GROUP, code_version=RFT_CODE)
def rft_checkpoint(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    training_pool: list[Task],
    base_checkpoint: str,
    probe_results: pl.DataFrame,
) -> str:
    """The warm start: a LoRA adapter fine-tuned (supervised NLL on the policy's own completion tokens,
    GRPO's mask) on the base policy's successful probe trajectories of the training pool, replayed and
    kept only when they pass again (``rewardbox.runtime.warm_start.train_rft``). Never benchmark tasks.

    Raises:
        dg.Failure: benchmark tasks in the pool.
    """
    profile = rewardbox.load()
    out = rewardbox.path("checkpoints", "rft_adapter")
    try:
        adapter, run = train_rft(
            profile,
            training_pool,
            base_checkpoint,
            probe_results,
            out,
            log=context.log.info,
            policy_api_key=rewardbox.policy_api_key,
        )
    except train.LeakedTasksError as exc:
        raise dg.Failure(description=str(exc)) from exc
    context.add_output_metadata(
        rft_metadata(adapter, run)
        | {"config_hash": profile.section_hash("rft", "grpo", "probe", "policy", "episode")}
    )
    record_versions(context, files_version(adapter))
    return str(adapter)


def rft_metadata(adapter, run: RFTRun) -> dict:
    """The warm start's metadata: counts, per-epoch NLL, log-probs before/after, the replayed keys."""
    metrics = run.metrics()
    return {
        "location": dg.MetadataValue.path(str(adapter)),
        "trained": bool(run.update.samples),
        **{k: v for k, v in metrics.items() if k != "epoch_nll" and v is not None},
        "epoch_nll": dg.MetadataValue.json(metrics["epoch_nll"]),
        "replayed_keys": md_table(pl.DataFrame(run.keys)) if run.keys else "none",
    }


@dg.asset(group_name=GROUP, code_version=RFT_CODE)
def rft_merged_checkpoint(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    base_checkpoint: str,
    rft_checkpoint: str,
) -> str:
    """The warm start's adapter merged into the base weights (what its evaluation loads)."""
    profile = rewardbox.load()
    merged = train.merge(
        profile, base_checkpoint, rft_checkpoint, rewardbox.path("checkpoints", "rft_merged")
    )
    context.add_output_metadata({"location": dg.MetadataValue.path(str(merged))})
    record_versions(context, files_version(merged), profile.section_hash("rft", "grpo"))
    return str(merged)


@dg.asset(group_name=GROUP, io_manager_key=PARQUET, code_version=EVAL_CODE)
def rft_evaluation_results(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    vllm_server: VllmServerResource,
    benchmark_tasks: list[Task],
    rft_merged_checkpoint: str,
) -> pl.DataFrame:
    """The warm-started policy on the held-out benchmark: the same tasks x n trials (and seeds) as
    the base and tuned evaluations."""
    return evaluate(
        context, rewardbox, ray_cluster, vllm_server, benchmark_tasks, rft_merged_checkpoint
    )


@dg.asset_check(
    asset=rft_evaluation_results, additional_ins={"benchmark_tasks": dg.AssetIn()}, blocking=True
)
def rft_evaluation_coverage(
    rewardbox: RewardboxResource, rft_evaluation_results: pl.DataFrame, benchmark_tasks: list[Task]
) -> dg.AssetCheckResult:
    """Blocking: every (uid, trial) key exactly once, none unexpected."""
    trials = rewardbox.load().evaluation.trials
    problems = check_coverage(rft_evaluation_results, benchmark_tasks, trials)
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"problems": len(problems), "examples": dg.MetadataValue.json(problems[:20])},
    )


@dg.asset(name="grpo_checkpoint", group_name="training", code_version=TRAIN_CODE)
def warm_grpo_checkpoint(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    training_pool: list[Task],
    base_checkpoint: str,
    probe_results: pl.DataFrame,
    rft_checkpoint: str,
) -> str:
    """GRPO on the training pool started from the warm start's adapter (``rft_checkpoint``): the
    adapter it saves holds warm start + GRPO, and ``merged_checkpoint`` merges that."""
    return train_grpo(
        context,
        rewardbox,
        ray_cluster,
        training_pool,
        base_checkpoint,
        probe_results,
        init_adapter=rft_checkpoint,
    )


@dg.asset(
    name="reliability_report",
    group_name="report",
    code_version=REPORT_CODE,
    check_specs=[
        dg.AssetCheckSpec(
            CHECK,
            asset="reliability_report",
            blocking=False,
            description="WARN when (warm start + GRPO) pass@1 is worse than the warm start's beyond noise",
        )
    ],
)
def three_arm_report(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    base_evaluation_results: pl.DataFrame,
    rft_evaluation_results: pl.DataFrame,
    evaluation_results: pl.DataFrame,
):
    """Base, warm start, warm start + GRPO on the held-out tasks; GRPO's effect is (warm start + GRPO)
    - warm start, the warm start's is warm start - base (``rewardbox.report.three_arms``). Writes
    ``reliability_report.md`` and ``verdict.json``; the check reads GRPO's change against the warm start.
    """
    profile = rewardbox.load()
    arms = ThreeArms(
        warm=reliability_of(profile, base_evaluation_results, rft_evaluation_results),
        grpo=reliability_of(profile, rft_evaluation_results, evaluation_results),
    )
    out = rewardbox.path("report", "reliability_report.md")
    metadata = write_three_arm_report(out, arms, profile.name)
    version = files_version(out.parent)  # record_versions' two steps: a check beside the output
    context.set_data_version(context.asset_key, dg.DataVersion(version))
    config_hash = profile.section_hash("report", "evaluation", "rft")
    yield dg.Output(
        str(out), metadata=metadata | {"config_hash": config_hash, "content_hash": version}
    )
    yield tuned_not_worse_than_base(arms.grpo)


def write_three_arm_report(out, arms: ThreeArms, profile_name: str) -> dict:
    """Write the three-arm ``reliability_report.md`` at ``out`` and ``verdict.json`` beside it (what
    ``make demo`` prints last); returns the asset's metadata."""
    title = f"Reliability report, three arms ({profile_name} profile)"
    png = arms_png(arm_summaries(arms))
    (out.parent / "reliability.png").write_bytes(png)
    images = {"pass@k and pass^k vs k: base, warm start, warm start + GRPO": "reliability.png"}
    out.write_text(render_three_arm_markdown(arms, title, images))
    write_json(out.parent / "verdict.json", three_arm_verdict(arms))
    return {
        "location": dg.MetadataValue.path(str(out)),
        "plot_full": md_image(png, "pass@k and pass^k: base, warm start, warm start + GRPO"),
        "plot_png": dg.MetadataValue.path(str(out.parent / "reliability.png")),
    } | three_arm_metadata(arms)


def three_arm_metadata(arms: ThreeArms) -> dict:
    """The three-arm table and each effect's pass@1 verdict, for the report asset's metadata."""
    verdict = three_arm_verdict(arms)
    return {
        "three_arms": md_table(three_arm_rows(arms)),
        "grpo_pass_at_1_verdict": verdict["pass_at_1_verdict"],
        "warm_start_pass_at_1_verdict": verdict["warm_start_verdict"],
        "lines": dg.MetadataValue.md("\n".join(f"- {line}" for line in verdict["lines"])),
    }
