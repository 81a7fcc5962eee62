"""The one Definitions object loads and holds every asset, check, job, sensor and schedule."""

from __future__ import annotations

import ast
from pathlib import Path

import dagster as dg

ROOT = Path(__file__).resolve().parents[2]

ASSETS = {
    "candidate_tasks",
    "benchmark_tasks",
    "screened_candidates",
    "base_checkpoint",
    "probe_results",
    "reference_probe_results",
    "task_difficulty",
    "training_pool",
    "grpo_checkpoint",
    "merged_checkpoint",
    "base_evaluation_results",
    "evaluation_results",
    "reliability_report",
    "checkpoint_evaluation_results",
}
CHECKS = {
    ("benchmark_tasks", "benchmark_disjoint_from_candidates", True),
    ("screened_candidates", "screened_candidates_valid", True),
    ("merged_checkpoint", "merged_checkpoint_runs", True),
    ("base_evaluation_results", "base_evaluation_coverage", True),
    ("evaluation_results", "evaluation_coverage", True),
    ("probe_results", "probe_parser_parity", True),
    ("base_evaluation_results", "base_evaluation_parser_parity", True),
    ("evaluation_results", "evaluation_parser_parity", True),
    ("reliability_report", "tuned_not_worse_than_base", False),
}


def test_defs_has_every_asset_check_job_and_sensor():
    from pipelines.definitions import defs

    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert keys >= ASSETS
    graph = repo.asset_graph
    specs = {
        (k.asset_key.to_user_string(), k.name, graph.get_check_spec(k).blocking)
        for k in graph.asset_check_keys
    }
    assert specs >= CHECKS
    assert {"main_job", "reprobe_job", "rescreen_job", "checkpoint_evaluation_job"} <= {
        j.name for j in repo.get_all_jobs()
    }
    assert {"new_checkpoint_sensor", "task_source_sensor"} <= {s.name for s in repo.sensor_defs}
    assert "reprobe_schedule" in {s.name for s in repo.schedule_defs}
    dg.Definitions.validate_loadable(defs)


def test_lineage_matches_the_design():
    from pipelines.definitions import defs

    graph = defs.get_repository_def().asset_graph

    def parents(name):
        return {k.to_user_string() for k in graph.get(dg.AssetKey(name)).parent_keys}

    assert parents("screened_candidates") == {"candidate_tasks"}
    assert parents("probe_results") == {"screened_candidates", "base_checkpoint"}
    assert parents("reference_probe_results") == {"screened_candidates"}
    assert parents("training_pool") == {
        "task_difficulty",
        "reference_probe_results",
        "screened_candidates",
    }
    assert parents("grpo_checkpoint") == {"training_pool", "base_checkpoint", "probe_results"}
    assert parents("evaluation_results") == {"benchmark_tasks", "merged_checkpoint"}
    assert parents("reliability_report") == {"base_evaluation_results", "evaluation_results"}


def _imports(package: str) -> set[str]:
    found = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
    return found


def test_dependency_rule():
    """rewardbox never imports dagster or the Dagster packages; nothing imports pipelines."""
    assert not _imports("rewardbox") & {"dagster", "assets", "resources", "sensors", "pipelines"}
    for package in ("assets", "resources", "sensors", "rewardbox"):
        assert "pipelines" not in _imports(package), package


def test_the_policy_key_is_a_dagster_envvar_only_when_its_variable_is_set(monkeypatch):
    from pipelines.definitions import _secrets

    monkeypatch.setenv("REWARDBOX_TEST_POLICY_KEY", "sk-x")
    monkeypatch.delenv("REWARDBOX_TEST_NO_KEY", raising=False)
    secret = _secrets("REWARDBOX_TEST_POLICY_KEY")["policy_api_key"]
    assert (
        isinstance(secret, dg.EnvVar) and secret == "REWARDBOX_TEST_POLICY_KEY"
    )  # the name, never the value
    assert _secrets("REWARDBOX_TEST_NO_KEY") == {}


def test_every_job_runs_its_steps_one_at_a_time_forked_from_a_preloaded_server():
    """Each step forked from a server that imported ``pipelines.definitions`` once, not a fresh interpreter
    that imports torch, scipy and Dagster again (docs/performance.md, "Step start-up")."""
    from dagster._core.system_config.objects import ResolvedRunConfig

    from pipelines.definitions import defs

    for name in ("main_job", "rescreen_job", "reprobe_job"):
        config = ResolvedRunConfig.build(defs.resolve_job_def(name), {})
        engine = config.execution.execution_engine_config
        preload = engine["start_method"]["forkserver"]["preload_modules"]
        assert preload == ["pipelines.definitions"], name
        assert engine["max_concurrent"] == 1, name
