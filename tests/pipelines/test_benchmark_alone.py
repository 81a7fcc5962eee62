"""``benchmark_tasks`` selected alone materialises with its blocking check (no ``candidate_tasks`` needed),
and a benchmark task that cannot be graded fails the asset, named with its cause."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from tests.fixtures.dagster_resources import test_resources

MIXED = Path(__file__).resolve().parents[1] / "fixtures" / "tb_mixed"


def _materialize(tmp_path, profile: str) -> dg.ExecuteInProcessResult:
    from assets import evaluation, model, report, selection, tasks, training

    modules = [tasks, model, selection, training, evaluation, report]
    resources = test_resources(profile, tmp_path)
    return dg.materialize(
        [*dg.load_assets_from_modules(modules), *dg.load_asset_checks_from_modules(modules)],
        selection="benchmark_tasks",
        resources=resources,
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )


def test_benchmark_tasks_alone_runs_its_blocking_check(tmp_path):
    result = _materialize(tmp_path, "test")
    assert result.success
    assert {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()} == {
        "benchmark_tasks"
    }
    checks = result.get_asset_check_evaluations()
    assert [(c.check_name, c.passed) for c in checks] == [
        ("benchmark_disjoint_from_candidates", True)
    ]


def test_ungradable_benchmark_task_fails_the_asset_by_uid_and_cause(tmp_path):
    profile = tmp_path / "broken.yaml"
    source = {"dataset": str(MIXED), "servers": "servers.yaml"}
    profile.write_text(
        yaml.safe_dump(
            {
                "tasks": {
                    "candidates": [{**source, "test_list": "testlists/benchmark.yaml"}],
                    "benchmark": [{**source, "test_list": "testlists/with_broken.yaml"}],
                    "max_benchmark": 5,
                },
                "sandbox": {"kind": "external", "tool_timeout_s": 30},
                "policy": {"kind": "scripted_mix"},
                "episode": {"max_user_turns": 1, "concurrency": 4},
                "grading": {"workers": 1},
            }
        )
    )
    result = _materialize(tmp_path, str(profile))
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    text = str(failure.event_specific_data.error)
    assert "mixed_broken.py:test_needs_proxy_client: grader: ModuleNotFoundError" in text
    # the judge-graded tasks cannot be graded either here: no judge endpoint (a permanent error, listed too)
    assert "mixed_orders.py:test_total_rubric: grader: JudgeException" in text
