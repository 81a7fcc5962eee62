"""Retail tool behaviour: hard rules enforced, ids deterministic, failures write nothing."""

from __future__ import annotations

import pytest

from rewardbox.domains.retail.domain import DOMAIN  # noqa: F401 - the ``env`` fixture serves it
from rewardbox.domains.retail.tools import READONLY_TOOLS

from .conftest import assert_calls_write_nothing, assert_fails_without_writing


@pytest.mark.parametrize(
    ("tool", "args", "error"),
    [
        (
            "cancel_order",
            {"order_id": "ORD-1001"},
            "Order ORD-1001 is delivered; only pending or processing",
        ),
        ("cancel_order", {"order_id": "ORD-0000"}, "Order 'ORD-0000' not found"),
        (
            "update_shipping_address",
            {"order_id": "ORD-1003", "address_id": "ADR-1001-W"},
            "is shipped",
        ),
        (
            "update_shipping_address",
            {"order_id": "ORD-1002", "address_id": "ADR-1003-H"},
            "not a saved address of customer CUS-1001",
        ),
        (
            "return_items",
            {"order_id": "ORD-1002", "item_ids": ["ORD-1002-1"]},
            "only delivered orders",
        ),
        ("return_items", {"order_id": "ORD-1001", "item_ids": []}, "must list each item"),
        (
            "create_ticket",
            {
                "customer_id": "CUS-1001",
                "category": "billing",
                "description": "x",
                "order_id": "ORD-1004",
            },
            "does not belong to customer CUS-1001",
        ),
        ("find_customer", {"email": "nobody@example.com"}, "No customer with email"),
    ],
)
def test_tool_errors_write_nothing(env, tool, args, error):
    assert_fails_without_writing(env, tool, args, error)


def test_cancel_refunds_the_full_total_to_the_original_payment(env):
    db, call = env
    order, _ = call("get_order", order_id="ORD-1002")
    out, failed = call("cancel_order", order_id="ord-1002")  # ids are case-insensitive
    assert (
        not failed and out["refund_amount"] == order["total"] and out["payment_method"] == "paypal"
    )
    refunds = [r for r in db.dump()["refunds"] if r["order_id"] == "ORD-1002"]
    assert refunds == [
        {
            "refund_id": out["refund_id"],
            "order_id": "ORD-1002",
            "payment_id": "PAY-1002",
            "amount": order["total"],
            "reason": "cancellation",
            "created_on": "2025-06-15",
        }
    ]
    again, failed = call("cancel_order", order_id="ORD-1002")
    assert failed and "is cancelled" in again["error"]


def test_partial_then_full_return(env):
    db, call = env
    order, _ = call("get_order", order_id="ORD-1005")  # delivered, two items
    first, second = [i["item_id"] for i in order["items"]]
    out, failed = call("return_items", order_id="ORD-1005", item_ids=[first])
    assert not failed and out["status"] == "delivered"
    dup, failed = call("return_items", order_id="ORD-1005", item_ids=[first])
    assert failed and "already returned" in dup["error"]
    out2, failed = call("return_items", order_id="ORD-1005", item_ids=[second])
    assert not failed and out2["status"] == "returned"
    assert (out["refund_ids"], out2["refund_ids"]) == (
        [f"RF-{first}"],
        [f"RF-{second}"],
    )  # one per item


def test_new_ids_derive_from_the_business_key(env):
    _db, call = env
    a, _ = call("create_ticket", customer_id="CUS-1001", category="other", description="a")
    b, _ = call("create_ticket", customer_id="CUS-1001", category="other", description="b")
    c, _ = call(
        "create_ticket",
        customer_id="CUS-1001",
        category="billing",
        description="c",
        order_id="ORD-1001",
    )
    assert (a["ticket_id"], b["ticket_id"], c["ticket_id"]) == (
        "TCK-CUS-1001-OTHER",
        "TCK-CUS-1001-OTHER-2",
        "TCK-ORD-1001-BILLING",
    )
    listed, _ = call("list_tickets", customer_id="CUS-1001")
    assert [t["ticket_id"] for t in listed["tickets"]] == [
        "TCK-CUS-1001-OTHER",
        "TCK-CUS-1001-OTHER-2",
        "TCK-ORD-1001-BILLING",
    ]
    cancelled, _ = call("cancel_order", order_id="ORD-1002")
    assert cancelled["refund_id"] == "RF-ORD-1002-CANCEL"


def test_readonly_tools_never_write(env):
    assert_calls_write_nothing(
        env,
        [
            ("find_customer", {"email": "MARIA.SANTOS@example.com "}),
            ("get_customer", {"customer_id": "CUS-1001"}),
            ("list_orders", {"customer_id": "CUS-1001"}),
            ("get_order", {"order_id": "ORD-1001"}),
            ("list_tickets", {"customer_id": "CUS-1002"}),
            ("find_customer_by_name", {"full_name": "maria santos", "postal_code": "62000"}),
        ],
    )
    assert {
        "find_customer",
        "find_customer_by_name",
        "get_customer",
        "list_orders",
        "get_order",
        "list_tickets",
    } == READONLY_TOOLS


def test_find_customer_by_name_and_postal_code(env):
    _db, call = env
    found, failed = call("find_customer_by_name", full_name=" Maria Santos", postal_code="62000")
    assert not failed and found["customer_id"] == "CUS-1001"
    work, failed = call(
        "find_customer_by_name", full_name="Maria Santos", postal_code="62100"
    )  # the work address
    assert not failed and work["customer_id"] == "CUS-1001"
    assert_fails_without_writing(
        env,
        "find_customer_by_name",
        {"full_name": "Maria Santos", "postal_code": "99999"},
        "No customer named 'Maria Santos'",
    )
