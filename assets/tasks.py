"""Task assets: candidates, benchmark (held out), screened candidates, and their gates."""


import dagster as dg

from assets.metadata import md_table, per_domain, tasks_frame, tasks_hash
from assets.versions import EPISODE_ENGINE, code_version, record_versions, tasks_version
from resources.rewardbox import RewardboxResource
from rewardbox.evaluation.screening import screen_tasks
from rewardbox.tasks.exclusion import check_disjoint
from rewardbox.tasks.schema import Task
from rewardbox.tasks.sources import load_benchmark, load_candidates

GROUP = "tasks"
LOAD_CODE = code_version(__name__, "rewardbox.tasks", "rewardbox.domains")
SCREEN_CODE = code_version(__name__, "rewardbox.tasks", *EPISODE_ENGINE)


def _log_load_errors(context: dg.AssetExecutionContext, errors: list[str]) -> None:
    """A broken task file names file, line and field; the other tasks still load."""
    for error in errors:
        context.log.warning(f"task file skipped: {error}")


@dg.asset(group_name=GROUP, code_version=LOAD_CODE)
def candidate_tasks(context: dg.AssetExecutionContext, rewardbox: RewardboxResource) -> list[Task]:
    """Training candidates; anything in the benchmark split is excluded by uid and content hash."""
    profile = rewardbox.load()
    loaded = load_candidates(profile.tasks)
    _log_load_errors(context, loaded.errors)
    context.add_output_metadata({
        "tasks": len(loaded.tasks), "per_domain": per_domain(loaded.tasks),
        "excluded_as_benchmark": len(loaded.excluded), "load_errors": dg.MetadataValue.json(loaded.errors),
        "table": md_table(tasks_frame(loaded.tasks)), "config_hash": profile.section_hash("tasks"),
        "input_hash": tasks_hash(loaded.tasks),
    })
    record_versions(context, tasks_version(loaded.tasks))
    return loaded.tasks


@dg.asset(group_name=GROUP, code_version=SCREEN_CODE)
def benchmark_tasks(context: dg.AssetExecutionContext, rewardbox: RewardboxResource) -> list[Task]:
    """The held-out evaluation set: valid tasks only (invalid ones are reported by uid)."""
    profile = rewardbox.load()
    loaded = load_benchmark(profile.tasks)
    _log_load_errors(context, loaded.errors)
    valid, report = screen_tasks(loaded.tasks, profile, log=context.log)
    invalid = report.filter(~report["valid"])
    context.add_output_metadata({
        "tasks": len(valid), "per_domain": per_domain(valid), "invalid": invalid.height,
        "invalid_tasks": md_table(invalid.select("uid", "reason")), "table": md_table(tasks_frame(valid)),
        "load_errors": dg.MetadataValue.json(loaded.errors), "config_hash": profile.section_hash("tasks"),
        "input_hash": tasks_hash(valid),
    })
    record_versions(context, tasks_version(valid))
    return valid


@dg.asset(group_name=GROUP, code_version=SCREEN_CODE)
def screened_candidates(context: dg.AssetExecutionContext, rewardbox: RewardboxResource,
                        candidate_tasks: list[Task]) -> list[Task]:
    """Candidates whose golden replay passes and whose null run fails where a write is expected."""
    profile = rewardbox.load()
    valid, report = screen_tasks(candidate_tasks, profile, log=context.log)
    invalid = report.filter(~report["valid"])
    for row in invalid.iter_rows(named=True):
        context.log.warning(f"invalid task {row['uid']}: {row['reason']}")
    context.add_output_metadata({
        "tasks": len(valid), "invalid": invalid.height, "per_domain": per_domain(valid),
        "trap_tasks": int((~report["expects_write"].fill_null(True)).sum()),
        "invalid_tasks": md_table(invalid.select("uid", "reason")), "screen": md_table(report),
        "input_hash": tasks_hash(candidate_tasks),
    })
    record_versions(context, tasks_version(valid), profile.section_hash("tasks", "sandbox", "grading", "episode"))
    return valid


@dg.asset_check(asset=benchmark_tasks, additional_ins={"candidate_tasks": dg.AssetIn()}, blocking=True)
def benchmark_disjoint_from_candidates(benchmark_tasks: list[Task], candidate_tasks: list[Task]) -> dg.AssetCheckResult:
    """Blocking: no benchmark task shares a uid or a content hash with any candidate."""
    problems = check_disjoint(candidate_tasks, benchmark_tasks)
    return dg.AssetCheckResult(passed=not problems, metadata={"overlaps": len(problems),
                                                              "examples": dg.MetadataValue.json(problems[:20])})


@dg.asset_check(asset=screened_candidates, blocking=True)
def screened_candidates_valid(screened_candidates: list[Task]) -> dg.AssetCheckResult:
    """Blocking: at least one valid candidate remains, and none is a benchmark task."""
    leaked = [t.uid for t in screened_candidates if t.split != "candidate"]
    passed = bool(screened_candidates) and not leaked
    return dg.AssetCheckResult(passed=passed, metadata={"tasks": len(screened_candidates),
                                                        "non_candidates": dg.MetadataValue.json(leaked)})
