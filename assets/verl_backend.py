"""The ``grpo.backend: verl`` branch of the training assets: dry run, Ray job, merge (no assets here)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import dagster as dg
import polars as pl

from assets.metadata import md_table, training_curve_metadata
from assets.versions import files_version
from resources.ray_cluster import RayClusterResource
from rewardbox.config.profile import Profile
from rewardbox.tasks.schema import Task
from rewardbox.training.verl.ray_job import JobFailedError
from rewardbox.training.verl.config import dry_run
from rewardbox.training.verl.job import merge_verl_checkpoint, prepare_launch, run_verl_training, verl_python
from rewardbox.training.verl.merge_run import read_fidelity


def verl_grpo(context: dg.AssetExecutionContext, ray_cluster: RayClusterResource, profile: Profile,
              training_pool: list[Task], base_checkpoint: str, data_dir: Path) -> tuple[str, dict, str]:
    """Train on verl (or only write its launch, with ``verl.dry_run``): (output path, metadata, data version).

    The data version of a trained checkpoint is its Ray job and global step (hashing a sharded
    FSDP checkpoint of a large model would read every byte); a dry run's is its files' hash.

    The job id is recorded as an ``AssetObservation`` (``job_id``, ``status: SUBMITTED``) as soon
    as the job is submitted, so a run that fails or loses contact later still names its job.

    Raises:
        dg.Failure: the Ray job failed, never started (``START_TIMED_OUT``) or went out of contact
            (``LOST_CONTACT``, job left running): the message names the job and holds its log
            tail; or the dry run's config was rejected by verl's schema.
    """
    cfg = profile.verl
    launch = prepare_launch(profile.grpo, cfg, training_pool, base_checkpoint, data_dir,
                            local_head=ray_cluster.job_address is None)
    metadata: dict = {"backend": "verl", "rows": launch.rows, "train_files": dg.MetadataValue.path(str(launch.train_path)),
                      "command": dg.MetadataValue.md(f"```sh\n{launch.entrypoint}\n```")}
    if cfg.dry_run:
        return _dry_run(context, profile, launch, data_dir / "verl" / "dry_run", metadata)
    client = ray_cluster.job_client(profile, context)

    def submitted(job_id: str) -> None:  # in the asset's record at once, also when the job then fails
        context.log_event(dg.AssetObservation(asset_key=context.asset_key, metadata={
            "job_id": job_id, "status": "SUBMITTED", "attached": bool(cfg.attach_job_id),
            "checkpoint_dir": dg.MetadataValue.path(str(launch.checkpoint_dir))}))

    try:
        result = run_verl_training(client, launch, cfg, context.log.info, on_submit=submitted)
    except JobFailedError as exc:
        raise dg.Failure(description=str(exc), metadata={"job_id": exc.outcome.job_id,
                                                         "status": exc.outcome.status}) from exc
    rows = [{"step": s.step, **s.headline()} for s in result.steps]
    metadata |= {"job_id": result.job_id, "global_step": result.checkpoint.step, "steps": len(result.steps),
                 "trained": True, "elapsed_s": round(result.elapsed_s, 1), "log_lines": result.log_lines,
                 "path": dg.MetadataValue.path(str(result.checkpoint.actor_dir))}
    if rows:
        last = {k: v for k, v in rows[-1].items() if v is not None and k != "step"}
        metadata |= {"step_metrics": md_table(pl.DataFrame(rows)), **{f"last_{k}": float(v) for k, v in last.items()},
                     **training_curve_metadata([{"step": r["step"], "mean_reward": r["mean_reward"],
                                                 "zero_variance_frac": r["zero_variance_frac"]} for r in rows])}
    version = hashlib.sha256(f"{result.job_id}:{result.checkpoint.step}".encode()).hexdigest()[:16]
    return str(result.checkpoint.actor_dir), metadata, version


def _dry_run(context, profile: Profile, launch, out_dir: Path, metadata: dict) -> tuple[str, dict, str]:
    python = verl_python(profile.verl)
    validator = python if Path(python).exists() else None
    result = dry_run(profile.grpo, launch.config, out_dir, validator, launch.run_overrides, launch.command[0])
    if validator is not None and not result.validated:
        raise dg.Failure(description=f"verl rejected the launch config: {result.problem}")
    if validator is None:
        context.log.warning(f"verl dry run not validated: verl's Python {python} is missing (make verl-env)")
    metadata |= {"dry_run": True, "trained": False, "validated": result.validated,
                 "problem": result.problem, "skipped_checks": dg.MetadataValue.json(result.skipped_checks),
                 "overrides": dg.MetadataValue.md(f"```yaml\n{result.overrides_path.read_text()}```"),
                 "path": dg.MetadataValue.path(str(out_dir))}
    if result.resolved_path is not None:
        metadata["resolved_config"] = dg.MetadataValue.path(str(result.resolved_path))
    return str(out_dir), metadata, files_version(out_dir)


def verl_merge(profile: Profile, base_checkpoint: str, actor_dir: str, out_dir: Path,
               log: Callable[[str], None] | None = None) -> Path:
    """verl's ``actor`` checkpoint merged by verl's model merger into ``out_dir``.

    ``log`` (the step's ``context.log.info``) gets one line per fix made to verl's LoRA adapter.

    Raises:
        dg.Failure: the profile is a dry run (nothing was trained), the merger failed, or verl's
            LoRA adapter does not load into the base.
    """
    if profile.verl.dry_run:
        raise dg.Failure(description="verl.dry_run is true: grpo_checkpoint wrote a launch, not a checkpoint; "
                                     "set verl.dry_run: false to train and merge")
    grpo = profile.grpo
    try:
        return merge_verl_checkpoint(actor_dir, base_checkpoint, out_dir, verl_python(profile.verl),
                                     profile.verl.merge_timeout_s,
                                     lora_alpha=grpo.lora_alpha if grpo.finetune == "lora" else None, log=log,
                                     dtype=profile.verl.merge_dtype, tolerance=profile.verl.merge_tolerance())
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        raise dg.Failure(description=str(exc)) from exc


def merge_fidelity(profile: Profile, merged_dir: str) -> tuple[bool, dict]:
    """(passed, metadata) of a verl merge against the trained weights, for the blocking gate.

    The merger's ``merge_fidelity.json`` (``rewardbox.training.verl.merge``) must exist for a
    ``grpo.backend: verl`` checkpoint, and say every saved weight is within the profile's
    tolerance (``verl.merge_rtol`` / ``merge_atol``, ``VerlBackendConfig.merge_tolerance``) of the
    trained one. The local backend has no such report: (True, {}).
    """
    if profile.grpo.backend != "verl":
        return True, {}
    report = read_fidelity(merged_dir)
    if report is None:
        return False, {"merge_fidelity": "missing: merge_fidelity.json was not written by the verl merger"}
    rtol, atol = profile.verl.merge_tolerance()
    as_configured = report.get("lora") or (report.get("rtol"), report.get("atol")) == (rtol, atol)
    passed = bool(report.get("within")) and bool(as_configured)
    return passed, {"merge_fidelity": dg.MetadataValue.json(report), "merge_rtol": rtol, "merge_atol": atol}
