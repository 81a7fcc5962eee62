"""The domain framework: data patches, golden state, fresh servers, reserved tools, stdio."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from mcp import Client

from rewardbox.domains import registry
from rewardbox.domains.base import DataPatchError, ToolRunner
from rewardbox.domains.database import EpisodeDatabase
from rewardbox.domains.retail.domain import DOMAIN
from rewardbox.domains.server import build_server as build_domain


def build_server_retail():
    return build_domain("retail")


from rewardbox.grading.canonical import state_hash

from .conftest import ROOT, call_json, call_text, run_stdio_server

SRV = "rewardbox_retail"


def _db(patch):
    db = EpisodeDatabase(DOMAIN, patch)
    try:
        return db.dump()
    finally:
        db.dispose()


def test_patch_updates_existing_rows_by_primary_key_and_inserts_new_ones():
    seed = _db(None)
    state = _db(
        {
            "orders": [{"order_id": "ORD-1001", "status": "pending"}],
            "customers": [
                {
                    "customer_id": "CUS-9001",
                    "name": "New Person",
                    "email": "new@x.test",
                    "phone": None,
                    "tier": "gold",
                    "member_since": "2024-01-02",
                }
            ],
        }
    )
    before = next(o for o in seed["orders"] if o["order_id"] == "ORD-1001")
    after = next(o for o in state["orders"] if o["order_id"] == "ORD-1001")
    assert before["status"] == "delivered" and after == {**before, "status": "pending"}
    assert len(state["customers"]) == len(seed["customers"]) + 1
    assert state["customers"][-1]["customer_id"] == "CUS-9001"
    assert state_hash(_db({"orders": []})) == state_hash(seed)  # an empty list is a no-op


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"spaceships": []}, "unknown table(s) ['spaceships']"),
        (
            {"orders": [{"order_id": "ORD-1", "colour": "red"}]},
            "data_patch.orders[0]: unknown column(s) ['colour']",
        ),
        (
            {"order_items": [{"item_id": "ORD-1001-1", "quantity": "two"}]},
            "data_patch.order_items[0].quantity",
        ),
        ({"orders": [{"status": "pending"}]}, "data_patch.orders[0]: missing primary key"),
        (
            {
                "customers": [
                    {
                        "customer_id": "CUS-9",
                        "name": "A",
                        "email": "a@x.test",
                        "tier": "gold",
                        "member_since": "2024-01-01",
                    },
                    {
                        "customer_id": "CUS-8",
                        "name": "B",
                        "email": "a@x.test",
                        "tier": "gold",
                        "member_since": "2024-01-01",
                    },
                ]
            },
            "data_patch.customers[1]: UNIQUE constraint failed",
        ),
        ({"orders": {"order_id": "x"}}, "expected a list of rows"),
        (
            {
                "orders": [
                    {
                        "order_id": "ORD-9",
                        "customer_id": "CUS-NOPE",
                        "status": "pending",
                        "placed_on": "2025-06-01",
                        "shipping_address_id": "ADR-1001-H",
                        "total": 1,
                    }
                ]
            },
            "data_patch.orders[0]: FOREIGN KEY constraint failed",
        ),
        (
            {"orders": [{"order_id": "ORD-1001", "placed_on": "yesterday"}]},
            "data_patch.orders[0].placed_on",
        ),
    ],
)
def test_bad_patches_fail_with_a_clear_message(patch, message):
    with pytest.raises(DataPatchError) as info:
        EpisodeDatabase(DOMAIN, patch)
    assert message in str(info.value)


def test_runner_validates_like_the_sdk_and_rolls_back_failures():
    runner = ToolRunner(DOMAIN)
    db = EpisodeDatabase(DOMAIN)
    try:
        before = db.dump()
        payload, failed = runner.invoke(
            db.engine, "return_items", {"order_id": "ORD-1001", "item_ids": ["NOPE"]}
        )
        assert failed and payload == {
            "error": "Item 'NOPE' is not part of order ORD-1001",
            "tool": "return_items",
        }
        assert db.dump() == before
        payload, failed = runner.invoke(db.engine, "cancel_order", {})
        assert failed and payload["error"] == "Input validation failed: order_id: Field required"
        payload, failed = runner.invoke(db.engine, "teleport", {})
        assert failed and payload["error"] == "Unknown tool: teleport"
        # the SDK's JSON-in-a-string leniency applies to the golden replay too
        payload, failed = runner.invoke(
            db.engine, "return_items", {"order_id": "ORD-1001", "item_ids": '["ORD-1001-1"]'}
        )
        assert not failed and payload["returned_item_ids"] == ["ORD-1001-1"]
    finally:
        db.dispose()


async def _session(world_config, calls=()):
    async with Client(build_server_retail()) as client:
        init = (
            (await client.call_tool("__reserved__init", {"config": world_config})).content[0].text
        )
        outs = [(await client.call_tool(n, a)).content[0].text for n, a in calls]
        effects = json.loads((await client.call_tool("__reserved__geteffects", {})).content[0].text)
        await client.call_tool("__reserved__teardown", {})
        return init, outs, effects


def test_golden_interaction_that_errors_marks_the_task_invalid():
    config = {
        "data_patch": None,
        "golden_test_case": {
            "tool_interactions": [
                {"tool": "get_order", "parameters": {"order_id": "ORD-1003"}},
                {
                    "tool": "cancel_order",
                    "parameters": {"order_id": "ORD-1003"},
                },  # shipped: cannot cancel
            ]
        },
    }
    init, _, effects = asyncio.run(_session(config))
    assert init == "{}"
    assert effects["golden_error"].startswith(
        "golden interaction 1 (cancel_order) failed: Order ORD-1003 is shipped"
    )
    assert effects["golden_db_hash"] is None and effects["golden_db_state"] is None
    assert effects["result_db_hash"] == state_hash(effects["initial_db_state"])


def test_init_rejects_bad_golden_blocks_and_patches():
    bad_golden = {"golden_test_case": {"tool_interactions": [{"parameters": {}}]}}
    init, _, _ = asyncio.run(_session(bad_golden))
    assert json.loads(init)["status"] == "error" and "needs a 'tool' name" in init
    init, _, _ = asyncio.run(_session({"data_patch": {"nope": []}}))
    assert json.loads(init) == {
        "status": "error",
        "error": "init failed: data_patch: unknown table(s) ['nope']; known: "
        + str(sorted(DOMAIN.metadata.tables)),
    }


def test_every_build_is_a_fresh_server_with_fresh_state():
    async def go():
        a, b = build_server_retail(), build_server_retail()
        assert a is not b
        async with Client(a) as ca, Client(b) as cb:
            for c in (ca, cb):
                await c.call_tool("__reserved__init", {"config": {}})
            await ca.call_tool("cancel_order", {"order_id": "ORD-1002"})
            order_a = json.loads(
                (await ca.call_tool("get_order", {"order_id": "ORD-1002"})).content[0].text
            )
            order_b = json.loads(
                (await cb.call_tool("get_order", {"order_id": "ORD-1002"})).content[0].text
            )
            return order_a["status"], order_b["status"]

    assert asyncio.run(go()) == ("cancelled", "pending")


def test_effects_have_the_thinkingbox_keys_and_ungraded_parts_are_left_out():
    config = {
        "golden_test_case": {
            "tool_interactions": [
                {
                    "tool": "create_ticket",
                    "parameters": {
                        "customer_id": "CUS-1001",
                        "category": "billing",
                        "description": "golden words",
                        "order_id": "ORD-1001",
                    },
                }
            ]
        }
    }
    calls = [
        (
            "create_ticket",
            {
                "customer_id": "CUS-1001",
                "category": "billing",
                "description": "the agent's own words",
                "order_id": "ORD-1001",
            },
        )
    ]
    _, outs, effects = asyncio.run(_session(config, calls))
    assert (
        json.loads(outs[0])["ticket_id"] == "TCK-ORD-1001-BILLING"
    )  # derived from the business key
    assert {
        "initial_db_state",
        "result_db_state",
        "result_db_hash",
        "golden_db_state",
        "golden_db_hash",
        "diff",
    } <= set(effects)
    assert "audit_events" not in effects["result_db_state"]
    assert "description" not in effects["result_db_state"]["tickets"][0]
    assert effects["result_db_hash"] == effects["golden_db_hash"] and effects["diff"] == []


def test_registry():
    assert registry.server_names() == ["rewardbox_helpdesk", "rewardbox_hotel", "rewardbox_retail"]
    assert registry.get_server_builder(SRV).args == ("retail",)
    assert registry.domain_of_server(SRV) == "retail"
    assert (registry.dataset_dir("retail") / "scenario" / "retail.yaml").is_file()
    with pytest.raises(KeyError, match="known"):
        registry.get_server_builder("nope")
    with pytest.raises(KeyError):
        registry.dataset_dir("nope")


def test_standalone_stdio_server():
    async def session(client):
        names = [t.name for t in (await client.list_tools()).tools]
        init = await call_text(
            client,
            "__reserved__init",
            {
                "config": {
                    "golden_test_case": {
                        "tool_interactions": [
                            {"tool": "cancel_order", "parameters": {"order_id": "ORD-1002"}}
                        ]
                    }
                }
            },
        )
        await client.call_tool("cancel_order", {"order_id": "ORD-1002"})
        return names, init, await call_json(client, "__reserved__geteffects", {})

    names, init, effects = run_stdio_server("rewardbox.domains.server retail", session)
    assert "cancel_order" in names and "__reserved__init" in names
    assert init == "{}"
    assert effects["result_db_hash"] == effects["golden_db_hash"]


_HASH_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from rewardbox.domains.retail.generator import generate_tasks
from rewardbox.domains.server import EpisodeState, tool_runner
from rewardbox.domains.retail.domain import DOMAIN
task = next(t for t in generate_tasks() if t["family"] == "multi_action")
state = EpisodeState(tool_runner(DOMAIN))
state.init(task["world_state"]["rewardbox_retail"])
effects = state.effects()
print(effects["result_db_hash"], effects["golden_db_hash"])
"""


def test_domain_hashes_do_not_depend_on_pythonhashseed():
    outs = set()
    for seed in ("1", "999"):
        proc = subprocess.run(
            [sys.executable, "-c", _HASH_SCRIPT, str(ROOT)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            timeout=120,
            check=True,
        )
        outs.add(proc.stdout.strip())
    assert len(outs) == 1
    initial, golden = outs.pop().split()
    assert initial != golden
