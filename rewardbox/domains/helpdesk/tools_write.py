"""Helpdesk write tools: password reset, access requests and grants, replacements, escalation (``tools`` lists them).

Each docstring is what the model reads; the docstring of ``tools`` says how a tool reports an
error and how the ids of new rows are made.
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
    Device,
    Employee,
    ReplacementOrder,
    System,
    Ticket,
)
from rewardbox.domains.helpdesk.seed import TODAY
from rewardbox.domains.helpdesk.tools_common import OPEN_REQUEST_STATUSES, _audit
from rewardbox.domains.toolkit import get_row, keyed_id, money


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
        raise ToolFailure(
            f"Account of {e.employee_id} is disabled; passwords of disabled accounts cannot be reset"
        )
    e.account_status, e.password_reset_on = "active", TODAY
    _audit(db, "reset_password", employee_id=e.employee_id)
    return {
        "employee_id": e.employee_id,
        "account_status": e.account_status,
        "password_reset_on": TODAY.isoformat(),
        "reset_link_sent_to": e.email,
    }


def request_access(
    db: Session, employee_id: str, system_id: str, approver_id: str
) -> dict[str, Any]:
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
    _refuse_duplicate_access(db, e, s)
    request = AccessRequest(
        request_id=keyed_id(db, AccessRequest.request_id, f"AR-{e.employee_id}-{s.system_id}"),
        employee_id=e.employee_id,
        system_id=s.system_id,
        approver_id=approver.employee_id,
        status="pending_approval",
        approved_by=None,
        requested_on=TODAY,
    )
    db.add(request)
    _audit(db, "request_access", request_id=request.request_id)
    return {
        "request_id": request.request_id,
        "status": request.status,
        "approver_id": approver.employee_id,
        "approver_name": approver.name,
    }


def _refuse_duplicate_access(db: Session, e: Employee, s: System) -> None:
    """``ToolFailure`` when the employee already has access to the system or an open request for it."""
    if db.scalars(
        sa.select(AccessGrant).where(
            AccessGrant.employee_id == e.employee_id, AccessGrant.system_id == s.system_id
        )
    ).first():
        raise ToolFailure(f"{e.employee_id} already has access to {s.system_id}")
    open_request = db.scalars(
        sa.select(AccessRequest).where(
            AccessRequest.employee_id == e.employee_id,
            AccessRequest.system_id == s.system_id,
            AccessRequest.status.in_(OPEN_REQUEST_STATUSES),
        )
    ).first()
    if open_request is not None:
        raise ToolFailure(
            f"Request {open_request.request_id} for {s.system_id} is already open ({open_request.status})"
        )


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
    grant = AccessGrant(
        grant_id=keyed_id(db, AccessGrant.grant_id, f"GR-{r.employee_id}-{r.system_id}"),
        employee_id=r.employee_id,
        system_id=r.system_id,
        request_id=r.request_id,
        granted_on=TODAY,
    )
    db.add(grant)
    r.status = "granted"
    _audit(db, "grant_access", request_id=r.request_id, grant_id=grant.grant_id)
    return {
        "grant_id": grant.grant_id,
        "employee_id": r.employee_id,
        "system_id": r.system_id,
        "request_status": r.status,
    }


def order_replacement(
    db: Session, device_id: str, billing: Literal["warranty", "department"]
) -> dict[str, Any]:
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
        raise ToolFailure(
            f"Device {d.device_id} is {d.status}; only active devices can be replaced"
        )
    if billing == "warranty" and d.warranty_end < TODAY:
        raise ToolFailure(f"The warranty of {d.device_id} ended on {d.warranty_end.isoformat()}")
    cost = Decimal("0") if billing == "warranty" else d.replacement_cost
    order = ReplacementOrder(
        order_id=keyed_id(db, ReplacementOrder.order_id, f"RPL-{d.device_id}"),
        device_id=d.device_id,
        employee_id=d.employee_id,
        billing=billing,
        cost=cost,
        ordered_on=TODAY,
    )
    db.add(order)
    d.status = "replacement_ordered"
    _audit(db, "order_replacement", device_id=d.device_id, order_id=order.order_id)
    return {
        "order_id": order.order_id,
        "device_id": d.device_id,
        "billing": billing,
        "cost": money(cost),
        "device_status": d.status,
    }


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
        raise ToolFailure(
            f"Ticket {t.ticket_id} is already at the highest level ({MAX_ESCALATION_LEVEL})"
        )
    t.escalation_level += 1
    t.escalated_on = TODAY
    _audit(db, "escalate_ticket", ticket_id=t.ticket_id, level=t.escalation_level)
    return {
        "ticket_id": t.ticket_id,
        "escalation_level": t.escalation_level,
        "escalated_on": TODAY.isoformat(),
    }
