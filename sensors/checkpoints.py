"""New-checkpoint sensor: a checkpoint that appears in the watch directory triggers its evaluation.

The sensor scans a directory for Hugging Face checkpoint directories (a subdirectory holding
``config.json``), validates each new one, adds its name as a dynamic partition and requests one
evaluation run for that partition, all in the same tick.

Cursor: a JSON list (used as a set) of the ``"<checkpoint name>@<task-set version>"`` keys that were
handled SUCCESSFULLY. A checkpoint whose validation raised is logged and left out of the cursor, so
the next tick tries it again; a checkpoint already in the cursor is neither validated nor requested
again.

Run key: ``"<checkpoint name>@<task-set version>"``. The benchmark task-set version is part of
the key so that a checkpoint evaluated against task set v1 gets a NEW run when the task set becomes
v2, rather than the run being silently deduplicated by Dagster (which launches at most one run per
run key per sensor, across all ticks). The partition key is the checkpoint name alone.

A benchmark task set that does not load (``task_set_version_fn`` raises ``TaskSetLoadError`` or
``TaskFormatError``) launches nothing: the tick is skipped with the errors as its reason and the cursor
stays, so no evaluation ever runs on a shrunken benchmark.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dagster import (
    DynamicPartitionsDefinition,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)

from rewardbox import strict_json
from rewardbox.config.provenance import TAG_TASK_SET_VERSION
from rewardbox.errors import TaskFormatError, TaskSetLoadError

CHECKPOINT_MARKER = "config.json"
TAG_CHECKPOINT_PATH = "rewardbox/checkpoint_path"


def checkpoint_run_key(checkpoint_name: str, task_set_version: str) -> str:
    """Returns the run key (and cursor entry) for one checkpoint against one task-set version.

    Args:
        checkpoint_name: The checkpoint directory name, which is also its partition key.
        task_set_version: The benchmark task-set version the evaluation runs against.

    Returns:
        ``"<checkpoint_name>@<task_set_version>"``.
    """
    return f"{checkpoint_name}@{task_set_version}"


def find_checkpoint_dirs(watch_dir: Path) -> list[Path]:
    """Lists the complete-looking checkpoint directories directly under ``watch_dir``.

    A directory counts once it holds ``config.json``; a half-written directory without it is ignored
    until a later tick. Whether the weights load is ``validate_fn``'s job, not this function's.

    Args:
        watch_dir: The directory to scan. A missing directory yields no checkpoints.

    Returns:
        The checkpoint directories, sorted by name (so run requests come in a stable order).
    """
    if not watch_dir.is_dir():
        return []
    return sorted(
        (p for p in watch_dir.iterdir() if p.is_dir() and (p / CHECKPOINT_MARKER).is_file()),
        key=lambda p: p.name,
    )


def decode_cursor(cursor: str | None) -> set[str]:
    """Parses the sensor cursor into the set of handled ``name@version`` keys.

    Args:
        cursor: The stored cursor; ``None`` or ``""`` on the first tick.

    Returns:
        The handled keys (empty on the first tick).

    Raises:
        ValueError: If the cursor is not a JSON list of strings. The tick fails instead of
            forgetting what was handled.
    """
    if not cursor:
        return set()
    try:
        keys = json.loads(cursor)
    except json.JSONDecodeError as exc:
        raise ValueError(f"checkpoint sensor cursor is not JSON: {cursor[:200]!r} ({exc})") from exc
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError(
            f"checkpoint sensor cursor must be a JSON list of strings: {cursor[:200]!r}"
        )
    return set(keys)


def encode_cursor(keys: set[str]) -> str:
    """Serialises the handled keys as a sorted JSON list (stable across ticks)."""
    return strict_json.dumps(sorted(keys))


def _check_partition_key(name: str) -> None:
    """Rejects names Dagster refuses as partition keys ("..." or control characters)."""
    if "..." in name or any(ord(ch) < 32 for ch in name):
        raise ValueError(f"checkpoint directory name {name!r} is not a valid partition key")


@dataclass
class CheckpointTick:
    """What one tick decided: the checkpoints to request and the ones whose handling raised.

    Attributes:
        requested: ``(checkpoint dir, run key)`` for each newly handled checkpoint, sorted by name.
        failures: ``(checkpoint dir, error text)`` for each checkpoint whose handling raised.
    """

    requested: list[tuple[Path, str]] = field(default_factory=list)
    failures: list[tuple[Path, str]] = field(default_factory=list)


def plan_checkpoint_tick(
    checkpoint_dirs: Sequence[Path],
    handled: set[str],
    task_set_version: str,
    validate_fn: Callable[[Path], None],
) -> CheckpointTick:
    """Decides which checkpoints to request this tick (plain logic, no Dagster context).

    Args:
        checkpoint_dirs: Candidate checkpoint directories (see :func:`find_checkpoint_dirs`).
        handled: Keys already handled successfully (the decoded cursor).
        task_set_version: The current benchmark task-set version.
        validate_fn: Raises if a checkpoint is malformed or cannot be checked. Any exception,
            system error included, only defers that one checkpoint to the next tick.

    Returns:
        The plan. A checkpoint already in ``handled`` is skipped without being validated.
    """
    plan = CheckpointTick()
    for path in checkpoint_dirs:
        key = checkpoint_run_key(path.name, task_set_version)
        if key in handled:
            continue
        try:
            _check_partition_key(path.name)
            validate_fn(path)
        except Exception as exc:  # noqa: BLE001 - one bad checkpoint must not block the others
            plan.failures.append((path, f"{type(exc).__name__}: {exc}"))
            continue
        plan.requested.append((path, key))
    return plan


def _tick_result(
    context: SensorEvaluationContext,
    plan: CheckpointTick,
    handled: set[str],
    partitions_def: DynamicPartitionsDefinition,
    task_set_version: str,
    run_tags: Mapping[str, str],
) -> SensorResult:
    for path, error in plan.failures:
        context.log.warning(f"checkpoint {path} not handled, retrying next tick: {error}")
    new_handled = handled | {key for _, key in plan.requested}
    if not plan.requested:
        reason = f"no new checkpoints; {len(plan.failures)} deferred after errors"
        return SensorResult(skip_reason=reason, cursor=encode_cursor(new_handled))
    names = [path.name for path, _ in plan.requested]
    run_requests = [
        RunRequest(
            run_key=key,
            partition_key=path.name,
            tags={
                **run_tags,
                TAG_CHECKPOINT_PATH: str(path),
                TAG_TASK_SET_VERSION: task_set_version,
            },
        )
        for path, key in plan.requested
    ]
    return SensorResult(
        run_requests=run_requests,
        dynamic_partitions_requests=[partitions_def.build_add_request(names)],
        cursor=encode_cursor(new_handled),
    )


def _checkpoint_tick(
    context: SensorEvaluationContext,
    partitions_def: DynamicPartitionsDefinition,
    watch_dir_fn: Callable[[], Path],
    task_set_version_fn: Callable[[], str],
    validate_fn: Callable[[Path], None],
    run_tags_fn: Callable[[], Mapping[str, str]] | None,
) -> SensorResult | SkipReason:
    """One tick of the checkpoint sensor (see :func:`build_checkpoint_sensor`)."""
    watch_dir = Path(watch_dir_fn())
    if not watch_dir.is_dir():
        return SkipReason(f"checkpoint watch directory {watch_dir} does not exist yet")
    handled = decode_cursor(context.cursor)
    try:
        version = task_set_version_fn()
    except (TaskSetLoadError, TaskFormatError) as exc:
        context.log.error(f"benchmark task set does not load; no evaluation launched: {exc}")
        return SkipReason(f"benchmark task set does not load, no run launched: {str(exc)[:1500]}")
    plan = plan_checkpoint_tick(find_checkpoint_dirs(watch_dir), handled, version, validate_fn)
    tags = dict(run_tags_fn()) if run_tags_fn and plan.requested else {}
    return _tick_result(context, plan, handled, partitions_def, version, tags)


def build_checkpoint_sensor(
    *,
    partitions_def: DynamicPartitionsDefinition,
    watch_dir_fn: Callable[[], Path],
    task_set_version_fn: Callable[[], str],
    validate_fn: Callable[[Path], None],
    job_name: str | None = None,
    job=None,
    name: str = "new_checkpoint_sensor",
    minimum_interval_seconds: int = 60,
    run_tags_fn: Callable[[], Mapping[str, str]] | None = None,
) -> SensorDefinition:
    """Builds the sensor that requests one evaluation run per new checkpoint and task-set version.

    Args:
        partitions_def: The dynamic partitions definition the checkpoint names are added to
            (``pipelines.partitions.checkpoint_partitions``); passed in so that ``sensors`` does not
            import ``pipelines``.
        watch_dir_fn: Returns the directory to scan; called every tick (a missing dir skips).
        task_set_version_fn: Returns the benchmark task-set version; called every tick. If it
            raises ``TaskSetLoadError``/``TaskFormatError`` the tick is skipped (reason: the errors);
            any other exception fails the tick. Either way no run starts and the cursor stays.
        validate_fn: Raises for a malformed checkpoint; that checkpoint is retried next tick.
        job_name: Name of the partitioned evaluation job to target (give this or ``job``).
        job: The job definition to target (give this or ``job_name``).
        name: Sensor name.
        minimum_interval_seconds: Minimum seconds between ticks.
        run_tags_fn: Returns the provenance tags (profile, config hash, code version) to put on
            every requested run; called on ticks that request runs.

    Returns:
        The sensor. Each run request has ``partition_key`` = checkpoint name, ``run_key`` =
        ``"<name>@<task_set_version>"`` and tags with the checkpoint path and task-set version
        (plus ``run_tags_fn()``).

    Raises:
        ValueError: If not exactly one of ``job_name`` and ``job`` is given.
    """
    if (job_name is None) == (job is None):
        raise ValueError("build_checkpoint_sensor: give exactly one of job_name= or job=")

    @sensor(
        name=name,
        job_name=job_name,
        job=job,
        minimum_interval_seconds=minimum_interval_seconds,
        description="Requests an evaluation run per new checkpoint and benchmark task-set version.",
    )
    def _checkpoint_sensor(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        return _checkpoint_tick(
            context, partitions_def, watch_dir_fn, task_set_version_fn, validate_fn, run_tags_fn
        )

    return _checkpoint_sensor
