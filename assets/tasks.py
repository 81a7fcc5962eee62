"""Task assets: candidates, benchmark (held out), screened candidates, and their gates."""

import dagster as dg

from assets.clean_trials import require_screened_candidates, stage_io
from assets.metadata import as_metadata, md_table, per_domain, tasks_frame
from assets.versions import EPISODE_ENGINE, code_version, record_versions
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from rewardbox.runtime.stages import UngradableTasksError, screen, screen_benchmark
from rewardbox.tasks.exclusion import check_disjoint
from rewardbox.tasks.schema import Task, task_set_version
from rewardbox.tasks.sources import load_candidates, load_held_out

GROUP = "tasks"
LOAD_CODE = code_version(__name__, "rewardbox.tasks", "rewardbox.domains")
SCREEN_CODE = code_version(
    __name__, "rewardbox.tasks", "rewardbox.selection.screening", *EPISODE_ENGINE
)


def _log_load_errors(context: dg.AssetExecutionContext, errors: list[str]) -> None:
    """Tasks left out under a ``skip`` load policy: each names its file, line and field.

    A load that the policy refuses raises ``TaskSetLoadError`` instead: the step
    fails, nothing is stored, and the last good materialization stays current.
    """
    for error in errors:
        context.log.warning(f"task left out (candidate_loading.on_error=skip): {error}")


@dg.asset(group_name=GROUP, code_version=LOAD_CODE)
def candidate_tasks(context: dg.AssetExecutionContext, rewardbox: RewardboxResource) -> list[Task]:
    """Training candidates; anything in the benchmark split is excluded by uid and content hash.

    Broken task files follow ``tasks.candidate_loading``: ``fail`` (default) fails this asset with
    every file and line named; ``skip`` leaves them out up to ``max_skipped_frac`` and lists them.
    """
    profile = rewardbox.load()
    loaded = load_candidates(profile.tasks)
    _log_load_errors(context, loaded.errors)
    context.add_output_metadata(
        {
            "tasks": len(loaded.tasks),
            "per_domain": per_domain(loaded.tasks),
            "excluded_as_benchmark": len(loaded.excluded),
            "load_errors": dg.MetadataValue.json(loaded.errors),
            "failed_to_load": loaded.failed,
            "load_policy": dg.MetadataValue.json(profile.tasks.candidate_loading.model_dump()),
            "table": md_table(tasks_frame(loaded.tasks)),
            "config_hash": profile.section_hash("tasks"),
            "input_hash": task_set_version(loaded.tasks),
        }
    )
    record_versions(context, task_set_version(loaded.tasks))
    return loaded.tasks


@dg.asset(group_name=GROUP, code_version=SCREEN_CODE)
def benchmark_tasks(
    context: dg.AssetExecutionContext, rewardbox: RewardboxResource, ray_cluster: RayClusterResource
) -> list[Task]:
    """The held-out evaluation set: valid tasks only (invalid ones are reported by uid).

    Strict: a benchmark task file that fails to load fails this asset (file and
    line in the error), and a benchmark task that could not be graded (a system
    error while screening, e.g. test code importing what the grader lacks) fails
    the asset, listed by uid and cause: a benchmark never shrinks silently.
    """
    profile = rewardbox.load()
    try:
        run = screen_benchmark(profile, stage_io(context, rewardbox, profile, ray_cluster))
    except UngradableTasksError as exc:
        failures = {"ungradable": dg.MetadataValue.json(exc.failures)}
        raise dg.Failure(description=str(exc), metadata=failures) from exc
    tables = {"per_domain": per_domain(run.extra), "table": tasks_frame(run.extra)}
    context.add_output_metadata(as_metadata(run.metadata | tables))
    record_versions(context, run.metadata["input_hash"])
    return run.extra


@dg.asset(group_name=GROUP, code_version=SCREEN_CODE)
def screened_candidates(
    context: dg.AssetExecutionContext,
    rewardbox: RewardboxResource,
    ray_cluster: RayClusterResource,
    candidate_tasks: list[Task],
) -> list[Task]:
    """Candidates whose golden replay passes and whose null run fails where a write is expected.

    Fails (nothing stored) when the screen breaks the ``system_errors`` bound (e.g. a servers.yaml
    command that does not exist makes every episode a system error) or no candidate is valid; the
    failure names the kinds, counts and causes (``assets.clean_trials``)."""
    profile = rewardbox.load()
    run = screen(profile, candidate_tasks, stage_io(context, rewardbox, profile, ray_cluster))
    gate = require_screened_candidates(run.rows, len(run.extra), profile, "screened_candidates")
    context.add_output_metadata(
        as_metadata(
            {
                **run.metadata,
                "per_domain": per_domain(run.extra),
                "screen": run.rows,
                "input_hash": task_set_version(candidate_tasks),
            }
        )
        | gate
    )
    record_versions(
        context,
        task_set_version(run.extra),
        profile.section_hash("tasks", "sandbox", "grading", "episode"),
    )
    return run.extra


@dg.asset_check(asset=benchmark_tasks, blocking=True)
def benchmark_disjoint_from_candidates(
    benchmark_tasks: list[Task], rewardbox: RewardboxResource
) -> dg.AssetCheckResult:
    """Blocking: no benchmark or exclude-only task shares a uid or an identity with any candidate.

    The candidates are loaded from the profile here (no screening), so
    ``--select benchmark_tasks`` runs alone, without ``candidate_tasks`` materialised.
    """
    tasks = rewardbox.load().tasks
    problems = check_disjoint(
        load_candidates(tasks).tasks, [*benchmark_tasks, *load_held_out(tasks).tasks]
    )
    return dg.AssetCheckResult(
        passed=not problems,
        metadata={"overlaps": len(problems), "examples": dg.MetadataValue.json(problems[:20])},
    )


@dg.asset_check(asset=screened_candidates, blocking=True)
def screened_candidates_valid(screened_candidates: list[Task]) -> dg.AssetCheckResult:
    """Blocking: at least one valid candidate remains, and none is a benchmark task."""
    leaked = check_disjoint(screened_candidates)
    description = (
        "no valid candidate remains to train on"
        if not screened_candidates
        else f"{len(leaked)} screened task(s) are not candidates: {', '.join(map(str, leaked[:3]))}"
        if leaked
        else None
    )
    return dg.AssetCheckResult(
        passed=bool(screened_candidates) and not leaked,
        description=description,
        metadata={
            "tasks": len(screened_candidates),
            "non_candidates": dg.MetadataValue.json(leaked),
        },
    )
