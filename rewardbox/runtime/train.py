"""The training stage: GRPO (``grpo.backend: local`` or ``verl``) and the merge, wired from a profile.

One function per step: :func:`train_local` and :func:`train_verl` train, :func:`merge` merges,
:func:`merge_fidelity` and :func:`run_merged` are the blocking gate's two halves. They return
engine values and raise engine errors; the Dagster layer (``assets/training.py``) writes the
metadata and turns the errors into ``dg.Failure``.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from rewardbox.config.profile import Profile
from rewardbox.episode.executor import LocalExecutor
from rewardbox.episode.progress import ProgressSink
from rewardbox.episode.run import run_trials
from rewardbox.policy import PolicyConfig, build_policy
from rewardbox.process_memory import stage_usage
from rewardbox.runtime.compose import (
    campaign_parts,
    check_policy_budget,
    episode_runner,
    policy_config_endpoint,
    preflight_step,
)
from rewardbox.tasks.exclusion import check_disjoint
from rewardbox.tasks.schema import Task
from rewardbox.training.checkpoint import merge_checkpoint
from rewardbox.training.local import RolloutParts, train_local_grpo
from rewardbox.training.probe_history import ProbeHistory
from rewardbox.training.trainer import TrainingSummary
from rewardbox.training.verl.config import DryRun, dry_run
from rewardbox.training.verl.job import (
    VerlLaunch,
    VerlRunResult,
    merge_verl_checkpoint,
    prepare_launch,
    run_verl_training,
    verl_python,
)
from rewardbox.training.verl.merge_run import read_fidelity
from rewardbox.training.verl.ray_job import JobClient


class LeakedTasksError(ValueError):
    """Benchmark tasks reached the training pool (``tasks.exclusion.check_disjoint``): a pipeline fault."""

    def __init__(self, leaked: list[str]) -> None:
        self.leaked = leaked
        super().__init__(f"benchmark tasks in the training pool: {leaked[:5]}")


class VerlConfigRejectedError(ValueError):
    """verl's own schema rejected the dry run's launch config (the message holds verl's problem)."""


class MergeError(RuntimeError):
    """The verl merge cannot run or failed: a dry run (nothing trained), verl's merger failed, or
    verl's LoRA adapter does not load into the base (the message says which)."""


def _check_pool(pool: Sequence[Task]) -> None:
    leaked = check_disjoint(pool)
    if leaked:
        raise LeakedTasksError(leaked)


def rollout_profile(profile: Profile) -> Profile:
    """The profile GRPO rollouts run with: episodes sample at ``grpo.temperature``, the temperature
    the trainer scores at (``episode.temperature`` is for probes, screening and evaluation)."""
    episode = profile.episode.model_copy(update={"temperature": profile.grpo.temperature})
    return profile.model_copy(update={"episode": episode})


def rollout_parts(profile: Profile) -> RolloutParts:
    """Local GRPO's rollout parts (``training.local.RolloutParts``) from ``profile``'s ``policy``,
    ``episode`` (at ``grpo.temperature``), ``selection.boundaries`` and ``probe.trials``."""
    rollouts = rollout_profile(profile)
    return RolloutParts(
        policy=profile.policy,
        episode=rollouts.episode,
        runner_factory=partial(episode_runner, rollouts),
        check_budget=lambda policy, tasks: check_policy_budget(policy, rollouts, tasks),
        boundaries=tuple(profile.selection.boundaries),
        first_trial=profile.probe.trials,
    )


def train_local(
    profile: Profile,
    pool: Sequence[Task],
    base_checkpoint: str | Path,
    out_dir: Path,
    *,
    probe_rows: Any = None,
    log: ProgressSink | None = None,
    policy_api_key: str | None = None,
    init_adapter: str | Path | None = None,
) -> tuple[Path, TrainingSummary]:
    """``grpo.backend: local``: a LoRA adapter trained on ``pool`` into ``out_dir`` (emptied first).

    Before anything is written the rollouts' endpoints must answer and serve their models
    (``compose.preflight_step``; the endpoint policy's key: ``policy_api_key``, else its env var).
    ``probe_rows`` (the probe's trial rows: ``uid``, ``trial``, ``passed``, ``system_error``) start
    the task sampler from the probe's ``(c, n)`` and every task's trials after the probe's
    (``training.probe_history.ProbeHistory``); None: no probe. ``init_adapter``: the warm start's
    LoRA adapter to continue (``rft.enabled``, docs/warm_start.md); None: a fresh adapter.

    Returns:
        (adapter directory, per-step metrics): ``training.local.train_local_grpo``; the summary's
        ``usage`` holds the stage's wall time and peak resident memory (``process_memory.stage_usage``).

    Raises:
        LeakedTasksError: a benchmark task is in ``pool``.
        EndpointPreflightError: an endpoint does not answer (a config fault of the step).
        TokenBudgetError, TurnBudgetError: the budgets cannot hold a golden call (a config error).
    """
    started = time.perf_counter()
    _check_pool(pool)
    if pool:
        preflight_step(
            profile, extra=policy_config_endpoint(profile.policy, api_key=policy_api_key)
        )
    shutil.rmtree(out_dir, ignore_errors=True)
    adapter, summary = train_local_grpo(
        pool,
        Path(base_checkpoint),
        out_dir,
        profile.grpo,
        rollout_parts(profile),
        log=log,
        probe=None if probe_rows is None else ProbeHistory.from_rows(probe_rows),
        init_adapter=None if init_adapter is None else Path(init_adapter),
    )
    summary.usage = stage_usage(started)
    return adapter, summary


@dataclass
class VerlTraining:
    """What ``grpo.backend: verl`` did: a dry run's launch, or a trained Ray job's checkpoint.

    Attributes:
        launch: the launch (rows, Parquet file, entrypoint, checkpoint directory).
        path: the asset's output: ``global_step_N/actor``, or the dry run's directory.
        run: the finished Ray job (None for a dry run); dry: the dry run (None when trained).
        python: verl's Python the dry run validated with (or looked for).
    """

    launch: VerlLaunch
    path: Path
    run: VerlRunResult | None = None
    dry: DryRun | None = None
    python: str = ""

    @property
    def unvalidated(self) -> str | None:
        """Why a dry run was not validated by verl's schema (its Python is missing), else None."""
        if self.dry is None or Path(self.python).exists():
            return None
        return f"verl dry run not validated: verl's Python {self.python} is missing (make verl-env)"

    @property
    def job_version(self) -> str | None:
        """A trained checkpoint's data version: its Ray job and global step (hashing a sharded FSDP
        checkpoint would read every byte); None for a dry run (the caller hashes its files)."""
        if self.run is None:
            return None
        return hashlib.sha256(f"{self.run.job_id}:{self.run.checkpoint.step}".encode()).hexdigest()[
            :16
        ]


def train_verl(
    profile: Profile,
    pool: Sequence[Task],
    base_checkpoint: str,
    *,
    job_client: Callable[[], JobClient],
    local_head: bool,
    log: Callable[[str], None],
    on_submit: Callable[[str, Path], None] | None = None,
) -> VerlTraining:
    """``grpo.backend: verl``: train on verl as a Ray job, or with ``verl.dry_run`` only write its launch.

    Args:
        job_client: called once, only when a job is submitted (not for a dry run).
        local_head: the job runs on a local head (``RayClusterResource.job_address`` is None).
        log: one call per job log line.
        on_submit: ``(job id, checkpoint directory)``, as soon as the job is submitted (or re-attached).

    Raises:
        LeakedTasksError: a benchmark task is in ``pool``.
        VerlConfigRejectedError: the dry run's config was rejected by verl's schema.
        JobFailedError: the Ray job failed, never started (``JobStartTimeoutError``) or went out of
            contact (``JobContactLostError``, job left running): the message names the job and
            holds its log tail (``training.verl.job.run_verl_training``).
    """
    _check_pool(pool)
    launch = prepare_launch(
        profile.grpo,
        profile.verl,
        pool,
        base_checkpoint,
        profile.artifacts_path,
        local_head=local_head,
    )
    if profile.verl.dry_run:
        return _dry_run(profile, launch, profile.artifacts_path / "verl" / "dry_run")
    submitted = (
        None if on_submit is None else (lambda job_id: on_submit(job_id, launch.checkpoint_dir))
    )
    run = run_verl_training(job_client(), launch, profile.verl, log, on_submit=submitted)
    return VerlTraining(launch, run.checkpoint.actor_dir, run=run)


def _dry_run(profile: Profile, launch: VerlLaunch, out_dir: Path) -> VerlTraining:
    python = verl_python(profile.verl)
    validator = python if Path(python).exists() else None
    result = dry_run(
        profile.grpo, launch.config, out_dir, validator, launch.run_overrides, launch.command[0]
    )
    if validator is not None and not result.validated:
        raise VerlConfigRejectedError(f"verl rejected the launch config: {result.problem}")
    return VerlTraining(launch, out_dir, dry=result, python=python)


def merge(
    profile: Profile,
    base_checkpoint: str,
    trained: str,
    out_dir: Path,
    log: Callable[[str], None] | None = None,
) -> Path:
    """The trained checkpoint merged into the base weights in ``out_dir`` (emptied first): an HF
    safetensors directory transformers loads.

    ``local``: the LoRA adapter merged with peft (``training.checkpoint.merge_checkpoint``).
    ``verl``: verl's ``actor`` checkpoint merged by verl's model merger (``log`` gets one line per
    fix made to verl's LoRA adapter).

    Raises:
        MergeError: verl only: the profile is a dry run (nothing was trained), the merger failed,
            or verl's LoRA adapter does not load into the base.
    """
    shutil.rmtree(out_dir, ignore_errors=True)
    if profile.grpo.backend != "verl":
        return merge_checkpoint(base_checkpoint, trained, out_dir)
    verl, grpo = profile.verl, profile.grpo
    if verl.dry_run:
        raise MergeError(
            "verl.dry_run is true: grpo_checkpoint wrote a launch, not a checkpoint; "
            "set verl.dry_run: false to train and merge"
        )
    try:
        return merge_verl_checkpoint(
            trained,
            base_checkpoint,
            out_dir,
            verl_python(verl),
            verl.merge_timeout_s,
            lora_alpha=grpo.lora_alpha if grpo.finetune == "lora" else None,
            log=log,
            dtype=verl.merge_dtype,
            tolerance=verl.merge_tolerance(),
        )
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        raise MergeError(str(exc)) from exc


@dataclass
class MergeFidelity:
    """A verl merge against the trained weights (the blocking gate's first half).

    Attributes:
        passed: the report exists, is ``within`` and was measured at the profile's tolerance
            (or is a LoRA run's); always True for the local backend (no report: ``checked`` False).
        report: ``merge_fidelity.json`` (``training.verl.merge``), None when missing.
        rtol, atol: the profile's tolerance (``VerlBackendConfig.merge_tolerance``).
    """

    passed: bool
    checked: bool
    report: dict[str, Any] | None = None
    rtol: float | None = None
    atol: float | None = None


def merge_fidelity(profile: Profile, merged_dir: str) -> MergeFidelity:
    """How faithful a ``grpo.backend: verl`` merge is: the merger's ``merge_fidelity.json`` must
    exist and say every saved weight is within ``verl.merge_rtol`` / ``merge_atol`` of the
    trained one, measured at that tolerance. The local backend has no such report."""
    if profile.grpo.backend != "verl":
        return MergeFidelity(passed=True, checked=False)
    report = read_fidelity(merged_dir)
    rtol, atol = profile.verl.merge_tolerance()
    if report is None:
        return MergeFidelity(passed=False, checked=True, rtol=rtol, atol=atol)
    as_configured = report.get("lora") or (report.get("rtol"), report.get("atol")) == (rtol, atol)
    return MergeFidelity(
        bool(report.get("within")) and bool(as_configured), True, report, rtol, atol
    )


@dataclass
class MergedRun:
    """One full episode of the merged checkpoint (the blocking gate's second half).

    Attributes:
        passed: it loaded and the episode ran at least one turn without a system error.
        load_error: transformers' error when it did not load (``"OSError: ..."``), else None.
        parameters: the loaded model's parameter count.
        rows: the episode's row (``episode.run.run_trials``); system_error: its system error or ``"none"``.
    """

    passed: bool
    load_error: str | None = None
    parameters: int = 0
    rows: Any = None
    system_error: str = "none"


def run_merged(profile: Profile, merged_dir: str, tasks: Sequence[Task]) -> MergedRun:
    """Load ``merged_dir`` with transformers as a local policy and run one episode of ``tasks[0]``.

    The local model runs in this process whatever ``executor.kind`` says (it is not shipped to Ray
    workers). A checkpoint that does not load is a failed gate, not an exception.
    """
    local = profile.policy if profile.policy.kind == "local" else PolicyConfig(kind="local")
    try:
        policy = build_policy(local, checkpoint_dir=merged_dir)  # loads with transformers
    except (OSError, ValueError) as exc:
        return MergedRun(passed=False, load_error=f"{type(exc).__name__}: {exc}")
    parameters = sum(p.numel() for p in policy.model.parameters())
    rows, results = run_trials(
        list(tasks)[:1], 1, policy, campaign_parts(profile), executor=LocalExecutor(1)
    )
    ok = bool(results) and results[0].system_error is None and results[0].turns > 0
    error = str(results[0].system_error) if results else "none"
    return MergedRun(passed=ok, parameters=parameters, rows=rows, system_error=error)
