"""The watched verl run's parts (:func:`rewardbox.training.verl.job.run_verl_training`): the log-line
handler that parses verl's step lines, submission or re-attachment, and the error for a job that
did not succeed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rewardbox.training.verl.backend_config import VerlBackendConfig
from rewardbox.training.verl.progress import StepProgress, parse_progress_line
from rewardbox.training.verl.ray_client import JobClient, submit_job
from rewardbox.training.verl.ray_job import (
    LOST_CONTACT,
    START_TIMED_OUT,
    JobContactLostError,
    JobFailedError,
    JobOutcome,
    JobStartTimeoutError,
)


class StepLog:
    """The ``on_line`` of a watched verl job: passes each line to ``log``, counts them, and after each
    verl step line logs its one-line summary (reward mean, zero-variance share, throughput, step time)."""

    def __init__(self, log: Callable[[str], None]):
        self.log, self.count = log, 0
        self.steps: list[StepProgress] = []

    def __call__(self, line: str) -> None:
        self.count += 1
        self.log(line)
        progress = parse_progress_line(line)
        if progress is not None:
            self.steps.append(progress)
            self.log(progress.summary())


def submit_or_attach(
    client: JobClient,
    entrypoint: str,
    submission_id: str,
    rows: int,
    cfg: VerlBackendConfig,
    log: Callable[[str], None],
    runtime_env: dict[str, Any] | None,
) -> str:
    """The job id of the run: ``cfg.attach_job_id`` (nothing submitted), else a new Ray job's.

    ``runtime_env`` is merged over ``cfg.runtime_env``; its ``RAY_JOB_STOP_WAIT_TIME_S``
    defaults to ``cfg.stop_timeout_s`` (the SIGTERM grace).
    """
    if cfg.attach_job_id:
        log(
            f"re-attaching to Ray job {cfg.attach_job_id} (verl.attach_job_id): nothing is submitted"
        )
        return cfg.attach_job_id
    env = {**cfg.runtime_env, **(runtime_env or {})}
    env["env_vars"] = {
        "RAY_JOB_STOP_WAIT_TIME_S": str(max(1, int(cfg.stop_timeout_s))),
        **env.get("env_vars", {}),
    }
    job_id = submit_job(
        client,
        entrypoint,
        submission_id=submission_id,
        runtime_env=env,
        metadata={"rewardbox": "grpo", "rows": str(rows)},
        ready_timeout_s=cfg.connect_timeout_s,
    )
    log(f"submitted verl GRPO as Ray job {job_id}")
    return job_id


def outcome_error(outcome: JobOutcome) -> JobFailedError:
    """The error for a job that did not succeed, by how it ended."""
    if outcome.status == START_TIMED_OUT:
        return JobStartTimeoutError(
            f"Ray job {outcome.job_id} never started: {outcome.message}", outcome
        )
    if outcome.status == LOST_CONTACT:
        return JobContactLostError(
            f"lost contact with Ray job {outcome.job_id}: {outcome.message}. Its fate is "
            f"unknown; to follow it again set verl.attach_job_id: {outcome.job_id}\n"
            f"--- last lines of the job's log ---\n{outcome.log_tail}",
            outcome,
        )
    return JobFailedError(outcome.failure_text(), outcome)
