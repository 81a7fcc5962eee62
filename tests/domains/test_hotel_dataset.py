"""The checked-in hotel dataset: byte-exact regeneration, loader, splits, task mix, stdio server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import types
from collections import Counter
from pathlib import Path

import pytest
import yaml
from mcp import Client, StdioServerParameters

from rewardbox.domains import registry
from rewardbox.domains.hotel.domain import DOMAIN, SERVER_NAME
from rewardbox.domains.hotel.generator import generate_tasks, write_dataset
from rewardbox.domains.hotel.server import build_server
from rewardbox.grading.canonical import state_hash
from rewardbox.tasks.thinkingbox import load_dataset

ROOT = Path(__file__).resolve().parents[2]
DATASET = registry.dataset_dir("hotel")
TASKS = generate_tasks()
WRITE_TOOLS = {"request_approval", "change_room", "cancel_booking", "redeem_credits", "award_credits"}


def _golden(task: dict) -> list[dict]:
    return task["init"][SERVER_NAME]["golden_test_case"]["tool_interactions"]


def test_regenerating_gives_the_checked_in_files_byte_for_byte(tmp_path):
    written = write_dataset(tmp_path)
    checked_in = sorted(p for p in DATASET.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert [p.relative_to(tmp_path) for p in written] == [p.relative_to(DATASET) for p in checked_in]
    for new in written:
        assert new.read_bytes() == (DATASET / new.relative_to(tmp_path)).read_bytes(), new.name


def test_generation_is_deterministic_and_the_seed_matters():
    assert generate_tasks() == TASKS
    other = generate_tasks(seed=1)
    assert [t["uid"] for t in other] == [t["uid"] for t in TASKS]
    assert [t["query"] for t in other] != [t["query"] for t in TASKS]


def test_the_loader_reads_every_task_as_generated():
    result = load_dataset(DATASET, dataset_name="hotel")
    assert result.errors == [] and result.skipped == []
    by_uid = {t["uid"]: t for t in TASKS}
    assert sorted(t.uid for t in result.tasks) == sorted(by_uid)
    for task in result.tasks:
        spec = by_uid[task.uid]
        assert (task.scenario, task.query, task.user_context) == ("hotel", spec["query"], spec["user_context"])
        assert task.init == spec["init"] and task.world_state == spec["world_state"]
        assert task.tags == ("hotel", *spec["tags"])
        assert [t.name for t in task.tools] == [fn.__name__ for fn in DOMAIN.tools]
        assert task.bot_instructions.strip() == DOMAIN.policy_text and "<DONE>" in task.system_instructions
        assert f"__tb_test_fn = {spec['name']}" in task.test_code


def test_testlists_split_the_tasks_about_one_in_four():
    bench = yaml.safe_load((DATASET / "testlists" / "benchmark.yaml").read_text())
    cand = yaml.safe_load((DATASET / "testlists" / "candidates.yaml").read_text())
    assert not set(bench) & set(cand)
    assert sorted(bench + cand) == sorted(t["uid"] for t in TASKS)
    assert 0.2 <= len(bench) / len(TASKS) <= 0.3
    assert {t["family"] for t in TASKS if t["uid"] in bench} == {t["family"] for t in TASKS}
    loaded = load_dataset(DATASET, test_list=DATASET / "testlists" / "benchmark.yaml")
    assert [t.uid for t in loaded.tasks] == bench


def test_task_mix():
    assert len(TASKS) >= 50
    levels = Counter(t["difficulty"] for t in TASKS)
    assert set(levels) == {"trivial", "easy", "medium", "hard"} and levels["trivial"] >= 10
    traps = [t for t in TASKS if not t["expects_write"] and not t["response_values"]]
    tell = [t for t in TASKS if t["response_values"]]
    multi = [t for t in TASKS if sum(i["tool"] in WRITE_TOOLS for i in _golden(t)) > 1]
    approvals = [t for t in TASKS if any(i["tool"] == "request_approval" for i in _golden(t))]
    assert len(traps) >= 10 and len(tell) >= 8 and len(multi) >= 4 and len(approvals) >= 8
    for t in TASKS:
        assert f"difficulty:{t['difficulty']}" in t["tags"] and f"family:{t['family']}" in t["tags"]
        assert ("expects_write" in t["tags"]) == t["expects_write"] and ("no_write" in t["tags"]) != t["expects_write"]
        assert ("tells_value" in t["tags"]) == bool(t["response_values"])
        ctx = t["user_context"]
        for fact in ("Name: ", "Email: ", "Traveller id: ", "Goal: ", "Agrees to proceed: "):
            assert fact in ctx, (t["uid"], fact)
        email = next(line for line in ctx.splitlines() if line.startswith("Email: "))[7:]
        assert email in t["query"]
    assert len({t["uid"] for t in TASKS}) == len(TASKS)


def test_trivial_tasks_name_the_id_and_need_one_write():
    for t in (t for t in TASKS if t["difficulty"] == "trivial"):
        writes = [i for i in _golden(t) if i["tool"] in WRITE_TOOLS]
        assert len(writes) == 1 and writes[0]["parameters"]["booking_id"] in t["query"], t["uid"]


def test_agent_and_scenario_files():
    agent = yaml.safe_load((DATASET / "agent" / "agent.yaml").read_text())
    assert "<DONE>" in agent["system_instructions"] and len(agent["system_instructions"].split()) < 120
    scenario = yaml.safe_load((DATASET / "scenario" / "hotel.yaml").read_text())
    assert scenario["world_state"] == {SERVER_NAME: {"data_patch": None, "golden_test_case": None}}
    assert [t["name"] for t in scenario["tools"]] == [fn.__name__ for fn in DOMAIN.tools]
    assert scenario["bot_instructions"].strip() == DOMAIN.policy_text
    assert len(DOMAIN.policy_text.split()) < 300 and "2025-09-10" in DOMAIN.policy_text


@pytest.fixture
def tb_stub(monkeypatch):
    """A stand-in ``thinkingbox.common`` for exec-ing a test file (never a real package)."""
    pkg, common = types.ModuleType("thinkingbox"), types.ModuleType("thinkingbox.common")
    common.Judge, common.TestContext = object, object
    pkg.common = common
    monkeypatch.setitem(sys.modules, "thinkingbox", pkg)
    monkeypatch.setitem(sys.modules, "thinkingbox.common", common)


def test_helpers_in_the_test_files_grade_as_specified(tb_stub):
    path = DATASET / "test_case" / "hotel_cancel.py"
    spec = next(t for t in TASKS if t["file"] == "hotel_cancel.py" and t["response_values"])
    g: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), g, g)
    fn = g[spec["name"]]

    def ctx(result_hash, response):
        effects = {SERVER_NAME: {"result_db_hash": result_hash, "golden_db_hash": "h1",
                                 "diff": [{"path": "bookings[BK-1].status", "type": "value mismatch",
                                           "result": "confirmed", "golden": "cancelled"}]}}
        return types.SimpleNamespace(effects=effects, response=response)

    value = spec["response_values"][0]
    fn(ctx("h1", f"Cancelled; {value} will be refunded. <DONE>"), None)
    with pytest.raises(AssertionError, match=r"bookings\[BK-1\].status"):
        fn(ctx("h2", f"{value} <DONE>"), None)
    with pytest.raises(AssertionError, match="reply lacks"):
        fn(ctx("h1", "All done. <DONE>"), None)


def test_registry_knows_the_hotel_server():
    assert registry.get_server_builder(SERVER_NAME) is build_server
    assert registry.DOMAIN_SERVERS["hotel"] == SERVER_NAME
    assert (DATASET / "scenario" / "hotel.yaml").is_file()


def test_standalone_stdio_server():
    task = next(t for t in TASKS if t["family"] == "room_change_approved")
    config = task["world_state"][SERVER_NAME]
    params = StdioServerParameters(command=sys.executable, args=["-m", "rewardbox.domains.hotel.server"],
                                   cwd=str(ROOT), env={**os.environ, "PYTHONPATH": str(ROOT)})

    async def go():
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            init = (await client.call_tool("__reserved__init", {"config": config})).content[0].text
            for item in _golden(task):
                await client.call_tool(item["tool"], item["parameters"])
            effects = (await client.call_tool("__reserved__geteffects", {})).content[0].text
            return names, init, json.loads(effects)

    names, init, effects = asyncio.run(asyncio.wait_for(go(), 60))
    assert "change_room" in names and "__reserved__init" in names
    assert init == "{}"
    assert effects["result_db_hash"] == effects["golden_db_hash"] != state_hash(effects["initial_db_state"])
    assert effects["diff"] == []
