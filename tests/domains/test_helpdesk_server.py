"""The helpdesk MCP server: reserved tools in-process, fresh state, stdio smoke (registry: ``test_domain_contract.py``)."""

from __future__ import annotations

import asyncio
import json

from mcp import Client

from rewardbox.domains.helpdesk.domain import DOMAIN, SERVER_NAME
from rewardbox.domains.server import build_server as build_domain
from rewardbox.grading.canonical import state_hash

from .conftest import call_json, call_text, domain_tasks, run_stdio_server


def test_in_process_session_agent_writes_are_graded_against_the_golden_state():
    task = next(t for t in domain_tasks("helpdesk") if t["family"] == "multi_action")
    config = task["world_state"][SERVER_NAME]
    golden = config["golden_test_case"]["tool_interactions"]

    async def go():
        async with Client(build_domain("helpdesk")) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            init = await call_text(client, "__reserved__init", {"config": config})
            for item in golden[:2]:  # only half of the work
                await client.call_tool(item["tool"], item["parameters"])
            half = await call_json(client, "__reserved__geteffects", {})
            for item in golden[2:]:
                await client.call_tool(item["tool"], item["parameters"])
            full = await call_json(client, "__reserved__geteffects", {})
            bad = await call_text(client, "get_device", {"device_id": 7})
            await client.call_tool("__reserved__teardown", {})
            return names, init, half, full, bad

    names, init, half, full, bad = asyncio.run(go())
    assert {fn.__name__ for fn in DOMAIN.tools} <= names and "__reserved__init" in names
    assert init == "{}"
    assert half["result_db_hash"] != half["golden_db_hash"] and half["diff"]
    assert full["result_db_hash"] == full["golden_db_hash"] and full["diff"] == []
    assert "audit_events" not in full["result_db_state"]
    assert json.loads(bad) == {
        "error": "Input validation failed: device_id: Input should be a valid string",
        "tool": "get_device",
    }


def test_every_build_is_a_fresh_server_with_fresh_state():
    async def go():
        async with Client(build_domain("helpdesk")) as a, Client(build_domain("helpdesk")) as b:
            for c in (a, b):
                await c.call_tool("__reserved__init", {"config": {}})
            await a.call_tool("escalate_ticket", {"ticket_id": "TCK-0002"})
            return [
                (await call_json(c, "get_ticket", {"ticket_id": "TCK-0002"}))["escalation_level"]
                for c in (a, b)
            ]

    assert asyncio.run(go()) == [2, 1]


def test_standalone_stdio_server():
    config = {
        "golden_test_case": {
            "tool_interactions": [
                {"tool": "reset_password", "parameters": {"employee_id": "EMP-1011"}}
            ]
        }
    }

    async def session(client):
        names = [t.name for t in (await client.list_tools()).tools]
        init = await call_text(client, "__reserved__init", {"config": config})
        verified = await call_json(
            client, "verify_identity", {"employee_id": "EMP-1011", "badge_number": "B-51570"}
        )
        await client.call_tool("reset_password", {"employee_id": "EMP-1011"})
        return names, init, verified, await call_json(client, "__reserved__geteffects", {})

    names, init, verified, effects = run_stdio_server("rewardbox.domains.server helpdesk", session)
    assert "reset_password" in names and "__reserved__init" in names
    assert init == "{}" and verified["verified"] is True
    assert effects["result_db_hash"] == effects["golden_db_hash"]
    assert (
        effects["result_db_hash"] != state_hash(effects["initial_db_state"])
        and effects["diff"] == []
    )
