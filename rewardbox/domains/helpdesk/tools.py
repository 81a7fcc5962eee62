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

from decimal import Decimal
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rewardbox.domains.base import ToolFailure
from rewardbox.domains.helpdesk.models import (
    MAX_ESCALATION_LEVEL,
    AccessGrant,
    AccessRequest,
    AuditEvent,
    Device,
    Employee,
    IdentityFactor,
    ReplacementOrder,
    System,
    Ticket,
)
from rewardbox.domains.helpdesk.seed import TODAY
from rewardbox.domains.toolkit import get_row, keyed_id, money

OPEN_REQUEST_STATUSES = ("pending_approval", "approved")


def _audit(db: Session, tool: str, **detail: Any) -> None:
    db.add(AuditEvent.entry(tool, detail))


def _name(db: Session, employee_id: str | None) -> str | None:
    person = db.get(Employee, employee_id) if employee_id else None
    return person.name if person else None


def _rows(db: Session, model: Any, employee_id: str, order: Any) -> list[Any]:
    return list(db.scalars(sa.select(model).where(model.employee_id == employee_id).order_by(order)))


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
        "employee_id": e.employee_id, "name": e.name, "email": e.email, "department": e.department,
        "title": e.title, "manager_id": e.manager_id, "manager_name": _name(db, e.manager_id),
        "account_status": e.account_status, "access": [g.system_id for g in grants],
        "access_requests": [{"request_id": r.request_id, "system_id": r.system_id, "status": r.status,
                             "approver_id": r.approver_id, "approved_by": r.approved_by,
                             "requested_on": r.requested_on.isoformat()} for r in requests],
        "devices": [{"device_id": d.device_id, "kind": d.kind, "model": d.model, "status": d.status}
                    for d in devices],
        "tickets": [{"ticket_id": t.ticket_id, "summary": t.summary, "priority": t.priority, "status": t.status}
                    for t in tickets],
    }


def verify_identity(db: Session, employee_id: str, badge_number: str = "", phone_last4: str = "") -> dict[str, Any]:
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


def reset_password(db: Session, employee_id: str) -> dict[str, Any]:
    """Reset an employee's password and unlock the account; a reset link goes to their email.

    Only after verify_identity returned verified true for this employee (see policy).

    Args:
        employee_id: the employee id, e.g. "EMP-2001".

    Returns: employee_id, account_status "active", password_reset_on and
    reset_link_sent_to. Error if the employee does not exist or the account is disabled.
    """
    e = get_row(db, Employee, employee_id, "Employee")
    if e.account_status == "disabled":
        raise ToolFailure(f"Account of {e.employee_id} is disabled; passwords of disabled accounts cannot be reset")
    e.account_status, e.password_reset_on = "active", TODAY
    _audit(db, "reset_password", employee_id=e.employee_id)
    return {"employee_id": e.employee_id, "account_status": e.account_status,
            "password_reset_on": TODAY.isoformat(), "reset_link_sent_to": e.email}


def list_systems(db: Session) -> dict[str, Any]:
    """List every system employees can request access to.

    Returns systems with system_id, name, access_level (standard or
    restricted), owner_id and owner_name (the system owner). Never fails.
    """
    systems = db.scalars(sa.select(System).order_by(System.system_id))
    return {"systems": [{"system_id": s.system_id, "name": s.name, "access_level": s.access_level,
                         "owner_id": s.owner_id, "owner_name": _name(db, s.owner_id)} for s in systems]}


def request_access(db: Session, employee_id: str, system_id: str, approver_id: str) -> dict[str, Any]:
    """Open an access request for an employee and route it to an approver.

    The request waits with status "pending_approval" until the approver
    decides; it does not give access yet.

    Args:
        employee_id: the employee who needs access, e.g. "EMP-2001".
        system_id: the system, e.g. "SYS-VPN" (see list_systems).
        approver_id: the employee id of the approver the policy requires, e.g. "EMP-3001".

    Returns: request_id, status "pending_approval", approver_id and approver_name.
    Error if an id does not exist, the approver is the employee themself, the
    employee already has access, or an open request for the system exists.
    """
    e = get_row(db, Employee, employee_id, "Employee")
    s = get_row(db, System, system_id, "System")
    approver = get_row(db, Employee, approver_id, "Approver")
    if approver.employee_id == e.employee_id:
        raise ToolFailure("An employee cannot approve their own access request")
    if db.scalars(sa.select(AccessGrant).where(AccessGrant.employee_id == e.employee_id,
                                               AccessGrant.system_id == s.system_id)).first():
        raise ToolFailure(f"{e.employee_id} already has access to {s.system_id}")
    open_request = db.scalars(sa.select(AccessRequest).where(
        AccessRequest.employee_id == e.employee_id, AccessRequest.system_id == s.system_id,
        AccessRequest.status.in_(OPEN_REQUEST_STATUSES))).first()
    if open_request is not None:
        raise ToolFailure(
            f"Request {open_request.request_id} for {s.system_id} is already open ({open_request.status})")
    request = AccessRequest(request_id=keyed_id(db, AccessRequest.request_id, f"AR-{e.employee_id}-{s.system_id}"), employee_id=e.employee_id,
                            system_id=s.system_id, approver_id=approver.employee_id, status="pending_approval",
                            approved_by=None, requested_on=TODAY)
    db.add(request)
    _audit(db, "request_access", request_id=request.request_id)
    return {"request_id": request.request_id, "status": request.status, "approver_id": approver.employee_id,
            "approver_name": approver.name}


def grant_access(db: Session, request_id: str) -> dict[str, Any]:
    """Give an employee access to a system for an approved access request.

    Only when the approval is recorded by the approver the policy requires.

    Args:
        request_id: the access request id, e.g. "AR-6011".

    Returns: grant_id, employee_id, system_id and the request status "granted".
    Error if the request does not exist or was already rejected or granted.
    """
    r = get_row(db, AccessRequest, request_id, "Access request")
    if r.status in ("rejected", "granted"):
        raise ToolFailure(f"Request {r.request_id} is {r.status}; it cannot be granted")
    grant = AccessGrant(grant_id=keyed_id(db, AccessGrant.grant_id, f"GR-{r.employee_id}-{r.system_id}"), employee_id=r.employee_id,
                        system_id=r.system_id, request_id=r.request_id, granted_on=TODAY)
    db.add(grant)
    r.status = "granted"
    _audit(db, "grant_access", request_id=r.request_id, grant_id=grant.grant_id)
    return {"grant_id": grant.grant_id, "employee_id": r.employee_id, "system_id": r.system_id,
            "request_status": r.status}


def get_device(db: Session, device_id: str) -> dict[str, Any]:
    """Get one device.

    Args:
        device_id: the device id, e.g. "DEV-6011".

    Returns: device_id, employee_id, kind, model, purchased_on, warranty_end,
    replacement_cost, status (active, replacement_ordered or retired) and its
    replacement orders. Error if the device does not exist.
    """
    d = get_row(db, Device, device_id, "Device")
    orders = db.scalars(sa.select(ReplacementOrder).where(ReplacementOrder.device_id == d.device_id)
                        .order_by(ReplacementOrder.order_id))
    return {"device_id": d.device_id, "employee_id": d.employee_id, "kind": d.kind, "model": d.model,
            "purchased_on": d.purchased_on.isoformat(), "warranty_end": d.warranty_end.isoformat(),
            "replacement_cost": money(d.replacement_cost), "status": d.status,
            "replacement_orders": [{"order_id": o.order_id, "billing": o.billing, "cost": money(o.cost),
                                    "ordered_on": o.ordered_on.isoformat()} for o in orders]}


def order_replacement(db: Session, device_id: str, billing: Literal["warranty", "department"]) -> dict[str, Any]:
    """Order a replacement for a broken, lost or failing device.

    billing "warranty" is free and only possible while the warranty runs
    (warranty_end is today or later). billing "department" charges the
    replacement_cost to the employee's department (see policy).

    Args:
        device_id: the device id, e.g. "DEV-6011".
        billing: "warranty" or "department".

    Returns: order_id, device_id, billing, cost and the device status
    "replacement_ordered". Error if the device does not exist, is not active
    (a replacement was already ordered, or it is retired), or billing is
    "warranty" after the warranty ended.
    """
    d = get_row(db, Device, device_id, "Device")
    if d.status != "active":
        raise ToolFailure(f"Device {d.device_id} is {d.status}; only active devices can be replaced")
    if billing == "warranty" and d.warranty_end < TODAY:
        raise ToolFailure(f"The warranty of {d.device_id} ended on {d.warranty_end.isoformat()}")
    cost = Decimal("0") if billing == "warranty" else d.replacement_cost
    order = ReplacementOrder(order_id=keyed_id(db, ReplacementOrder.order_id, f"RPL-{d.device_id}"), device_id=d.device_id,
                             employee_id=d.employee_id, billing=billing, cost=cost, ordered_on=TODAY)
    db.add(order)
    d.status = "replacement_ordered"
    _audit(db, "order_replacement", device_id=d.device_id, order_id=order.order_id)
    return {"order_id": order.order_id, "device_id": d.device_id, "billing": billing, "cost": money(cost),
            "device_status": d.status}


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
    return {"ticket_id": t.ticket_id, "employee_id": t.employee_id, "summary": t.summary, "priority": t.priority,
            "status": t.status, "escalation_level": t.escalation_level, "opened_on": t.opened_on.isoformat(),
            "age_days": (TODAY - t.opened_on).days,
            "escalated_on": t.escalated_on.isoformat() if t.escalated_on else None}


def escalate_ticket(db: Session, ticket_id: str) -> dict[str, Any]:
    """Escalate an open ticket by one level (1 -> 2 -> 3).

    Check the escalation rules of the policy (priority and age) first.

    Args:
        ticket_id: the ticket id, e.g. "TCK-6011".

    Returns: ticket_id, the new escalation_level and escalated_on. Error if the
    ticket does not exist, is not open, or is already at level 3.
    """
    t = get_row(db, Ticket, ticket_id, "Ticket")
    if t.status != "open":
        raise ToolFailure(f"Ticket {t.ticket_id} is {t.status}; only open tickets can be escalated")
    if t.escalation_level >= MAX_ESCALATION_LEVEL:
        raise ToolFailure(f"Ticket {t.ticket_id} is already at the highest level ({MAX_ESCALATION_LEVEL})")
    t.escalation_level += 1
    t.escalated_on = TODAY
    _audit(db, "escalate_ticket", ticket_id=t.ticket_id, level=t.escalation_level)
    return {"ticket_id": t.ticket_id, "escalation_level": t.escalation_level, "escalated_on": TODAY.isoformat()}


TOOLS = (get_employee, verify_identity, reset_password, list_systems, request_access, grant_access,
         get_device, order_replacement, get_ticket, escalate_ticket)
READONLY_TOOLS = frozenset({"get_employee", "verify_identity", "list_systems", "get_device", "get_ticket"})
