"""Oracle tests for every task of every domain, without the episode loop.

Replaying a task's golden interactions through the in-process sandbox must reach
the golden state (equal hashes); doing nothing must differ for every task that
expects a write and be equal for traps / tell-the-user tasks. Runs are computed
once per domain (``conftest.oracle_runs``) and shared with the domains' own oracle tests.
"""

from __future__ import annotations

import json

import pytest

from .conftest import (
    DOMAIN_NAMES,
    changed_foreign_rows,
    domain_tasks,
    domain_under_test,
    golden_calls,
    oracle_runs,
)

MIN_TOLD_VALUES = {"retail": 5, "hotel": 8, "helpdesk": 5}
"""At least this many values to tell, over a domain's tasks."""

each_domain = pytest.mark.parametrize("name", DOMAIN_NAMES)


@each_domain
def test_golden_replay_reaches_the_golden_state_for_every_task(name):
    runs = oracle_runs(name)
    failures = []
    for run in runs:
        replayed = run.replayed
        errors = [o for o in run.outputs if "error" in json.loads(o)]
        if (
            replayed.get("golden_error")
            or errors
            or replayed["result_db_hash"] != replayed["golden_db_hash"]
        ):
            failures.append(
                (run.task["uid"], replayed.get("golden_error"), errors, replayed["diff"][:3])
            )
    assert failures == []
    assert len(runs) == len(domain_tasks(name))


@each_domain
def test_null_run_fails_exactly_the_tasks_that_expect_a_write(name):
    wrong = []
    for run in oracle_runs(name):
        unchanged = run.null["result_db_hash"] == run.null["golden_db_hash"]
        if unchanged == run.task["expects_write"]:
            wrong.append(run.task["uid"])
        if run.task["expects_write"]:
            assert run.null["diff"], run.task["uid"]
    assert wrong == []


@each_domain
def test_values_the_agent_must_tell_appear_in_the_golden_tool_outputs(name):
    checked = 0
    for run in oracle_runs(name):
        for answer in run.task["response_values"]:
            options = [answer] if isinstance(answer, str) else answer
            assert any(v in o for v in options for o in run.outputs), (run.task["uid"], answer)
            checked += 1
    assert checked >= MIN_TOLD_VALUES[name]


@each_domain
def test_write_tasks_change_only_task_rows(name):
    """Golden writes touch only the task's own patch rows, or add new rows (tasks are independent)."""
    metadata = domain_under_test(name).domain.metadata
    for run in oracle_runs(name):
        assert changed_foreign_rows(run, metadata) == [], run.task["uid"]


@each_domain
def test_golden_trajectories_use_only_scenario_tools_and_traps_only_read(name):
    d = domain_under_test(name)
    for task in domain_tasks(name):
        used = [i["tool"] for i in golden_calls(task)]
        assert set(used) <= set(d.tool_names), task["uid"]
        writes = [t for t in used if t not in d.domain.readonly_tools]
        assert bool(writes) == task["expects_write"], task["uid"]
