"""Each blocking asset check fails on a bad input and passes on a good one (fast: no model sampling).

The checks are called directly with their inputs and the ``test`` profile's resource; the
whole graph, every check passing, is materialised by ``test_materialize_fast.py``.
"""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from resources.rewardbox import RewardboxResource
from rewardbox.config.profile import load_profile
from rewardbox.tasks.sources import load_benchmark, load_candidates


@pytest.fixture(scope="module")
def task_sets():
    tasks = load_profile("test").tasks
    return load_candidates(tasks).tasks, load_benchmark(tasks).tasks


@pytest.fixture
def resource(tmp_path):
    return RewardboxResource(profile="test", data_dir=str(tmp_path))


def test_benchmark_overlap_gate(task_sets, resource):
    from assets.tasks import benchmark_disjoint_from_candidates

    candidates, benchmark = task_sets
    assert benchmark_disjoint_from_candidates(benchmark_tasks=benchmark, rewardbox=resource).passed
    renamed = dataclasses.replace(
        candidates[0], uid="copied.py:test_copy", split="benchmark"
    )  # same task, new uid
    failed = benchmark_disjoint_from_candidates(
        benchmark_tasks=[*benchmark, renamed], rewardbox=resource
    )
    assert not failed.passed and failed.metadata["overlaps"].value == 1
    assert "same task" in failed.metadata["examples"].value[0]


def test_screened_candidates_gate(task_sets):
    from assets.tasks import screened_candidates_valid

    candidates, benchmark = task_sets
    assert screened_candidates_valid(screened_candidates=candidates).passed
    leaked = screened_candidates_valid(screened_candidates=[*candidates, benchmark[0]])
    assert not leaked.passed and leaked.metadata["non_candidates"].value == [
        f"{benchmark[0].uid}: split is 'benchmark', not 'candidate'"
    ]
    assert not screened_candidates_valid(screened_candidates=[]).passed  # nothing left to train on


@pytest.mark.parametrize("check_name", ["base_evaluation_coverage", "evaluation_coverage"])
def test_evaluation_coverage_gates(task_sets, resource, check_name):
    import assets.evaluation

    check = getattr(assets.evaluation, check_name)
    _, benchmark = task_sets
    trials = resource.load().evaluation.trials
    rows = pl.DataFrame(
        {
            "uid": [t.uid for t in benchmark for _ in range(trials)],
            "trial": [i for _ in benchmark for i in range(trials)],
        }
    )
    inputs = {
        "base_evaluation_results" if check_name.startswith("base") else "evaluation_results": rows
    }
    assert check(rewardbox=resource, benchmark_tasks=benchmark, **inputs).passed
    inputs = {
        name: frame.head(frame.height - 1) for name, frame in inputs.items()
    }  # one key missing
    failed = check(rewardbox=resource, benchmark_tasks=benchmark, **inputs)
    assert not failed.passed and failed.metadata["examples"].value == [
        f"missing ('{benchmark[-1].uid}', {trials - 1})"
    ]


def test_merged_checkpoint_gate(task_sets, resource, tmp_path):
    from assets.training import merged_checkpoint_runs
    from tests.fixtures.tiny_checkpoint import write_tiny_checkpoint

    _, benchmark = task_sets
    merged = write_tiny_checkpoint(tmp_path / "merged")
    passed = merged_checkpoint_runs(
        rewardbox=resource, merged_checkpoint=str(merged), benchmark_tasks=benchmark
    )
    assert passed.passed and passed.metadata["system_error"].value == "None"
    (merged / "model.safetensors").unlink()  # a checkpoint without weights does not load
    failed = merged_checkpoint_runs(
        rewardbox=resource, merged_checkpoint=str(merged), benchmark_tasks=benchmark
    )
    assert not failed.passed and "load_error" in failed.metadata
