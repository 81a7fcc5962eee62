"""GRPO training and the merged checkpoint, with the gate that the merge loads and runs."""


import shutil

import dagster as dg
import polars as pl

from assets.metadata import md_table, tasks_hash, training_curve_metadata
from assets.verl_backend import merge_fidelity, verl_grpo, verl_merge
from assets.versions import EPISODE_ENGINE, code_version, files_version, record_versions
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from rewardbox.episode.executor import LocalExecutor
from rewardbox.runtime.compose import campaign_parts, check_policy_budget, episode_runner, policy_config_endpoint, preflight_step
from rewardbox.episode.run import run_trials
from rewardbox.policy import PolicyConfig, build_policy
from rewardbox.tasks.exclusion import check_disjoint
from rewardbox.tasks.schema import Task
from rewardbox.training.checkpoint import merge_checkpoint
from rewardbox.training.local import train_local_grpo
from rewardbox.training.probe_history import ProbeHistory

GROUP = "training"
TRAIN_CODE = code_version(__name__, "rewardbox.training", *EPISODE_ENGINE)
MERGE_CODE = code_version(__name__, "rewardbox.training.checkpoint", "rewardbox.training.verl.job",
                          "rewardbox.training.verl.merge_run", "rewardbox.training.verl.merge")


@dg.asset(group_name=GROUP, code_version=TRAIN_CODE)
def grpo_checkpoint(context: dg.AssetExecutionContext, rewardbox: RewardboxResource, ray_cluster: RayClusterResource,
                    training_pool: list[Task], base_checkpoint: str, probe_results: pl.DataFrame) -> str:
    """GRPO on the training pool (never on benchmark tasks): a LoRA adapter trained locally
    (``grpo.backend: local``; its task sampler starts from the probe's counts and its trials
    after the probe's, ``rewardbox.training.probe_history``), or verl's latest ``global_step_N/actor`` checkpoint from a Ray job
    (``grpo.backend: verl``; with ``verl.dry_run``, the launch and verl's resolved config only)."""
    profile = rewardbox.load()
    leaked = check_disjoint(training_pool)
    if leaked:
        raise dg.Failure(f"benchmark tasks in the training pool: {leaked[:5]}")
    if profile.grpo.backend == "verl":
        path, metadata, version = verl_grpo(context, ray_cluster, profile, training_pool, base_checkpoint,
                                            profile.data_path / profile.name)
        context.add_output_metadata(metadata | {"pool_tasks": len(training_pool), "input_hash": tasks_hash(training_pool),
                                                "config_hash": profile.section_hash("grpo", "verl")})
        record_versions(context, version)
        return path
    if training_pool:  # the rollouts' endpoints answer and serve their models, before anything is written
        preflight_step(profile, extra=policy_config_endpoint(profile.policy, api_key=rewardbox.policy_api_key))
    out = rewardbox.path("checkpoints", "grpo_adapter")
    shutil.rmtree(out, ignore_errors=True)
    adapter, summary = train_local_grpo(training_pool, base_checkpoint, out, profile, episode_runner=episode_runner,
                                        check_policy_budget=check_policy_budget, log=context.log.info,
                                        probe=ProbeHistory.from_rows(probe_results))
    steps = pl.DataFrame([m.as_dict() for m in summary.steps]) if summary.steps else pl.DataFrame()
    if not training_pool:
        context.log.warning("training pool is empty: no GRPO step was taken; the tuned model equals the base")
    metadata = {"path": dg.MetadataValue.path(str(adapter)), "steps": len(summary.steps),
                "trained": bool(summary.steps),
                "pool_tasks": len(training_pool), "config_hash": profile.section_hash("grpo"),
                "input_hash": tasks_hash(training_pool)}
    if summary.steps:
        metadata |= {"step_metrics": md_table(steps),
                     **training_curve_metadata([m.as_dict() for m in summary.steps])}
    context.add_output_metadata(metadata)
    record_versions(context, files_version(adapter))
    return str(adapter)


@dg.asset(group_name=GROUP, code_version=MERGE_CODE)
def merged_checkpoint(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                      base_checkpoint: str, grpo_checkpoint: str) -> str:
    """The adapter merged into the base weights: an HF safetensors directory transformers loads."""
    out = rewardbox.path("checkpoints", "merged")
    shutil.rmtree(out, ignore_errors=True)
    profile = rewardbox.load()
    if profile.grpo.backend == "verl":
        merged = verl_merge(profile, base_checkpoint, grpo_checkpoint, out, log=context.log.info)
    else:
        merged = merge_checkpoint(base_checkpoint, grpo_checkpoint, out)
    context.add_output_metadata({"path": dg.MetadataValue.path(str(merged)),
                                 "files": dg.MetadataValue.json(sorted(p.name for p in merged.iterdir()))})
    record_versions(context, files_version(merged), rewardbox.load().section_hash("grpo"))
    return str(merged)


@dg.asset_check(asset=merged_checkpoint, additional_ins={"benchmark_tasks": dg.AssetIn()}, blocking=True)
def merged_checkpoint_runs(rewardbox: RewardboxResource, merged_checkpoint: str,
                           benchmark_tasks: list[Task]) -> dg.AssetCheckResult:
    """Blocking: the merged checkpoint loads with transformers and runs one full episode.

    A checkpoint that does not load fails the check with transformers' error in its metadata.
    A verl merge must also reproduce the trained weights within ``verl.merge_rtol`` /
    ``merge_atol`` (``verl_backend.merge_fidelity``), else the check fails before loading.
    """
    profile = rewardbox.load()
    faithful, fidelity = merge_fidelity(profile, merged_checkpoint)
    if not faithful:
        return dg.AssetCheckResult(passed=False, metadata=fidelity)
    local = profile.policy if profile.policy.kind == "local" else PolicyConfig(kind="local")
    try:
        policy = build_policy(local, checkpoint_dir=merged_checkpoint)  # loads with transformers
    except (OSError, ValueError) as exc:
        return dg.AssetCheckResult(passed=False, metadata={"load_error": f"{type(exc).__name__}: {exc}"})
    n_params = sum(p.numel() for p in policy.model.parameters())
    # the local model runs in this process whatever executor.kind says (it is not shipped to Ray workers)
    rows, results = run_trials(benchmark_tasks[:1], 1, policy, campaign_parts(profile), executor=LocalExecutor(1))
    ok = bool(results) and results[0].system_error is None and results[0].turns > 0
    return dg.AssetCheckResult(passed=ok, metadata={
        "parameters": n_params, "episode": md_table(rows), "system_error": str(results[0].system_error) if results else "none",
        **fidelity,
    })
