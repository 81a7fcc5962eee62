"""The helpdesk MCP server: registry entry, reserved tools in-process, fresh state, stdio smoke."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters

from rewardbox.domains import registry
from rewardbox.domains.helpdesk.domain import DOMAIN, SERVER_NAME
from rewardbox.domains.helpdesk.generator import generate_tasks
from rewardbox.domains.helpdesk.server import build_server
from rewardbox.grading.canonical import state_hash

ROOT = Path(__file__).resolve().parents[2]


def test_registry_knows_the_helpdesk_server_and_dataset():
    assert SERVER_NAME == "rewardbox_helpdesk" and SERVER_NAME in registry.server_names()
    assert registry.get_server_builder(SERVER_NAME) is build_server
    assert registry.DOMAIN_SERVERS["helpdesk"] == SERVER_NAME
    assert (registry.dataset_dir("helpdesk") / "scenario" / "helpdesk.yaml").is_file()


def test_in_process_session_agent_writes_are_graded_against_the_golden_state():
    task = next(t for t in generate_tasks() if t["family"] == "multi_action")
    config = task["world_state"][SERVER_NAME]
    golden = config["golden_test_case"]["tool_interactions"]

    async def go():
        async with Client(build_server()) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            init = (await client.call_tool("__reserved__init", {"config": config})).content[0].text
            for item in golden[:2]:  # only half of the work
                await client.call_tool(item["tool"], item["parameters"])
            half = json.loads((await client.call_tool("__reserved__geteffects", {})).content[0].text)
            for item in golden[2:]:
                await client.call_tool(item["tool"], item["parameters"])
            full = json.loads((await client.call_tool("__reserved__geteffects", {})).content[0].text)
            bad = (await client.call_tool("get_device", {"device_id": 7})).content[0].text
            await client.call_tool("__reserved__teardown", {})
            return names, init, half, full, bad

    names, init, half, full, bad = asyncio.run(go())
    assert {fn.__name__ for fn in DOMAIN.tools} <= names and "__reserved__init" in names
    assert init == "{}"
    assert half["result_db_hash"] != half["golden_db_hash"] and half["diff"]
    assert full["result_db_hash"] == full["golden_db_hash"] and full["diff"] == []
    assert "audit_events" not in full["result_db_state"]
    assert json.loads(bad) == {"error": "Input validation failed: device_id: Input should be a valid string",
                               "tool": "get_device"}


def test_every_build_is_a_fresh_server_with_fresh_state():
    async def go():
        async with Client(build_server()) as a, Client(build_server()) as b:
            for c in (a, b):
                await c.call_tool("__reserved__init", {"config": {}})
            await a.call_tool("escalate_ticket", {"ticket_id": "TCK-0002"})
            levels = []
            for c in (a, b):
                text = (await c.call_tool("get_ticket", {"ticket_id": "TCK-0002"})).content[0].text
                levels.append(json.loads(text)["escalation_level"])
            return levels

    assert asyncio.run(go()) == [2, 1]


def test_standalone_stdio_server():
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rewardbox.domains.helpdesk.server"], cwd=str(ROOT),
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    config = {"golden_test_case": {"tool_interactions": [
        {"tool": "reset_password", "parameters": {"employee_id": "EMP-1011"}}]}}

    async def go():
        async with Client(params) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            init = await client.call_tool("__reserved__init", {"config": config})
            verified = await client.call_tool("verify_identity", {"employee_id": "EMP-1011", "badge_number": "B-51570"})
            await client.call_tool("reset_password", {"employee_id": "EMP-1011"})
            effects = json.loads((await client.call_tool("__reserved__geteffects", {})).content[0].text)
            return names, init.content[0].text, verified.content[0].text, effects

    names, init, verified, effects = asyncio.run(asyncio.wait_for(go(), 60))
    assert "reset_password" in names and "__reserved__init" in names
    assert init == "{}" and json.loads(verified)["verified"] is True
    assert effects["result_db_hash"] == effects["golden_db_hash"]
    assert effects["result_db_hash"] != state_hash(effects["initial_db_state"]) and effects["diff"] == []
