"""Depth and variety of the embedded tasks: several writes over several records, missing information
resolved by lookup, conditions, a change of mind; the trivial families stay."""

from __future__ import annotations

from collections import Counter

import pytest

from .conftest import DOMAIN_NAMES, domain_tasks, domain_under_test, golden_calls

RECORD_PARAMS = ("order_id", "booking_id", "device_id", "ticket_id", "system_id", "request_id")


def _writes(name, task):
    readonly = domain_under_test(name).domain.readonly_tools
    return [c for c in golden_calls(task) if c["tool"] not in readonly]


@pytest.mark.parametrize("name", DOMAIN_NAMES)
def test_some_tasks_write_three_or_more_times_over_several_records_and_trivial_ones_stay(name):
    deep = []
    for task in domain_tasks(name):
        writes = _writes(name, task)
        records = {
            c["parameters"][p] for c in writes for p in RECORD_PARAMS if p in c["parameters"]
        }
        if len(writes) >= 3 and len(records) >= 2:
            deep.append(task["uid"])
    assert len(deep) >= 4
    levels = Counter(t["difficulty"] for t in domain_tasks(name))
    assert levels["trivial"] >= 4 and levels["hard"] >= 10


def test_retail_forgotten_email_is_found_by_name_and_postal_code():
    tasks = [t for t in domain_tasks("retail") if t["family"] == "forgot_email"]
    assert len(tasks) == 3 and all(t["expects_write"] for t in tasks)
    for task in tasks:
        (config,) = task["world_state"].values()
        (customer,) = config["data_patch"]["customers"]
        assert (
            customer["email"] not in task["query"] and customer["email"] not in task["user_context"]
        )
        assert golden_calls(task)[0]["tool"] == "find_customer_by_name", task["uid"]


@pytest.mark.parametrize("name", ["retail", "hotel"])
def test_a_change_of_mind_writes_only_the_corrected_record(name):
    key = {"retail": "order_id", "hotel": "booking_id"}[name]
    tasks = [t for t in domain_tasks(name) if t["family"] == "change_of_mind"]
    assert tasks
    for task in tasks:
        (write,) = _writes(name, task)
        named = [w for w in task["query"].split() if w.strip(".,:;").startswith(("ORD-", "BK-"))]
        first = named[0].strip(".,:;")
        assert write["parameters"][key] != first and write["parameters"][key] in task["query"], (
            task["uid"]
        )


def test_retail_conditional_cancel_writes_what_the_status_calls_for():
    tools = {}
    for task in (t for t in domain_tasks("retail") if t["family"] == "conditional_cancel"):
        (config,) = task["world_state"].values()
        status = config["data_patch"]["orders"][0]["status"]
        tools[status] = [c["tool"] for c in _writes("retail", task)]
    assert tools == {
        "processing": ["cancel_order"],
        "pending": ["cancel_order"],
        "delivered": ["return_items"],
        "shipped": [],
    }
