"""GRPO training and the merged checkpoint, with the gate that the merge loads and runs.

The stage lives in ``rewardbox.runtime.train`` (local and verl backends, merge, the gate's two
halves); these assets load the profile, call it, write metadata and turn its errors into
``dg.Failure``.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import dagster as dg
import polars as pl

from assets.metadata import md_table, training_curve_metadata
from assets.versions import EPISODE_ENGINE, code_version, files_version, record_versions
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from rewardbox.runtime import train
from rewardbox.tasks.schema import Task, task_set_version
from rewardbox.training.verl.ray_job import JobFailedError

GROUP = "training"
TRAIN_CODE = code_version(
    __name__, "rewardbox.training", "rewardbox.runtime.train", *EPISODE_ENGINE
)
MERGE_CODE = code_version(
    __name__,
    "rewardbox.runtime.train",
    "rewardbox.training.checkpoint",
    "rewardbox.training.verl.job",
    "rewardbox.training.verl.merge_run",
    "rewardbox.training.verl.merge",
)


@dg.asset(group_name=GROUP, code_version=TRAIN_CODE)
def grpo_checkpoint(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    training_pool: list[Task],
    base_checkpoint: str,
    probe_results: pl.DataFrame,
) -> str:
    """GRPO on the training pool (never on benchmark tasks): a LoRA adapter trained locally
    (``grpo.backend: local``; its task sampler starts from the probe's counts and its trials
    after the probe's, ``rewardbox.training.probe_history``), or verl's latest ``global_step_N/actor`` checkpoint from a Ray job
    (``grpo.backend: verl``; with ``verl.dry_run``, the launch and verl's resolved config only).

    Raises:
        dg.Failure: benchmark tasks in the pool; the Ray job failed, never started or went out of
            contact (its id and status in the metadata, its log tail in the message); verl's schema
            rejected the dry run's config (``rewardbox.runtime.train``).
    """
    return train_grpo(
        context, rewardbox, ray_cluster, training_pool, base_checkpoint, probe_results
    )


def train_grpo(
    context, rewardbox, ray_cluster, pool, base_checkpoint, probe_results, init_adapter=None
) -> str:
    """``grpo_checkpoint``'s body (also the warm-started one's, ``assets/warm_start.py``, which passes
    the warm start's adapter as ``init_adapter``): train, write metadata, record versions."""
    profile = rewardbox.load()
    verl = (
        profile.grpo.backend == "verl"
    )  # a warm start needs the local backend (the profile checks)
    backend = _train_verl if verl else partial(_train_local, init_adapter=init_adapter)
    with _training_failures():
        path, metadata, version = backend(
            context, rewardbox, ray_cluster, profile, pool, base_checkpoint, probe_results
        )
    section = ("grpo", "verl") if verl else ("grpo",) if init_adapter is None else ("grpo", "rft")
    warm = {} if init_adapter is None else {"init_adapter": dg.MetadataValue.path(init_adapter)}
    context.add_output_metadata(
        metadata
        | warm
        | {
            "pool_tasks": len(pool),
            "input_hash": task_set_version(pool),
            "config_hash": profile.section_hash(*section),
        }
    )
    record_versions(context, version)
    return path


@contextmanager
def _training_failures() -> Iterator[None]:
    """The training stage's engine errors as ``dg.Failure`` (a Ray job's id and status as metadata)."""
    try:
        yield
    except JobFailedError as exc:
        raise dg.Failure(
            description=str(exc),
            metadata={"job_id": exc.outcome.job_id, "status": exc.outcome.status},
        ) from exc
    except (train.LeakedTasksError, train.VerlConfigRejectedError) as exc:
        raise dg.Failure(description=str(exc)) from exc


def _train_local(
    context,
    rewardbox,
    ray_cluster,
    profile,
    pool,
    base_checkpoint,
    probe_results,
    init_adapter=None,
):
    """(path, metadata, data version) of ``runtime.train.train_local`` (from ``init_adapter`` when given)."""
    adapter, summary = train.train_local(
        profile,
        pool,
        base_checkpoint,
        rewardbox.path("checkpoints", "grpo_adapter"),
        probe_rows=probe_results,
        log=context.log.info,
        policy_api_key=rewardbox.policy_api_key,
        init_adapter=init_adapter,
    )
    if not pool:
        context.log.warning(
            "training pool is empty: no GRPO step was taken; the tuned model equals the base"
        )
    steps = [m.as_dict() for m in summary.steps]
    metadata = {
        "location": dg.MetadataValue.path(str(adapter)),
        "steps": len(steps),
        "trained": bool(steps),
        **summary.usage,  # wall_s, peak_rss_mib: printed by pipelines.where
    }
    if steps:
        metadata |= {
            "step_metrics": md_table(pl.DataFrame(steps)),
            **training_curve_metadata(steps),
        }
    return str(adapter), metadata, files_version(adapter)


def _train_verl(context, rewardbox, ray_cluster, profile, pool, base_checkpoint, probe_results):
    """(path, metadata, data version) of ``runtime.train.train_verl``; the job id is recorded as an
    ``AssetObservation`` as soon as the job is submitted, so a run that fails later still names it."""

    def submitted(job_id: str, checkpoint_dir) -> None:
        context.log_event(
            dg.AssetObservation(
                asset_key=context.asset_key,
                metadata={
                    "job_id": job_id,
                    "status": "SUBMITTED",
                    "attached": bool(profile.verl.attach_job_id),
                    "checkpoint_dir": dg.MetadataValue.path(str(checkpoint_dir)),
                },
            )
        )

    out = train.train_verl(
        profile,
        pool,
        base_checkpoint,
        job_client=partial(ray_cluster.job_client, profile, context),
        local_head=ray_cluster.job_address is None,
        log=context.log.info,
        on_submit=submitted,
    )
    launch = out.launch
    metadata = {
        "backend": "verl",
        "rows": launch.rows,
        "train_files": dg.MetadataValue.path(str(launch.train_path)),
        "command": dg.MetadataValue.md(f"```sh\n{launch.entrypoint}\n```"),
        "location": dg.MetadataValue.path(str(out.path)),
    }
    if out.dry is not None:
        if out.unvalidated:
            context.log.warning(out.unvalidated)
        return str(out.path), metadata | _dry_run_metadata(out.dry), files_version(out.path)
    return str(out.path), metadata | _run_metadata(out.run), out.job_version


def _dry_run_metadata(dry) -> dict:
    metadata = {
        "dry_run": True,
        "trained": False,
        "validated": dry.validated,
        "problem": dry.problem,
        "skipped_checks": dg.MetadataValue.json(dry.skipped_checks),
        "overrides": dg.MetadataValue.md(f"```yaml\n{dry.overrides_path.read_text()}```"),
    }
    if dry.resolved_path is not None:
        metadata["resolved_config"] = dg.MetadataValue.path(str(dry.resolved_path))
    return metadata


def _run_metadata(run) -> dict:
    rows = [{"step": s.step, **s.headline()} for s in run.steps]
    metadata = {
        "job_id": run.job_id,
        "global_step": run.checkpoint.step,
        "steps": len(run.steps),
        "trained": True,
        "elapsed_s": round(run.elapsed_s, 1),
        "log_lines": run.log_lines,
    }
    if rows:
        last = {k: v for k, v in rows[-1].items() if v is not None and k != "step"}
        metadata |= {
            "step_metrics": md_table(pl.DataFrame(rows)),
            **{f"last_{k}": float(v) for k, v in last.items()},
            **training_curve_metadata(
                [
                    {
                        "step": r["step"],
                        "mean_reward": r["mean_reward"],
                        "zero_variance_frac": r["zero_variance_frac"],
                    }
                    for r in rows
                ]
            ),
        }
    return metadata


@dg.asset(group_name=GROUP, code_version=MERGE_CODE)
def merged_checkpoint(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    base_checkpoint: str,
    grpo_checkpoint: str,
) -> str:
    """The adapter merged into the base weights: an HF safetensors directory transformers loads.

    Raises:
        dg.Failure: verl only: a dry run (nothing trained), the merger failed, or verl's LoRA
            adapter does not load into the base (``rewardbox.runtime.train.merge``).
    """
    profile = rewardbox.load()
    try:
        merged = train.merge(
            profile,
            base_checkpoint,
            grpo_checkpoint,
            rewardbox.path("checkpoints", "merged"),
            log=context.log.info,
        )
    except train.MergeError as exc:
        raise dg.Failure(description=str(exc)) from exc
    context.add_output_metadata(
        {
            "location": dg.MetadataValue.path(str(merged)),
            "files": dg.MetadataValue.json(sorted(p.name for p in merged.iterdir())),
        }
    )
    record_versions(context, files_version(merged), profile.section_hash("grpo"))
    return str(merged)


@dg.asset_check(
    asset=merged_checkpoint, additional_ins={"benchmark_tasks": dg.AssetIn()}, blocking=True
)
def merged_checkpoint_runs(
    rewardbox: RewardboxResource, merged_checkpoint: str, benchmark_tasks: list[Task]
) -> dg.AssetCheckResult:
    """Blocking: the merged checkpoint loads with transformers and runs one full episode.

    A checkpoint that does not load fails the check with transformers' error in its metadata.
    A verl merge must also reproduce the trained weights within ``verl.merge_rtol`` /
    ``merge_atol`` (``rewardbox.runtime.train.merge_fidelity``), else the check fails before loading.
    """
    profile = rewardbox.load()
    fidelity = fidelity_metadata(train.merge_fidelity(profile, merged_checkpoint))
    if not fidelity[0]:
        return dg.AssetCheckResult(passed=False, metadata=fidelity[1])
    run = train.run_merged(profile, merged_checkpoint, benchmark_tasks)
    if run.load_error is not None:
        return dg.AssetCheckResult(passed=False, metadata={"load_error": run.load_error})
    return dg.AssetCheckResult(
        passed=run.passed,
        metadata={
            "parameters": run.parameters,
            "episode": md_table(run.rows),
            "system_error": run.system_error,
            **fidelity[1],
        },
    )


def fidelity_metadata(fidelity: train.MergeFidelity) -> tuple[bool, dict]:
    """(passed, metadata) of a verl merge's fidelity for the blocking gate: none for the local backend."""
    if not fidelity.checked:
        return True, {}
    if fidelity.report is None:
        return False, {
            "merge_fidelity": "missing: merge_fidelity.json was not written by the verl merger"
        }
    return fidelity.passed, {
        "merge_fidelity": dg.MetadataValue.json(fidelity.report),
        "merge_rtol": fidelity.rtol,
        "merge_atol": fidelity.atol,
    }
