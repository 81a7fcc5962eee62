"""The hotel task mix, trivial tasks and stdio server (shared checks: ``test_domain_contract.py``)."""

from __future__ import annotations

from collections import Counter

from rewardbox.domains.hotel.domain import SERVER_NAME
from rewardbox.grading.canonical import state_hash

from .conftest import call_json, call_text, domain_tasks, golden_calls, run_stdio_server

TASKS = domain_tasks("hotel")
WRITE_TOOLS = {
    "request_approval",
    "change_room",
    "cancel_booking",
    "redeem_credits",
    "award_credits",
}


def test_task_mix():
    assert len(TASKS) >= 50
    levels = Counter(t["difficulty"] for t in TASKS)
    assert levels["trivial"] >= 10
    traps = [t for t in TASKS if not t["expects_write"] and not t["response_values"]]
    tell = [t for t in TASKS if t["response_values"]]
    multi = [t for t in TASKS if sum(i["tool"] in WRITE_TOOLS for i in golden_calls(t)) > 1]
    approvals = [t for t in TASKS if any(i["tool"] == "request_approval" for i in golden_calls(t))]
    assert len(traps) >= 10 and len(tell) >= 8 and len(multi) >= 4 and len(approvals) >= 8


def test_trivial_tasks_name_the_id_and_need_one_write():
    for t in (t for t in TASKS if t["difficulty"] == "trivial"):
        writes = [i for i in golden_calls(t) if i["tool"] in WRITE_TOOLS]
        assert len(writes) == 1 and writes[0]["parameters"]["booking_id"] in t["query"], t["uid"]


def test_standalone_stdio_server():
    task = next(t for t in TASKS if t["family"] == "room_change_approved")
    config = task["world_state"][SERVER_NAME]

    async def session(client):
        names = [t.name for t in (await client.list_tools()).tools]
        init = await call_text(client, "__reserved__init", {"config": config})
        for item in golden_calls(task):
            await client.call_tool(item["tool"], item["parameters"])
        return names, init, await call_json(client, "__reserved__geteffects", {})

    names, init, effects = run_stdio_server("rewardbox.domains.server hotel", session)
    assert "change_room" in names and "__reserved__init" in names
    assert init == "{}"
    assert (
        effects["result_db_hash"]
        == effects["golden_db_hash"]
        != state_hash(effects["initial_db_state"])
    )
    assert effects["diff"] == []
