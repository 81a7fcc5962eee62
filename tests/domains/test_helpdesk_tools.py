"""Helpdesk tool behaviour: hard rules enforced, ids deterministic, failures write nothing."""

from __future__ import annotations

import pytest

from rewardbox.domains.helpdesk.domain import DOMAIN  # the ``env`` fixture serves it
from rewardbox.domains.helpdesk.tools import READONLY_TOOLS

from .conftest import assert_calls_write_nothing, assert_fails_without_writing

# seed facts (seed.py): EMP-1011 is locked, badge B-51570, phone 4830; EMP-1012 is disabled;
# DEV-1001 is in warranty (949.00), DEV-1007 is out of warranty, DEV-1009 has a replacement ordered.


def _row(db, table, key, value):
    return next(r for r in db.dump()[table] if r[key] == value)


@pytest.mark.parametrize(
    ("tool", "args", "error"),
    [
        ("get_employee", {"employee_id": "EMP-0000"}, "Employee 'EMP-0000' not found"),
        ("verify_identity", {"employee_id": "EMP-1011"}, "Give badge_number or phone_last4"),
        ("reset_password", {"employee_id": "EMP-1012"}, "EMP-1012 is disabled"),
        (
            "request_access",
            {"employee_id": "EMP-1007", "system_id": "SYS-BI", "approver_id": "EMP-1007"},
            "cannot approve their own",
        ),
        (
            "request_access",
            {"employee_id": "EMP-1008", "system_id": "SYS-EXP", "approver_id": "EMP-1003"},
            "EMP-1008 already has access to SYS-EXP",
        ),
        (
            "request_access",
            {"employee_id": "EMP-1007", "system_id": "SYS-PROD", "approver_id": "EMP-1002"},
            "Request AR-0001 for SYS-PROD is already open (pending_approval)",
        ),
        (
            "request_access",
            {"employee_id": "EMP-1007", "system_id": "SYS-NOPE", "approver_id": "EMP-1002"},
            "System 'SYS-NOPE' not found",
        ),
        ("grant_access", {"request_id": "AR-0003"}, "AR-0003 is rejected"),
        ("grant_access", {"request_id": "AR-0004"}, "AR-0004 is granted"),
        (
            "order_replacement",
            {"device_id": "DEV-1007", "billing": "warranty"},
            "The warranty of DEV-1007 ended on",
        ),
        (
            "order_replacement",
            {"device_id": "DEV-1009", "billing": "department"},
            "DEV-1009 is replacement_ordered",
        ),
        (
            "order_replacement",
            {"device_id": "DEV-1001", "billing": "free"},
            "Input validation failed: billing",
        ),
        ("escalate_ticket", {"ticket_id": "TCK-0004"}, "TCK-0004 is resolved"),
        ("escalate_ticket", {"ticket_id": "TCK-0005"}, "TCK-0005 is closed"),
    ],
)
def test_tool_errors_write_nothing(env, tool, args, error):
    assert_fails_without_writing(env, tool, args, error)


def test_verify_identity_needs_every_given_factor_to_match(env):
    _db, call = env
    assert (
        call("verify_identity", employee_id="EMP-1011", badge_number="b-51570")[0]["verified"]
        is True
    )
    assert (
        call("verify_identity", employee_id="emp-1011", phone_last4="4830")[0]["verified"] is True
    )
    assert (
        call("verify_identity", employee_id="EMP-1011", badge_number="B-51571")[0]["verified"]
        is False
    )
    assert call(
        "verify_identity", employee_id="EMP-1011", phone_last4="4830", badge_number="B-00000"
    )[0] == {"employee_id": "EMP-1011", "verified": False}
    assert (
        call("verify_identity", employee_id="EMP-1010", badge_number="B-51570")[0]["verified"]
        is False
    )


def test_reset_password_unlocks_and_dates_the_reset(env):
    db, call = env
    out, failed = call("reset_password", employee_id="EMP-1011")
    assert not failed and out == {
        "employee_id": "EMP-1011",
        "account_status": "active",
        "password_reset_on": "2025-03-10",
        "reset_link_sent_to": "julia.novak@northwind.test",
    }
    row = _row(db, "employees", "employee_id", "EMP-1011")
    assert row["account_status"] == "active" and row["password_reset_on"] == "2025-03-10"


def test_request_then_grant_with_ids_from_the_business_key(env):
    db, call = env
    req, failed = call(
        "request_access", employee_id="EMP-1007", system_id="sys-bi", approver_id="EMP-1004"
    )
    assert not failed and req == {
        "request_id": "AR-EMP-1007-SYS-BI",
        "status": "pending_approval",
        "approver_id": "EMP-1004",
        "approver_name": "Tom Alvarez",
    }
    again, failed = call(
        "request_access", employee_id="EMP-1007", system_id="SYS-BI", approver_id="EMP-1004"
    )
    assert failed and "AR-EMP-1007-SYS-BI" in again["error"]
    grant, failed = call("grant_access", request_id="AR-EMP-1007-SYS-BI")
    assert not failed and grant == {
        "grant_id": "GR-EMP-1007-SYS-BI",
        "employee_id": "EMP-1007",
        "system_id": "SYS-BI",
        "request_status": "granted",
    }
    assert _row(db, "access_requests", "request_id", "AR-EMP-1007-SYS-BI")["status"] == "granted"
    assert "SYS-BI" in call("get_employee", employee_id="EMP-1007")[0]["access"]


def test_replacement_billing_sets_the_cost(env):
    db, call = env
    free, failed = call("order_replacement", device_id="DEV-1001", billing="warranty")
    assert not failed and (free["order_id"], free["cost"], free["device_status"]) == (
        "RPL-DEV-1001",
        "0.00",
        "replacement_ordered",
    )
    device, _ = call("get_device", device_id="DEV-1007")
    paid, failed = call("order_replacement", device_id="DEV-1007", billing="department")
    assert (
        not failed
        and paid["order_id"] == "RPL-DEV-1007"
        and paid["cost"] == device["replacement_cost"]
    )
    assert _row(db, "replacement_orders", "order_id", "RPL-DEV-1007") == {
        "order_id": "RPL-DEV-1007",
        "device_id": "DEV-1007",
        "employee_id": "EMP-1007",
        "billing": "department",
        "cost": device["replacement_cost"],
        "ordered_on": "2025-03-10",
    }
    assert (
        call("get_device", device_id="DEV-1001")[0]["replacement_orders"][0]["order_id"]
        == "RPL-DEV-1001"
    )


def test_escalation_climbs_one_level_and_stops_at_three(env):
    db, call = env
    ticket, _ = call("get_ticket", ticket_id="TCK-0003")
    assert (ticket["priority"], ticket["escalation_level"], ticket["age_days"]) == ("high", 2, 5)
    out, failed = call("escalate_ticket", ticket_id="TCK-0003")
    assert not failed and out == {
        "ticket_id": "TCK-0003",
        "escalation_level": 3,
        "escalated_on": "2025-03-10",
    }
    top, failed = call("escalate_ticket", ticket_id="TCK-0003")
    assert failed and "highest level (3)" in top["error"]
    assert _row(db, "tickets", "ticket_id", "TCK-0003")["escalation_level"] == 3


def test_readonly_tools_never_write(env):
    assert_calls_write_nothing(
        env,
        [
            ("get_employee", {"employee_id": "EMP-1008"}),
            ("verify_identity", {"employee_id": "EMP-1011", "badge_number": "B-51570"}),
            ("list_systems", {}),
            ("get_device", {"device_id": "DEV-1001"}),
            ("get_ticket", {"ticket_id": "TCK-0001"}),
        ],
    )
    assert {
        "get_employee",
        "verify_identity",
        "list_systems",
        "get_device",
        "get_ticket",
    } == READONLY_TOOLS
    assert DOMAIN.readonly_tools == READONLY_TOOLS


def test_lookups_show_what_the_policy_needs_and_hide_the_factors(env):
    _db, call = env
    emp, _ = call("get_employee", employee_id="EMP-1008")
    assert (emp["manager_id"], emp["manager_name"]) == ("EMP-1003", "Priya Raman")
    assert emp["access_requests"][0] == {
        "request_id": "AR-0002",
        "system_id": "SYS-BI",
        "status": "approved",
        "approver_id": "EMP-1003",
        "approved_by": "EMP-1003",
        "requested_on": "2025-03-04",
    }
    systems = {s["system_id"]: s for s in call("list_systems")[0]["systems"]}
    assert systems["SYS-PAY"] == {
        "system_id": "SYS-PAY",
        "name": "Payroll",
        "access_level": "restricted",
        "owner_id": "EMP-1003",
        "owner_name": "Priya Raman",
    }
    assert "B-51570" not in str(call("get_employee", employee_id="EMP-1011")[0])
