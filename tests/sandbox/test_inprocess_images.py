"""Prepared task images: no state carries across episodes; cached initial and golden states equal fresh ones."""

from __future__ import annotations

import asyncio
import json

from rewardbox.domains import database
from rewardbox.domains.golden import _replay
from rewardbox.domains.retail.domain import DOMAIN
from rewardbox.domains.server import tool_runner
from rewardbox.sandbox.inprocess import InProcessSandbox

SRV = "rewardbox_retail"
TOOLS = ["get_order", "cancel_order", "update_shipping_address"]
PATCH = {"orders": [{"order_id": "ORD-1002", "status": "processing"}]}  # an update of a seed row
GOLDEN = [{"tool": "cancel_order", "parameters": {"order_id": "ORD-1002"}}]


def _episode(write: bool) -> dict:
    async def go():
        sb = InProcessSandbox()
        await sb.start(
            {SRV: {"data_patch": PATCH, "golden_test_case": {"tool_interactions": GOLDEN}}}, TOOLS
        )
        try:
            before = json.loads(await sb.call_tool("get_order", {"order_id": "ORD-1002"}))
            if write:
                out = json.loads(await sb.call_tool("cancel_order", {"order_id": "ORD-1002"}))
                assert "error" not in out, out
            return {"before": before, **(await sb.get_effects())[SRV]}
        finally:
            await sb.close()

    return asyncio.run(go())


def test_no_state_carries_across_episodes_of_one_task():
    first, second, third = _episode(write=True), _episode(write=False), _episode(write=True)
    assert (
        first["before"]["status"]
        == second["before"]["status"]
        == third["before"]["status"]
        == "processing"
    )
    assert (
        first["diff"] == [] and first["result_db_hash"] == first["golden_db_hash"]
    )  # the write matched golden
    assert second["diff"] != []  # episode 1's cancellation did not leak into episode 2
    assert second["result_db_state"] == second["initial_db_state"] == first["initial_db_state"]
    assert third["result_db_hash"] == first["result_db_hash"]


def test_cached_initial_and_golden_states_equal_a_fresh_build():
    _episode(write=False)  # fills the cache
    image = database.task_image(DOMAIN, PATCH)
    fresh = database._DatabaseImage(DOMAIN, database._DatabaseImage(DOMAIN), PATCH)
    assert image.initial_state == DOMAIN.dump(fresh.engine)
    db = database.EpisodeDatabase(DOMAIN, PATCH)
    try:
        golden = [value for key, value in image.golden.items() if "ORD-1002" in key]
        assert golden == [_replay(tool_runner(DOMAIN), db, GOLDEN)]
    finally:
        db.dispose()


def test_images_are_bounded_and_bulk_patch_updates_and_inserts(monkeypatch):
    monkeypatch.setattr(database, "TASK_IMAGES_MAX", 3)
    monkeypatch.setattr(database, "_TASK_IMAGES", database.OrderedDict())
    for i in range(6):
        patch = {
            "orders": [
                {"order_id": "ORD-1002", "status": "processing"},
                {"order_id": "ORD-1001", "status": "pending"},
            ],
            "customers": [
                {
                    "customer_id": f"CUS-9{i:03d}",
                    "name": "N",
                    "email": f"n{i}@example.com",
                    "tier": "gold",
                    "member_since": "2024-01-01",
                }
            ],
        }
        db = database.EpisodeDatabase(DOMAIN, patch)
        state = db.dump()
        db.dispose()
        orders = {row["order_id"]: row["status"] for row in state["orders"]}
        assert orders["ORD-1002"] == "processing" and orders["ORD-1001"] == "pending"
        assert any(row["customer_id"] == f"CUS-9{i:03d}" for row in state["customers"])
    assert len(database._TASK_IMAGES) == 3


def test_a_bulk_update_that_breaks_a_constraint_names_the_row_and_caches_nothing():
    patch = {
        "customers": [
            {"customer_id": "CUS-1003", "name": "Renamed"},
            {"customer_id": "CUS-1002", "email": "maria.santos@example.com"},
        ]
    }  # CUS-1001's email
    try:
        database.EpisodeDatabase(DOMAIN, patch)
    except database.DataPatchError as exc:
        assert "data_patch.customers[1]" in str(exc) and "UNIQUE" in str(exc)
    else:
        raise AssertionError("a duplicate unique email must be refused")
    assert all(key[2] != database.patch_key(patch) for key in database._TASK_IMAGES)
