"""The in-process sandbox: lifecycle, errors, name clashes, isolation, schema cleaning."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp.server.mcpserver import MCPServer

from rewardbox.domains.server import build_server as build_domain
from rewardbox.errors import SandboxError
from rewardbox.sandbox.inprocess import InProcessSandbox, InProcessSandboxFactory, UnknownToolError
from rewardbox.sandbox.schema import clean_schema

SRV = "rewardbox_retail"
TOOLS = ["find_customer", "get_order", "cancel_order", "update_shipping_address"]


def _ws(patch=None, golden=None):
    return {SRV: {"data_patch": patch, "golden_test_case": {"tool_interactions": golden or []}}}


def run(coro):
    return asyncio.run(coro)


def test_lifecycle_hides_reserved_tools_and_cleans_schemas():
    async def go():
        sb = InProcessSandbox()
        init = await sb.start(
            _ws(golden=[{"tool": "cancel_order", "parameters": {"order_id": "ORD-1002"}}]), TOOLS
        )
        tools = await sb.list_tools()
        out = await sb.call_tool("cancel_order", {"order_id": "ORD-1002"})
        effects = await sb.get_effects()
        await sb.close()
        await sb.close()  # idempotent
        return init, tools, out, effects

    init, tools, out, effects = run(go())
    assert init == {SRV: {}}
    assert [t.name for t in tools] == TOOLS
    assert not any(t.name.startswith("__reserved__") for t in tools)
    cancel = next(t for t in tools if t.name == "cancel_order")
    assert cancel.input_schema == {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    }
    assert cancel.description.startswith("Cancel an order that has not shipped yet")
    assert json.loads(out)["status"] == "cancelled"
    eff = effects[SRV]
    assert eff["result_db_hash"] == eff["golden_db_hash"] and eff["diff"] == []


def test_tool_errors_are_ordinary_text_and_unknown_names_raise():
    async def go():
        sb = InProcessSandbox()
        await sb.start(_ws(), TOOLS)
        try:
            shipped = await sb.call_tool("cancel_order", {"order_id": "ORD-1003"})
            bad_arg = await sb.call_tool("get_order", {"order_id": 42})
            with pytest.raises(UnknownToolError, match="Tool list_orders does not exist"):
                await sb.call_tool(
                    "list_orders", {"customer_id": "CUS-1001"}
                )  # exists, not available
            with pytest.raises(UnknownToolError):
                await sb.call_tool("no_such_tool", {})
        finally:
            await sb.close()
        with pytest.raises(SandboxError):
            await sb.call_tool("get_order", {"order_id": "ORD-1001"})
        return shipped, bad_arg

    shipped, bad_arg = run(go())
    assert json.loads(shipped) == {
        "error": "Order ORD-1003 is shipped; only pending or processing orders can be cancelled",
        "tool": "cancel_order",
    }
    assert json.loads(bad_arg) == {
        "error": "Input validation failed: order_id: Input should be a valid string",
        "tool": "get_order",
    }


@pytest.mark.parametrize(
    ("world_state", "tools", "message"),
    [
        ({"no_such_server": {}}, [], "no embedded server named 'no_such_server'"),
        (_ws(), ["find_customer", "teleport"], "Tool teleport does not exist"),
        (_ws(patch={"spaceships": [{"id": 1}]}), TOOLS, "unknown table"),
        (
            _ws(patch={"orders": [{"order_id": "ORD-1001", "colour": "red"}]}),
            TOOLS,
            "unknown column",
        ),
        ({}, [], "at least one server"),
    ],
)
def test_start_failures_are_system_errors(world_state, tools, message):
    async def go():
        sb = InProcessSandbox()
        with pytest.raises(SandboxError, match=message):
            await sb.start(world_state, tools)
        await sb.close()  # safe after a failed start

    run(go())


def _clash_server() -> MCPServer:
    server = MCPServer(name="clash", log_level="WARNING")

    @server.tool()
    def get_order(order_id: str) -> str:
        """A different get_order."""
        return json.dumps({"from": "clash", "order_id": order_id})

    @server.tool()
    def explode() -> str:
        """A tool with a bug."""
        raise RuntimeError("boom")

    return server


def test_later_server_wins_a_name_clash_and_servers_without_reserved_tools_work():
    builders = {SRV: lambda: build_domain("retail"), "clash": _clash_server}

    async def go(order):
        sb = InProcessSandbox(builders)
        ws = {name: ({} if name == "clash" else _ws()[SRV]) for name in order}
        init = await sb.start(ws, ["get_order", "find_customer"])
        out = await sb.call_tool("get_order", {"order_id": "ORD-1001"})
        effects = await sb.get_effects()
        await sb.close()
        return init, json.loads(out), effects

    init, out, effects = run(go([SRV, "clash"]))
    assert out == {"from": "clash", "order_id": "ORD-1001"}
    assert init == {SRV: {}, "clash": {}} and effects["clash"] == {}
    _, out, _ = run(go(["clash", SRV]))
    assert out["order_id"] == "ORD-1001" and "from" not in out and out["customer_id"] == "CUS-1001"


def test_a_crashing_tool_is_a_system_error():
    async def go():
        sb = InProcessSandbox({"clash": _clash_server})
        await sb.start({"clash": {}}, ["explode"])
        try:
            with pytest.raises(SandboxError, match="tool 'explode' crashed"):
                await sb.call_tool("explode", {})
        finally:
            await sb.close()

    run(go())


def test_close_from_another_task_and_factory():
    factory = InProcessSandboxFactory()

    async def go():
        sb = factory()
        await asyncio.create_task(sb.start(_ws(), TOOLS))
        out = await sb.call_tool("get_order", {"order_id": "ORD-1001"})
        await asyncio.create_task(sb.close())
        return out

    assert json.loads(run(go()))["order_id"] == "ORD-1001"
    assert isinstance(factory(), InProcessSandbox) and factory() is not factory()


def test_eight_concurrent_episodes_see_only_their_own_writes():
    # seed orders in pending/processing states: one cancellation per episode, episode 7 writes nothing
    pending = ["ORD-1002", "ORD-1004", "ORD-1009", "ORD-1011", "ORD-1016", "ORD-1018", "ORD-1023"]

    async def episode(i: int):
        sb = InProcessSandbox()
        await sb.start(_ws(), ["get_order", "update_shipping_address", "cancel_order"])
        try:
            await asyncio.sleep(0.001 * (8 - i))  # interleave
            if i < 7:
                out = json.loads(await sb.call_tool("cancel_order", {"order_id": pending[i]}))
                assert "error" not in out, out
            return (await sb.get_effects())[SRV]
        finally:
            await sb.close()

    async def go():
        return await asyncio.gather(*(episode(i) for i in range(len(pending) + 1)))

    results = run(go())
    for i, eff in enumerate(results):
        changed = [
            d["path"] for d in eff["diff"]
        ]  # golden = no writes, so the diff is this episode's writes
        if i == 7:
            assert changed == [] and eff["result_db_hash"] == eff["golden_db_hash"]
            continue
        assert f"orders[{pending[i]}].status" in changed
        others = [p for p in changed if p.startswith("orders[") and pending[i] not in p]
        assert others == [], (i, changed)
        assert sum(1 for d in eff["diff"] if d["path"] == "refunds") == 1
    assert len({eff["result_db_hash"] for eff in results}) == 8


def test_clean_schema_dereferences_and_strips_titles():
    schema = {
        "title": "toolArguments",
        "type": "object",
        "$defs": {
            "Item": {
                "title": "Item",
                "type": "object",
                "properties": {"sku": {"title": "Sku", "type": "string"}},
            }
        },
        "properties": {
            "title": {"title": "Title", "type": "string"},  # a parameter NAMED title stays
            "items": {"title": "Items", "type": "array", "items": {"$ref": "#/$defs/Item"}},
            "main": {"$ref": "#/$defs/Item", "description": "the main item"},
        },
        "required": ["title"],
    }
    cleaned = clean_schema(schema)
    item = {"type": "object", "properties": {"sku": {"type": "string"}}}
    assert cleaned == {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "items": {"type": "array", "items": item},
            "main": {**item, "description": "the main item"},
        },
        "required": ["title"],
    }
    assert "$defs" in schema and schema["title"] == "toolArguments"  # input untouched
    assert clean_schema(None) == {"type": "object", "properties": {}}
    recursive = {
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
    }
    assert clean_schema(recursive)["properties"]["root"]["properties"]["next"] == {"type": "object"}
