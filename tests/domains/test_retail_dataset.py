"""The retail task mix (the checks every domain shares are in ``test_domain_contract.py``)."""

from __future__ import annotations

from .conftest import domain_tasks, golden_calls

TASKS = domain_tasks("retail")
WRITE_TOOLS = ("cancel_order", "update_shipping_address", "return_items")


def test_task_mix():
    assert len(TASKS) >= 40
    traps = [t for t in TASKS if not t["expects_write"] and not t["response_values"]]
    tell = [t for t in TASKS if t["response_values"]]
    multi = [
        t
        for t in TASKS
        if sum(i["tool"] in WRITE_TOOLS for i in golden_calls(t)) > 1
        or any(len(i["parameters"].get("item_ids", [])) > 1 for i in golden_calls(t))
    ]
    assert len(traps) >= 8 and len(tell) >= 4 and len(multi) >= 4
