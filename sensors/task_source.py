"""Task-source sensor: a change to the candidate task source triggers a re-screen.

The sensor compares a fingerprint of the candidate task source (a hash of its dataset files, see
:func:`fingerprint_task_source`) with the one seen last, and requests a run of the re-screen job
(``candidate_tasks -> screened_candidates``) when it differs.

Cursor: the last fingerprint seen (a string); empty before the first tick.

Run key: ``"<fingerprint>@after:<previous fingerprint or 'none'>"``. The fingerprint makes a
repeated tick over the same source launch nothing new; including the previous fingerprint means
that a source that goes A -> B -> A gets a third run (the screened candidates then reflect B, not
A) instead of Dagster silently dropping a second request keyed "A" (a sensor launches at most one
run per run key, across all ticks).

A changed source that no longer loads under the candidate load policy (``task_set_check_fn`` raises
``TaskSetLoadError`` or ``TaskFormatError``) launches nothing: the tick is skipped with the errors
(file and line) as its reason and the cursor stays, so every tick re-checks until the files are fixed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from dagster import RunRequest, SensorDefinition, SensorEvaluationContext, SkipReason, sensor

from rewardbox.errors import TaskFormatError, TaskSetLoadError

TAG_SOURCE_FINGERPRINT = "rewardbox/task_source_fingerprint"
DEFAULT_SUFFIXES = (".yaml", ".yml", ".json", ".jsonl", ".py", ".toml", ".sql", ".parquet")


def fingerprint_task_source(root: Path, suffixes: tuple[str, ...] = DEFAULT_SUFFIXES) -> str:
    """Hashes a task-source directory: every file with a listed suffix, by relative path and bytes.

    Args:
        root: The source directory (or a single file).
        suffixes: File suffixes that count as dataset files; others (caches, editor files) are
            ignored so they do not trigger a re-screen.

    Returns:
        A SHA-256 hex digest (64 characters). Renaming, adding, removing or editing a counted
        file changes it; modification times do not. An empty directory has a fixed digest.

    Raises:
        FileNotFoundError: If ``root`` does not exist (the sensor tick then fails visibly).
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"candidate task source {root} does not exist")
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for path in files:
        if path.suffix.lower() not in suffixes:
            continue
        rel = path.name if path == root else path.relative_to(root).as_posix()
        digest.update(rel.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def fingerprint_task_sources(
    roots: Sequence[Path], suffixes: tuple[str, ...] = DEFAULT_SUFFIXES
) -> str:
    """One fingerprint of several task-source directories: 16 hex characters over each one's
    :func:`fingerprint_task_source`, in the given order.

    Raises:
        FileNotFoundError: a root does not exist.
    """
    parts = [fingerprint_task_source(Path(root), suffixes) for root in roots]
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:16]


def task_source_run_key(fingerprint: str, previous: str | None) -> str:
    """Returns the run key for re-screening ``fingerprint`` after ``previous`` (see module doc)."""
    return f"{fingerprint}@after:{previous or 'none'}"


def _task_source_tick(
    context: SensorEvaluationContext,
    source_fingerprint_fn: Callable[[], str],
    task_set_check_fn: Callable[[], object] | None,
    run_tags_fn: Callable[[], Mapping[str, str]] | None,
) -> RunRequest | SkipReason:
    """One tick of the task-source sensor (see :func:`build_task_source_sensor`)."""
    fingerprint = source_fingerprint_fn()
    previous = context.cursor or None
    if fingerprint == previous:
        return SkipReason(f"candidate task source unchanged ({fingerprint[:12]})")
    if task_set_check_fn is not None:
        try:
            task_set_check_fn()
        except (TaskSetLoadError, TaskFormatError) as exc:
            context.log.error(f"candidate task set does not load; no re-screen launched: {exc}")
            return SkipReason(
                f"candidate task set does not load, no run launched: {str(exc)[:1500]}"
            )
    context.update_cursor(fingerprint)
    return RunRequest(
        run_key=task_source_run_key(fingerprint, previous),
        tags={**(run_tags_fn() if run_tags_fn else {}), TAG_SOURCE_FINGERPRINT: fingerprint},
    )


def build_task_source_sensor(
    *,
    source_fingerprint_fn: Callable[[], str],
    task_set_check_fn: Callable[[], object] | None = None,
    job_name: str | None = None,
    job=None,
    name: str = "task_source_sensor",
    minimum_interval_seconds: int = 300,
    run_tags_fn: Callable[[], Mapping[str, str]] | None = None,
) -> SensorDefinition:
    """Builds the sensor that requests a re-screen when the candidate task source changes.

    Args:
        source_fingerprint_fn: Returns the current fingerprint of the source, e.g.
            ``lambda: fingerprint_task_source(path)``; called every tick. If it raises, the tick
            fails and the cursor does not move.
        task_set_check_fn: Loads the candidate task set under its load policy (e.g.
            ``lambda: load_candidates(profile.tasks)``), called only when the fingerprint changed.
            ``TaskSetLoadError``/``TaskFormatError`` skips the tick without a run and without moving
            the cursor; None checks nothing.
        job_name: Name of the re-screen job (give this or ``job``).
        job: The re-screen job definition (give this or ``job_name``).
        name: Sensor name.
        minimum_interval_seconds: Minimum seconds between ticks.
        run_tags_fn: Returns the provenance tags (profile, config hash, code version, task-set
            version) to put on the requested run; called only when a run is requested.

    Returns:
        The sensor: a run request (run key from :func:`task_source_run_key`, fingerprint tag)
        when the fingerprint differs from the cursor, else a skip; the cursor becomes the
        fingerprint. The first tick always requests a run.

    Raises:
        ValueError: If not exactly one of ``job_name`` and ``job`` is given.
    """
    if (job_name is None) == (job is None):
        raise ValueError("build_task_source_sensor: give exactly one of job_name= or job=")

    @sensor(
        name=name,
        job_name=job_name,
        job=job,
        minimum_interval_seconds=minimum_interval_seconds,
        description="Requests a re-screen run when the candidate task source changes.",
    )
    def _task_source_sensor(context: SensorEvaluationContext) -> RunRequest | SkipReason:
        return _task_source_tick(context, source_fingerprint_fn, task_set_check_fn, run_tags_fn)

    return _task_source_sensor
