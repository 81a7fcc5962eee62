"""Deterministic seed rows of the IT helpdesk domain (the same in every episode).

The seed is a small company: twelve employees (executives, managers, staff, one
locked and one disabled account), the system catalogue with its owners, access
grants and requests in every status, devices in and out of warranty, and a few
tickets. Tasks add their own employees, devices, requests and tickets through
``data_patch`` (ids ``EMP-2nnn``/``EMP-3nnn``/``EMP-4nnn``, ``DEV-6nnn``,
``AR-6nnn``, ``TCK-6nnn``), so no task depends on another; the seed employees
own the systems, and the other seed rows are distractors.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

TODAY = dt.date(2025, 3, 10)

SYSTEMS: tuple[tuple[str, str, str, str], ...] = (
    ("SYS-MAIL", "Email and Calendar", "standard", "EMP-1002"),
    ("SYS-WIKI", "Company Wiki", "standard", "EMP-1010"),
    ("SYS-EXP", "Expense Portal", "standard", "EMP-1003"),
    ("SYS-VPN", "Remote VPN", "standard", "EMP-1010"),
    ("SYS-BI", "Analytics Dashboards", "standard", "EMP-1004"),
    ("SYS-CRM", "Sales CRM", "restricted", "EMP-1006"),
    ("SYS-GIT", "Source Code Repository", "restricted", "EMP-1004"),
    ("SYS-HRIS", "HR Records", "restricted", "EMP-1005"),
    ("SYS-PAY", "Payroll", "restricted", "EMP-1003"),
    ("SYS-PROD", "Production Servers", "restricted", "EMP-1002"),
    ("SYS-LEDGER", "General Ledger", "restricted", "EMP-1003"),
)
"""(system_id, name, access_level, owner_id) of every system; shared with the task generator."""

DEVICE_MODELS: tuple[tuple[str, str, str], ...] = (
    ("laptop", "ThinkPad T14", "949.00"),
    ("laptop", "MacBook Pro 14", "989.50"),
    ("laptop", "Dell Latitude 7440", "899.90"),
    ("phone", "iPhone 15", "729.00"),
    ("phone", "Pixel 8", "599.00"),
    ("monitor", "Dell U2723 monitor", "379.99"),
    ("monitor", "LG 27UL550 monitor", "289.00"),
    ("tablet", "iPad Air", "599.50"),
    ("headset", "Jabra Evolve2 65 headset", "189.95"),
)
"""(kind, model, replacement cost) of every device model; shared with the task generator."""

_EMPLOYEES = (
    ("EMP-1001", "Helen Park", "Executive", "Chief Information Officer", None, "active"),
    ("EMP-1002", "Marcus Bell", "IT", "IT Operations Manager", "EMP-1001", "active"),
    ("EMP-1003", "Priya Raman", "Finance", "Finance Director", "EMP-1001", "active"),
    ("EMP-1004", "Tom Alvarez", "Engineering", "Engineering Manager", "EMP-1001", "active"),
    ("EMP-1005", "Grace Liu", "HR", "HR Director", "EMP-1001", "active"),
    ("EMP-1006", "Sam Okoye", "Sales", "Sales Director", "EMP-1001", "active"),
    ("EMP-1007", "Nina Berg", "Engineering", "Software Engineer", "EMP-1004", "active"),
    ("EMP-1008", "Leo Martins", "Finance", "Accountant", "EMP-1003", "active"),
    ("EMP-1009", "Ava Schmidt", "Sales", "Account Executive", "EMP-1006", "active"),
    ("EMP-1010", "Raj Patel", "IT", "Systems Administrator", "EMP-1002", "active"),
    ("EMP-1011", "Julia Novak", "HR", "HR Specialist", "EMP-1005", "locked"),
    ("EMP-1012", "Ken Ito", "Sales", "Sales Associate", "EMP-1006", "disabled"),
)

_REQUESTS = (
    ("AR-0001", "EMP-1007", "SYS-PROD", "EMP-1002", "pending_approval", None, 4),
    ("AR-0002", "EMP-1008", "SYS-BI", "EMP-1003", "approved", "EMP-1003", 6),
    ("AR-0003", "EMP-1009", "SYS-LEDGER", "EMP-1003", "rejected", None, 12),
    ("AR-0004", "EMP-1010", "SYS-GIT", "EMP-1004", "granted", "EMP-1004", 20),
)

_TICKETS = (
    ("TCK-0001", "EMP-1007", "Laptop fan is very loud", "low", "open", 1, 9),
    ("TCK-0002", "EMP-1009", "Cannot sync calendar on phone", "normal", "open", 1, 2),
    ("TCK-0003", "EMP-1008", "Expense Portal shows an error on upload", "high", "open", 2, 5),
    ("TCK-0004", "EMP-1011", "Locked out after holiday", "urgent", "resolved", 1, 1),
    ("TCK-0005", "EMP-1006", "CRM export is slow", "normal", "closed", 1, 30),
)


def day(days_ago: int) -> str:
    """ISO date ``days_ago`` days before TODAY (negative: in the future)."""
    return (TODAY - dt.timedelta(days=days_ago)).isoformat()


def _people(rows: dict[str, list[dict[str, Any]]]) -> None:
    for i, (eid, name, dept, title, manager, status) in enumerate(_EMPLOYEES):
        first, last = name.lower().split()
        rows["employees"].append(
            {
                "employee_id": eid,
                "name": name,
                "email": f"{first}.{last}@northwind.test",
                "department": dept,
                "title": title,
                "manager_id": manager,
                "account_status": status,
                "password_reset_on": day(40 + 11 * i),
            }
        )
        rows["identity_factors"].append(
            {
                "employee_id": eid,
                "badge_number": f"B-{51200 + 37 * i}",
                "phone_last4": f"{3100 + 173 * i:04d}"[-4:],
            }
        )
        kind, model, cost = DEVICE_MODELS[i % len(DEVICE_MODELS)]
        bought = 200 + 97 * i
        rows["devices"].append(
            {
                "device_id": f"DEV-{eid[4:]}",
                "employee_id": eid,
                "kind": kind,
                "model": model,
                "purchased_on": day(bought),
                "warranty_end": day(bought - 730),
                "replacement_cost": cost,
                "status": "replacement_ordered" if eid == "EMP-1009" else "active",
            }
        )


def seed_rows() -> dict[str, list[dict[str, Any]]]:
    """The seed rows, ``{table: [row, ...]}`` (plain JSON-able values, deterministic)."""
    rows: dict[str, list[dict[str, Any]]] = {
        t: []
        for t in (
            "employees",
            "identity_factors",
            "systems",
            "access_requests",
            "access_grants",
            "devices",
            "replacement_orders",
            "tickets",
        )
    }
    _people(rows)
    _access(rows)
    _support(rows)
    return rows


def _access(rows: dict[str, list[dict[str, Any]]]) -> None:
    """The systems, access requests and access grants of ``seed_rows``."""
    for sid, name, level, owner in SYSTEMS:
        rows["systems"].append(
            {"system_id": sid, "name": name, "access_level": level, "owner_id": owner}
        )
    for rid, eid, sid, approver, status, approved_by, ago in _REQUESTS:
        rows["access_requests"].append(
            {
                "request_id": rid,
                "employee_id": eid,
                "system_id": sid,
                "approver_id": approver,
                "status": status,
                "approved_by": approved_by,
                "requested_on": day(ago),
            }
        )
    grants = [(eid, sid, None) for eid, *_ in _EMPLOYEES[:11] for sid in ("SYS-MAIL", "SYS-WIKI")]
    grants += [
        ("EMP-1010", "SYS-GIT", "AR-0004"),
        ("EMP-1008", "SYS-EXP", None),
        ("EMP-1009", "SYS-CRM", None),
    ]
    for n, (eid, sid, rid) in enumerate(grants, start=1):
        rows["access_grants"].append(
            {
                "grant_id": f"GR-{n:04d}",
                "employee_id": eid,
                "system_id": sid,
                "request_id": rid,
                "granted_on": day(100 + n),
            }
        )


def _support(rows: dict[str, list[dict[str, Any]]]) -> None:
    """The replacement orders and tickets of ``seed_rows``."""
    rows["replacement_orders"].append(
        {
            "order_id": "RPL-0001",
            "device_id": "DEV-1009",
            "employee_id": "EMP-1009",
            "billing": "department",
            "cost": "189.95",
            "ordered_on": day(3),
        }
    )
    for tid, eid, summary, priority, status, level, ago in _TICKETS:
        rows["tickets"].append(
            {
                "ticket_id": tid,
                "employee_id": eid,
                "summary": summary,
                "priority": priority,
                "status": status,
                "escalation_level": level,
                "opened_on": day(ago),
                "escalated_on": day(ago - 1) if level > 1 else None,
            }
        )
