"""Oracle tests for every hotel task, without the episode loop.

Replaying a task's golden interactions through the in-process sandbox must reach
the golden state (equal hashes); doing nothing must differ for every task that
expects a write and be equal for traps / tell-the-user tasks.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from rewardbox.domains.hotel.domain import DOMAIN, SERVER_NAME
from rewardbox.domains.hotel.generator import generate_tasks
from rewardbox.grading.canonical import primary_keys
from rewardbox.sandbox.inprocess import InProcessSandbox

TOOLS = [fn.__name__ for fn in DOMAIN.tools]
TASKS = generate_tasks()


def _golden(task: dict) -> list[dict]:
    return task["world_state"][SERVER_NAME]["golden_test_case"]["tool_interactions"]


async def _episode(task: dict, replay: bool) -> tuple[dict, list[str]]:
    sb = InProcessSandbox()
    await sb.start(task["world_state"], TOOLS)
    try:
        outputs = []
        if replay:
            for item in _golden(task):
                outputs.append(await sb.call_tool(item["tool"], item["parameters"]))
        return (await sb.get_effects())[SERVER_NAME], outputs
    finally:
        await sb.close()


async def _all() -> list[tuple[dict, dict, dict, list[str]]]:
    out = []
    for task in TASKS:
        replayed, outputs = await _episode(task, True)
        null, _ = await _episode(task, False)
        out.append((task, replayed, null, outputs))
    return out


@pytest.fixture(scope="module")
def runs():
    return asyncio.run(_all())


def test_golden_replay_reaches_the_golden_state_for_every_task(runs):
    failures = []
    for task, replayed, _null, outputs in runs:
        errors = [o for o in outputs if "error" in json.loads(o)]
        if replayed.get("golden_error") or errors or replayed["result_db_hash"] != replayed["golden_db_hash"]:
            failures.append((task["uid"], replayed.get("golden_error"), errors, replayed["diff"][:3]))
    assert failures == []


def test_null_run_fails_exactly_the_tasks_that_expect_a_write(runs):
    wrong = []
    for task, _replayed, null, _ in runs:
        unchanged = null["result_db_hash"] == null["golden_db_hash"]
        if unchanged == task["expects_write"]:
            wrong.append(task["uid"])
        if task["expects_write"]:
            assert null["diff"], task["uid"]
    assert wrong == []


def test_golden_trajectories_use_only_scenario_tools_and_traps_only_read():
    for task in TASKS:
        used = [i["tool"] for i in _golden(task)]
        assert set(used) <= set(TOOLS), task["uid"]
        assert used[0] == "find_traveller", task["uid"]  # identify the traveller first (policy)
        writes = [t for t in used if t not in DOMAIN.readonly_tools]
        assert bool(writes) == task["expects_write"], task["uid"]


def test_values_the_agent_must_tell_appear_in_the_golden_tool_outputs(runs):
    checked = 0
    for task, _replayed, _null, outputs in runs:
        for value in task["response_values"]:
            assert any(value in o for o in outputs), (task["uid"], value)
            checked += 1
    assert checked >= 8


def test_write_tasks_change_only_task_rows(runs):
    """A task's golden writes touch only rows of its own data patch or new rows (tasks are independent)."""
    keys = primary_keys(DOMAIN.metadata)
    for task, replayed, _null, _ in runs:
        patch = task["world_state"][SERVER_NAME]["data_patch"]
        for table in ("bookings", "travellers", "payments"):
            pk = keys[table][0]
            own = {r[pk] for r in patch.get(table, [])}
            initial = {r[pk]: r for r in replayed["initial_db_state"][table]}
            for row in replayed["golden_db_state"][table]:
                key = row[pk]
                if key in initial and row != initial[key]:
                    assert key in own, (task["uid"], table, key)
