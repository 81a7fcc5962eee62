"""Hotel tool behaviour: hard rules enforced, fees by timing, ids deterministic, failures write nothing."""

from __future__ import annotations

import pytest

from rewardbox.domains.base import ToolRunner
from rewardbox.domains.database import EpisodeDatabase
from rewardbox.domains.hotel.domain import DOMAIN  # the ``env`` fixture serves it
from rewardbox.domains.hotel.tools import READONLY_TOOLS

from .conftest import assert_calls_write_nothing, assert_fails_without_writing

# Seed facts used below (TODAY = 2025-09-10):
#   BK-1001 TRV-1001 (standard, 35 credits) confirmed, RT-LIS-STD 118.00 x 1, check-in 2025-09-11 (fee)
#   BK-1003 TRV-1002 checked_in; BK-1002 TRV-1001 completed; BK-1005 cancelled
#   BK-1004 TRV-1002 (silver, 120 credits) confirmed, RT-SIN-STD 176.00 x 4, check-in 2025-09-14 (free)
#   BK-1001 has a pending request for RT-LIS-SUP; BK-1004 an approved one for RT-SIN-DLX


def _rows(db, table, **match):
    return [r for r in db.dump()[table] if all(r[k] == v for k, v in match.items())]


@pytest.mark.parametrize(
    ("tool", "args", "error"),
    [
        (
            "cancel_booking",
            {"booking_id": "BK-1003"},
            "Booking BK-1003 is checked_in; only confirmed bookings",
        ),
        ("cancel_booking", {"booking_id": "BK-1005"}, "is cancelled"),
        ("cancel_booking", {"booking_id": "BK-0000"}, "Booking 'BK-0000' not found"),
        (
            "change_room",
            {"booking_id": "BK-1001", "room_type_id": "RT-BER-STD"},
            "not a room type of hotel HTL-LIS",
        ),
        (
            "change_room",
            {"booking_id": "BK-1001", "room_type_id": "RT-LIS-STD"},
            "already has room type",
        ),
        ("change_room", {"booking_id": "BK-1002", "room_type_id": "RT-BER-STD"}, "is completed"),
        (
            "request_approval",
            {"booking_id": "BK-1001", "room_type_id": "RT-LIS-SUP", "reason": "x"},
            "APR-0001 for RT-LIS-SUP is already pending",
        ),
        ("redeem_credits", {"booking_id": "BK-1001", "credits": 36}, "has only 35 credits"),
        ("redeem_credits", {"booking_id": "BK-1001", "credits": 0}, "at least 1"),
        (
            "redeem_credits",
            {"booking_id": "BK-1003", "credits": 5},
            "only confirmed bookings can redeem",
        ),
        (
            "award_credits",
            {"booking_id": "BK-1001", "credits": 20, "reason": "x"},
            "only for checked_in",
        ),
        ("list_room_types", {"hotel_id": "HTL-XXX"}, "Hotel 'HTL-XXX' not found"),
        ("find_traveller", {"email": "nobody@northwind.test"}, "No traveller with email"),
    ],
)
def test_tool_errors_write_nothing(env, tool, args, error):
    assert_fails_without_writing(env, tool, args, error)


def test_cancellation_fee_depends_on_days_to_check_in(env):
    db, call = env
    late, failed = call(
        "cancel_booking", booking_id="bk-1001"
    )  # check-in tomorrow: one night's fee
    assert not failed and late == {
        "booking_id": "BK-1001",
        "status": "cancelled",
        "fee": "118.00",
        "refund_id": None,
        "refund_amount": "0.00",
    }
    assert _rows(db, "refunds", booking_id="BK-1001") == []
    early, failed = call("cancel_booking", booking_id="BK-1004")  # 4 days ahead: free
    assert not failed and early["fee"] == "0.00" and early["refund_amount"] == "704.00"
    assert _rows(db, "refunds", booking_id="BK-1004") == [
        {
            "refund_id": early["refund_id"],
            "booking_id": "BK-1004",
            "payment_id": "PAY-1004",
            "amount": "704.00",
            "reason": "cancellation",
            "created_on": "2025-09-10",
        }
    ]


def test_fee_window_boundary_with_a_patched_booking():
    patch = {
        "bookings": [{"booking_id": "BK-1004", "check_in": "2025-09-12", "check_out": "2025-09-16"}]
    }
    db = EpisodeDatabase(DOMAIN, patch)
    try:
        out, failed = ToolRunner(DOMAIN).invoke(
            db.engine, "cancel_booking", {"booking_id": "BK-1004"}
        )
        assert not failed and (out["fee"], out["refund_amount"]) == (
            "176.00",
            "528.00",
        )  # 2 days: fee
    finally:
        db.dispose()


def test_change_room_reprices_and_moves_money(env):
    db, call = env
    up, failed = call(
        "change_room", booking_id="BK-1004", room_type_id="RT-SIN-DLX"
    )  # 4 nights, 176 -> 238
    assert not failed and (up["total"], up["extra_charge"]) == ("952.00", "248.00")
    booking = _rows(db, "bookings", booking_id="BK-1004")[0]
    assert (booking["room_type_id"], booking["nightly_rate"], booking["total"]) == (
        "RT-SIN-DLX",
        "238.00",
        "952.00",
    )
    assert _rows(db, "payments", payment_id=up["payment_id"])[0]["amount"] == "248.00"
    down, failed = call("change_room", booking_id="BK-1004", room_type_id="RT-SIN-STD")
    assert not failed and (down["total"], down["refund_amount"]) == ("704.00", "248.00")
    cancelled, _ = call("cancel_booking", booking_id="BK-1004")
    assert cancelled["refund_amount"] == "704.00"  # payments minus refunds


def test_request_approval_routes_to_the_manager_and_leaves_the_booking(env):
    db, call = env
    before = _rows(db, "bookings", booking_id="BK-1001")
    out, failed = call(
        "request_approval", booking_id="BK-1001", room_type_id="RT-LIS-STE", reason="meetings"
    )
    assert not failed and out == {
        "approval_id": "APR-BK-1001-RT-LIS-STE",
        "booking_id": "BK-1001",
        "requested_room_type_id": "RT-LIS-STE",
        "manager_id": "MGR-1001",
        "status": "pending",
    }
    assert _rows(db, "bookings", booking_id="BK-1001") == before
    second, _ = call(
        "request_approval", booking_id="BK-1004", room_type_id="RT-SIN-CLB", reason="x"
    )
    assert second["approval_id"] == "APR-BK-1004-RT-SIN-CLB"  # derived from booking and room type
    listed, _ = call("get_booking", booking_id="BK-1001")
    assert [a["status"] for a in listed["approval_requests"]] == ["pending", "pending"]


def test_credits_redeem_and_award(env):
    db, call = env
    out, failed = call("redeem_credits", booking_id="BK-1004", credits=40)
    assert not failed and (out["refund_amount"], out["credit_balance"]) == ("40.00", 80)
    assert _rows(db, "travellers", traveller_id="TRV-1002")[0]["credit_balance"] == 80
    booking, _ = call("get_booking", booking_id="BK-1004")
    assert (
        booking["credits"][-1]["kind"] == "redeemed"
        and booking["refunds"][-1]["reason"] == "credits"
    )
    award, failed = call("award_credits", booking_id="BK-1003", credits=40, reason="noisy room")
    assert not failed and award["credit_balance"] == 120
    tx = _rows(db, "credit_transactions", tx_id=award["tx_id"])[0]
    assert tx["kind"] == "goodwill" and "reason" not in tx  # free text is ungraded


def test_readonly_tools_never_write(env):
    _db, call = env
    assert_calls_write_nothing(
        env,
        [
            ("find_traveller", {"email": " MARIA.SANTOS@northwind.test"}),
            ("list_bookings", {"traveller_id": "TRV-1001"}),
            ("get_booking", {"booking_id": "BK-1001"}),
            ("list_room_types", {"hotel_id": "htl-lis"}),
        ],
    )
    assert {"find_traveller", "list_bookings", "get_booking", "list_room_types"} == READONLY_TOOLS
    rooms, _ = call("list_room_types", hotel_id="HTL-LIS")
    assert [r["nightly_rate"] for r in rooms["room_types"]] == ["118.00", "146.00", "215.00"]
