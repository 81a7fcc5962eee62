"""The checked-in helpdesk dataset: byte-exact regeneration, loader round trip, task mix, test lists."""

from __future__ import annotations

import sys
import types
from collections import Counter

import pytest
import yaml

from rewardbox.domains import registry
from rewardbox.domains.helpdesk.domain import DOMAIN, SERVER_NAME
from rewardbox.domains.helpdesk.generator import generate_tasks, write_dataset
from rewardbox.tasks.thinkingbox import load_dataset

DATASET = registry.dataset_dir("helpdesk")
TASKS = generate_tasks()
WRITE_TOOLS = {fn.__name__ for fn in DOMAIN.tools} - DOMAIN.readonly_tools


def _writes(task: dict) -> list[dict]:
    return [i for i in task["init"][SERVER_NAME]["golden_test_case"]["tool_interactions"] if i["tool"] in WRITE_TOOLS]


def test_regenerating_gives_the_checked_in_files_byte_for_byte(tmp_path):
    written = write_dataset(tmp_path)
    checked_in = sorted(p for p in DATASET.rglob("*") if p.is_file())
    assert [p.relative_to(tmp_path) for p in written] == [p.relative_to(DATASET) for p in checked_in]
    for new in written:
        assert new.read_bytes() == (DATASET / new.relative_to(tmp_path)).read_bytes(), new.name


def test_generation_is_deterministic_and_the_seed_matters():
    assert generate_tasks() == TASKS
    other = generate_tasks(seed=1)
    assert [t["uid"] for t in other] == [t["uid"] for t in TASKS]
    assert [t["query"] for t in other] != [t["query"] for t in TASKS]


def test_the_loader_reads_every_task_as_generated():
    result = load_dataset(DATASET, dataset_name="helpdesk")
    assert result.errors == [] and result.skipped == []
    by_uid = {t["uid"]: t for t in TASKS}
    assert sorted(t.uid for t in result.tasks) == sorted(by_uid)
    tools = [fn.__name__ for fn in DOMAIN.tools]
    for task in result.tasks:
        spec = by_uid[task.uid]
        assert (task.dataset, task.scenario, task.agent) == ("helpdesk", "helpdesk", "agent")
        assert task.query == spec["query"] and task.user_context == spec["user_context"]
        assert task.init == spec["init"] and task.world_state == spec["world_state"]
        assert task.tags == ("helpdesk", *spec["tags"])
        assert [t.name for t in task.tools] == tools
        assert task.bot_instructions.strip() == DOMAIN.policy_text
        assert "<DONE>" in task.system_instructions
        for value in spec["response_values"]:
            assert repr(value) in task.test_code


def test_both_test_lists_name_every_task_and_load_strictly():
    uids = [t["uid"] for t in TASKS]
    for name in ("benchmark.yaml", "all.yaml"):
        path = DATASET / "testlists" / name
        assert yaml.safe_load(path.read_text()) == uids
        assert [t.uid for t in load_dataset(DATASET, test_list=path).tasks] == uids
    assert {t["split"] for t in TASKS} == {"benchmark"}
    assert sorted(p.name for p in (DATASET / "testlists").iterdir()) == ["all.yaml", "benchmark.yaml"]


def test_task_mix_covers_the_difficulty_spectrum():
    assert len(TASKS) >= 45 and len({t["uid"] for t in TASKS}) == len(TASKS)
    assert set(Counter(t["difficulty"] for t in TASKS)) == {"trivial", "easy", "medium", "hard"}
    traps = [t for t in TASKS if not t["expects_write"] and not t["response_values"]]
    tell = [t for t in TASKS if t["response_values"]]
    multi = [t for t in TASKS if len(_writes(t)) > 1]
    explicit = [t for t in TASKS if t["difficulty"] == "trivial" and len(_writes(t)) == 1
                and all(str(v) in t["query"] for v in _writes(t)[0]["parameters"].values())]
    assert len(traps) >= 12 and len(tell) >= 6 and len(multi) >= 5 and len(explicit) >= 8
    for t in TASKS:
        assert bool(_writes(t)) == t["expects_write"], t["uid"]
        assert f"difficulty:{t['difficulty']}" in t["tags"] and f"family:{t['family']}" in t["tags"]
        assert ("expects_write" in t["tags"]) == t["expects_write"] and ("no_write" in t["tags"]) != t["expects_write"]
        assert ("tells_value" in t["tags"]) == bool(t["response_values"])


def test_user_context_holds_the_facts_a_scripted_user_needs():
    for t in TASKS:
        ctx = t["user_context"]
        for fact in ("Name: ", "Employee id: ", "Email: ", "Goal: ", "Agrees to proceed: "):
            assert fact in ctx, (t["uid"], fact)
        employee_id = next(line for line in ctx.splitlines() if line.startswith("Employee id: "))[13:]
        assert employee_id in t["query"], t["uid"]
        for item in t["init"][SERVER_NAME]["golden_test_case"]["tool_interactions"]:
            for arg in ("badge_number", "phone_last4"):
                if arg in item["parameters"]:  # a factor the agent uses must come from the user
                    assert item["parameters"][arg] in ctx, (t["uid"], arg)


def test_agent_and_scenario_files():
    agent = yaml.safe_load((DATASET / "agent" / "agent.yaml").read_text())
    assert "<DONE>" in agent["system_instructions"] and len(agent["system_instructions"].split()) < 120
    scenario = yaml.safe_load((DATASET / "scenario" / "helpdesk.yaml").read_text())
    assert scenario["world_state"] == {SERVER_NAME: {"data_patch": None, "golden_test_case": None}}
    assert [t["name"] for t in scenario["tools"]] == [fn.__name__ for fn in DOMAIN.tools]
    assert scenario["bot_instructions"].strip() == DOMAIN.policy_text


@pytest.fixture
def tb_stub(monkeypatch):
    """A stand-in ``thinkingbox.common`` for exec-ing a test file (never a real package)."""
    pkg, common = types.ModuleType("thinkingbox"), types.ModuleType("thinkingbox.common")
    common.Judge, common.TestContext = object, object
    pkg.common = common
    monkeypatch.setitem(sys.modules, "thinkingbox", pkg)
    monkeypatch.setitem(sys.modules, "thinkingbox.common", common)


def test_helpers_in_the_test_files_grade_as_specified(tb_stub):
    spec = next(t for t in TASKS if t["family"] == "device_paid")
    path = DATASET / "test_case" / spec["file"]
    g: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), g, g)
    fn = g[spec["name"]]

    def ctx(result_hash, response, **extra):
        effects = {SERVER_NAME: {"result_db_hash": result_hash, "golden_db_hash": "h1",
                                 "diff": [{"path": "devices[DEV-1].status", "type": "value mismatch",
                                           "result": "active", "golden": "replacement_ordered"}], **extra}}
        return types.SimpleNamespace(effects=effects, response=response)

    value = spec["response_values"][0]
    fn(ctx("h1", f"Ordered; your department pays {value}. <DONE>"), None)
    with pytest.raises(AssertionError, match=r"devices\[DEV-1\].status"):
        fn(ctx("h2", f"{value} <DONE>"), None)
    with pytest.raises(AssertionError, match="reply lacks"):
        fn(ctx("h1", "All done. <DONE>"), None)
    with pytest.raises(RuntimeError, match="invalid task"):
        fn(ctx("h1", value, golden_error="golden interaction 0 failed"), None)
