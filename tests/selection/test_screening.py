"""Task screening through the real loop and grader (embedded retail, in-process sandbox): issue #12 item 9."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from rewardbox.config.profile import load_profile
from rewardbox.domains import registry
from rewardbox.runtime.compose import campaign_parts
from rewardbox.selection.screening import screen_tasks
from rewardbox.tasks.thinkingbox import load_dataset

ADDRESS = "retail_address.py:test_retail_address_change_01"
# its golden actions: find_customer(email), then update_shipping_address(ORD-6171, ADR-2017-W)


@pytest.fixture(scope="module")
def address_task():
    tasks = {t.uid: t for t in load_dataset(registry.dataset_dir("retail")).tasks}
    task = tasks[ADDRESS]
    assert "expects_write" in task.tags
    return task


def _variant(task, suffix: str, interactions=None, tags=None):
    world_state = copy.deepcopy(task.world_state)
    server = next(iter(world_state))
    if interactions is not None:
        world_state[server]["golden_test_case"] = {"tool_interactions": interactions}
    return dataclasses.replace(
        task,
        uid=f"{task.uid}#{suffix}",
        world_state=world_state,
        tags=task.tags if tags is None else tags,
    )


def _screen(tasks):
    valid, rows = screen_tasks(tasks, campaign_parts(load_profile("test")))
    return [t.uid for t in valid], {r["uid"]: r for r in rows.iter_rows(named=True)}


def test_issue12_item9_write_task_whose_golden_run_only_reads_is_invalid(address_task):
    reads = [
        {"tool": "find_customer", "parameters": {"email": "ana.diaz@mail.test"}},
        {"tool": "get_order", "parameters": {"order_id": "ORD-6171"}},
    ]
    # own case (the other direction): the real write task tagged as writing nothing
    untagged = tuple("no_write" if t == "expects_write" else t for t in address_task.tags)
    tasks = [
        address_task,
        _variant(address_task, "reads", reads),
        _variant(address_task, "retagged", tags=untagged),
    ]
    valid, rows = _screen(tasks)
    assert valid == [ADDRESS]
    read_only = rows[f"{ADDRESS}#reads"]
    assert (
        read_only["golden_passed"] is True and read_only["null_passed"] is True
    )  # the fault screening must catch
    assert read_only["reason"] == (
        "tagged 'expects_write' but the golden actions write nothing (golden state "
        "equals the initial state; golden actions: ['find_customer', 'get_order'])"
    )
    assert rows[f"{ADDRESS}#retagged"]["reason"].startswith(
        "tagged 'no_write' but the golden actions change the state"
    )


def test_issue12_item9_refused_golden_action_is_an_invalid_task_not_a_system_error(address_task):
    refused_first = [{"tool": "get_order", "parameters": {"order_id": "ORD-NOPE-1"}}]
    # own case: the refusal comes after a write that succeeded
    refused_later = [
        {
            "tool": "update_shipping_address",
            "parameters": {"order_id": "ORD-6171", "address_id": "ADR-2017-W"},
        },
        {
            "tool": "update_shipping_address",
            "parameters": {"order_id": "ORD-6171", "address_id": "ADR-NOPE"},
        },
    ]
    valid, rows = _screen(
        [
            _variant(address_task, "first", refused_first),
            _variant(address_task, "later", refused_later),
        ]
    )
    assert valid == []
    first, later = rows[f"{ADDRESS}#first"], rows[f"{ADDRESS}#later"]
    assert (
        first["reason"]
        == "invalid task: a golden action is refused at step 0 (get_order): Order 'ORD-NOPE-1' not found"
    )
    assert later["reason"].startswith(
        "invalid task: a golden action is refused at step 1 (update_shipping_address): "
    )
    assert "ADR-NOPE" in later["reason"]
    assert not any("system error" in r["reason"] for r in rows.values())


def test_deep_golden_trajectories_are_screened_whatever_the_profiles_agent_limits():
    """The full profile's 4 agent turns made screening drop the deep cleanup families as "golden replay fails
    its own test": the golden replay is lifted past the profile's limits (they bound the policy under test)."""
    tasks = {t.uid: t for t in load_dataset(registry.dataset_dir("retail")).tasks}
    deep = [t for t in tasks.values() if len(t.golden_interactions()) >= 5][:2]
    assert deep, "the embedded retail set has tasks of 5+ golden calls"
    profile = load_profile("test")
    profile.episode.max_agent_turns = profile.episode.max_agent_steps_per_user_turn = 3
    valid, rows = screen_tasks(deep, campaign_parts(profile))
    assert [t.uid for t in valid] == [t.uid for t in deep], rows["reason"].to_list()


def test_a_tasks_own_agent_turn_limit_below_its_golden_is_named_as_the_reason(address_task):
    capped = dataclasses.replace(address_task, uid=f"{address_task.uid}#capped", max_agent_turns=1)
    valid, rows = _screen([capped])
    assert valid == []
    assert rows[capped.uid]["reason"] == (
        "the task's own agent-turn limit (1) is below its golden trajectory "
        "(2 calls and the answer: 3 agent completions)"
    )
