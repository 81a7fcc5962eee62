"""Re-probe schedule: re-measure the training pool against the current policy on a cron.

The targeted job re-materialises ``probe_results -> task_difficulty -> training_pool`` (the lead's
``pipelines/jobs.py``), so task difficulty tracks the policy as it improves.

Cursor: none (a schedule is driven by its cron, not by observed state).

Run key: ``"reprobe@<scheduled time, UTC, to the minute>"`` (plus ``"@<partition>"`` when a
partition is targeted). The scheduled date is part of the key so each tick gets its own run,
and a daemon that retries a tick after a crash does not launch a second run for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from dagster import RunRequest, ScheduleDefinition, ScheduleEvaluationContext, schedule

TAG_SCHEDULED_AT = "rewardbox/scheduled_at"


def reprobe_run_key(scheduled_at: datetime, partition_key: str | None = None) -> str:
    """Returns the run key of the re-probe run scheduled at ``scheduled_at``.

    Args:
        scheduled_at: The tick's scheduled execution time; naive datetimes are taken as UTC.
        partition_key: The partition (e.g. the current policy's checkpoint) if the job is
            partitioned, else ``None``.

    Returns:
        ``"reprobe@YYYY-MM-DDTHH:MMZ"`` or ``"reprobe@YYYY-MM-DDTHH:MMZ@<partition_key>"``.
    """
    if scheduled_at.tzinfo is None:
        scheduled_at = scheduled_at.replace(tzinfo=UTC)
    stamp = scheduled_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")
    return f"reprobe@{stamp}" if partition_key is None else f"reprobe@{stamp}@{partition_key}"


def build_reprobe_schedule(
    job_name_or_job,
    cron: str = "0 3 * * *",
    *,
    name: str = "reprobe_schedule",
    execution_timezone: str = "UTC",
    partition_key_fn: Callable[[], str] | None = None,
    run_tags_fn: Callable[[], Mapping[str, str]] | None = None,
) -> ScheduleDefinition:
    """Builds the schedule that re-probes the pool against the current policy.

    Args:
        job_name_or_job: The re-probe job, by name (``str``) or as a job definition.
        cron: Cron expression for the ticks (default: daily at 03:00).
        name: Schedule name.
        execution_timezone: Timezone the cron is read in.
        partition_key_fn: For a partitioned job, returns the partition to re-probe (e.g. the
            current policy's checkpoint name); called every tick. ``None`` for an unpartitioned job.
        run_tags_fn: Returns the provenance tags (profile, config hash, code version, task-set
            version) to put on the run; called every tick.

    Returns:
        The schedule. Each tick requests one run with the run key from :func:`reprobe_run_key`
        and the scheduled time as a tag. Evaluated without a scheduled time (a manual test
        evaluation), it uses the current UTC time.
    """
    target = (
        {"job_name": job_name_or_job}
        if isinstance(job_name_or_job, str)
        else {"job": job_name_or_job}
    )

    @schedule(
        name=name,
        cron_schedule=cron,
        execution_timezone=execution_timezone,
        description="Re-probes the training pool against the current policy.",
        **target,
    )
    def _reprobe_schedule(context: ScheduleEvaluationContext) -> RunRequest:
        scheduled_at = context.scheduled_execution_time or datetime.now(UTC)
        partition_key = partition_key_fn() if partition_key_fn else None
        return RunRequest(
            run_key=reprobe_run_key(scheduled_at, partition_key),
            partition_key=partition_key,
            tags={
                **(run_tags_fn() if run_tags_fn else {}),
                TAG_SCHEDULED_AT: scheduled_at.isoformat(),
            },
        )

    return _reprobe_schedule
