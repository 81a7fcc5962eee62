"""IT helpdesk tools: plain functions over a session. Each docstring is what the model reads.

Every tool takes the episode's ``Session`` first (hidden from the model) and
returns a JSON-able dict. A tool's own error raises ``ToolFailure``; the server
turns it into ``{"error": "...", "tool": name}`` and writes nothing. Tools
enforce hard facts (a disabled account cannot be reset, a warranty claim needs a
running warranty, a ticket stops at level 3); the policy rules that need
judgement (was identity verified, is this the right approver, did the employee
agree to pay, is the ticket old enough) are the agent's job.
Ids of new rows derive from their business key (``toolkit.keyed_id``), so the
order of the calls never changes them: an access request is
``AR-<employee id>-<system id>``, its grant ``GR-<employee id>-<system id>``, a
replacement order ``RPL-<device id>``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rewardbox.domains.base import ToolFailure
from rewardbox.domains.helpdesk.models import (
    AccessGrant,
    AccessRequest,
    Device,
    Employee,
    IdentityFactor,
    ReplacementOrder,
    System,
    Ticket,
)
from rewardbox.domains.helpdesk.seed import TODAY
from rewardbox.domains.helpdesk.tools_common import _name, _rows
from rewardbox.domains.helpdesk.tools_write import (
    escalate_ticket,
    grant_access,
    order_replacement,
    request_access,
    reset_password,
)
from rewardbox.domains.toolkit import get_row, money


def get_employee(db: Session, employee_id: str) -> dict[str, Any]:
    """Get an employee's record by employee id.

    Args:
        employee_id: the employee id, e.g. "EMP-2001".

    Returns: employee_id, name, email, department, title, manager_id,
    manager_name, account_status (active, locked or disabled), access (the
    system ids the employee can use), access_requests (request_id, system_id,
    status, approver_id, approved_by, requested_on), devices (device_id, kind,
    model, status) and tickets (ticket_id, summary, priority, status).
    Error if the employee id does not exist.
    """
    e = get_row(db, Employee, employee_id, "Employee")
    grants = _rows(db, AccessGrant, e.employee_id, AccessGrant.system_id)
    requests = _rows(db, AccessRequest, e.employee_id, AccessRequest.request_id)
    devices = _rows(db, Device, e.employee_id, Device.device_id)
    tickets = _rows(db, Ticket, e.employee_id, Ticket.ticket_id)
    return {
        "employee_id": e.employee_id,
        "name": e.name,
        "email": e.email,
        "department": e.department,
        "title": e.title,
        "manager_id": e.manager_id,
        "manager_name": _name(db, e.manager_id),
        "account_status": e.account_status,
        "access": [g.system_id for g in grants],
        "access_requests": [
            {
                "request_id": r.request_id,
                "system_id": r.system_id,
                "status": r.status,
                "approver_id": r.approver_id,
                "approved_by": r.approved_by,
                "requested_on": r.requested_on.isoformat(),
            }
            for r in requests
        ],
        "devices": [
            {"device_id": d.device_id, "kind": d.kind, "model": d.model, "status": d.status}
            for d in devices
        ],
        "tickets": [
            {
                "ticket_id": t.ticket_id,
                "summary": t.summary,
                "priority": t.priority,
                "status": t.status,
            }
            for t in tickets
        ],
    }


def verify_identity(
    db: Session, employee_id: str, badge_number: str = "", phone_last4: str = ""
) -> dict[str, Any]:
    """Check an employee's identity with a second factor (needed before a password reset).

    Pass the factor exactly as the employee gave it: the badge number, or the
    last four digits of their registered phone, or both.

    Args:
        employee_id: the employee id, e.g. "EMP-2001".
        badge_number: the badge number the employee gave, e.g. "B-48213", or "".
        phone_last4: the last four digits of the phone the employee gave, e.g. "0417", or "".

    Returns: employee_id and verified (true only if every factor given
    matches the records). Error if the employee does not exist or no factor is given.
    """
    e = get_row(db, Employee, employee_id, "Employee")
    badge, phone = badge_number.strip().upper(), phone_last4.strip()
    if not badge and not phone:
        raise ToolFailure("Give badge_number or phone_last4 to verify an identity")
    factors = db.get(IdentityFactor, e.employee_id)
    checks = []
    if badge:
        checks.append(factors is not None and factors.badge_number.upper() == badge)
    if phone:
        checks.append(factors is not None and factors.phone_last4 == phone)
    return {"employee_id": e.employee_id, "verified": all(checks)}


def list_systems(db: Session) -> dict[str, Any]:
    """List every system employees can request access to.

    Returns systems with system_id, name, access_level (standard or
    restricted), owner_id and owner_name (the system owner). Never fails.
    """
    systems = db.scalars(sa.select(System).order_by(System.system_id))
    return {
        "systems": [
            {
                "system_id": s.system_id,
                "name": s.name,
                "access_level": s.access_level,
                "owner_id": s.owner_id,
                "owner_name": _name(db, s.owner_id),
            }
            for s in systems
        ]
    }


def get_device(db: Session, device_id: str) -> dict[str, Any]:
    """Get one device.

    Args:
        device_id: the device id, e.g. "DEV-6011".

    Returns: device_id, employee_id, kind, model, purchased_on, warranty_end,
    replacement_cost, status (active, replacement_ordered or retired) and its
    replacement orders. Error if the device does not exist.
    """
    d = get_row(db, Device, device_id, "Device")
    orders = db.scalars(
        sa.select(ReplacementOrder)
        .where(ReplacementOrder.device_id == d.device_id)
        .order_by(ReplacementOrder.order_id)
    )
    return {
        "device_id": d.device_id,
        "employee_id": d.employee_id,
        "kind": d.kind,
        "model": d.model,
        "purchased_on": d.purchased_on.isoformat(),
        "warranty_end": d.warranty_end.isoformat(),
        "replacement_cost": money(d.replacement_cost),
        "status": d.status,
        "replacement_orders": [
            {
                "order_id": o.order_id,
                "billing": o.billing,
                "cost": money(o.cost),
                "ordered_on": o.ordered_on.isoformat(),
            }
            for o in orders
        ],
    }


def get_ticket(db: Session, ticket_id: str) -> dict[str, Any]:
    """Get one support ticket.

    Args:
        ticket_id: the ticket id, e.g. "TCK-6011".

    Returns: ticket_id, employee_id, summary, priority (low, normal, high or
    urgent), status (open, resolved or closed), escalation_level (1 to 3),
    opened_on, age_days (days since it was opened) and escalated_on.
    Error if the ticket does not exist.
    """
    t = get_row(db, Ticket, ticket_id, "Ticket")
    return {
        "ticket_id": t.ticket_id,
        "employee_id": t.employee_id,
        "summary": t.summary,
        "priority": t.priority,
        "status": t.status,
        "escalation_level": t.escalation_level,
        "opened_on": t.opened_on.isoformat(),
        "age_days": (TODAY - t.opened_on).days,
        "escalated_on": t.escalated_on.isoformat() if t.escalated_on else None,
    }


TOOLS = (
    get_employee,
    verify_identity,
    reset_password,
    list_systems,
    request_access,
    grant_access,
    get_device,
    order_replacement,
    get_ticket,
    escalate_ticket,
)
READONLY_TOOLS = frozenset(
    {"get_employee", "verify_identity", "list_systems", "get_device", "get_ticket"}
)
