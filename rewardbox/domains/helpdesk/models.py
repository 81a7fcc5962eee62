"""IT helpdesk tables (SQLAlchemy 2 declarative models on SQLite).

Employees report to a manager; systems have an owner and an access level;
access requests name the approver they were routed to and who approved them;
grants record who may use what; devices carry a warranty end date; tickets have
a priority and an escalation level. ``identity_factors`` holds the second
factors that ``verify_identity`` checks (never shown by any tool).
``audit_events`` is bookkeeping: ungraded, never part of the hash.
Money is ``NUMERIC(10, 2)`` (compared as two-decimal strings in the canonical state).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rewardbox.domains.toolkit import AuditEventColumns, Money

ACCOUNT_STATUSES = ("active", "locked", "disabled")
ACCESS_LEVELS = ("standard", "restricted")
REQUEST_STATUSES = ("pending_approval", "approved", "rejected", "granted")
DEVICE_KINDS = ("laptop", "phone", "monitor", "tablet", "headset")
DEVICE_STATUSES = ("active", "replacement_ordered", "retired")
BILLINGS = ("warranty", "department")
PRIORITIES = ("low", "normal", "high", "urgent")
TICKET_STATUSES = ("open", "resolved", "closed")
MAX_ESCALATION_LEVEL = 3


def _one_of(column: str, values: tuple[str, ...]) -> sa.CheckConstraint:
    quoted = ",".join(f"'{v}'" for v in values)
    return sa.CheckConstraint(f"{column} in ({quoted})")


class Base(DeclarativeBase):
    metadata = sa.MetaData()


class Employee(Base):
    __tablename__ = "employees"
    employee_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(80))
    email: Mapped[str] = mapped_column(sa.String(120), unique=True)
    department: Mapped[str] = mapped_column(sa.String(40))
    title: Mapped[str] = mapped_column(sa.String(60))
    manager_id: Mapped[str | None] = mapped_column(sa.ForeignKey("employees.employee_id"))
    account_status: Mapped[str] = mapped_column(
        sa.String(10), _one_of("account_status", ACCOUNT_STATUSES)
    )
    password_reset_on: Mapped[dt.date | None] = mapped_column(sa.Date)


class IdentityFactor(Base):
    """The second factors of an employee: badge number and registered phone (last four digits)."""

    __tablename__ = "identity_factors"
    employee_id: Mapped[str] = mapped_column(
        sa.ForeignKey("employees.employee_id"), primary_key=True
    )
    badge_number: Mapped[str] = mapped_column(sa.String(12))
    phone_last4: Mapped[str] = mapped_column(sa.String(4))


class System(Base):
    __tablename__ = "systems"
    system_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(60), unique=True)
    access_level: Mapped[str] = mapped_column(sa.String(10), _one_of("access_level", ACCESS_LEVELS))
    owner_id: Mapped[str] = mapped_column(sa.ForeignKey("employees.employee_id"))


class AccessRequest(Base):
    __tablename__ = "access_requests"
    request_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    employee_id: Mapped[str] = mapped_column(sa.ForeignKey("employees.employee_id"))
    system_id: Mapped[str] = mapped_column(sa.ForeignKey("systems.system_id"))
    approver_id: Mapped[str] = mapped_column(sa.ForeignKey("employees.employee_id"))
    status: Mapped[str] = mapped_column(sa.String(20), _one_of("status", REQUEST_STATUSES))
    approved_by: Mapped[str | None] = mapped_column(sa.ForeignKey("employees.employee_id"))
    requested_on: Mapped[dt.date] = mapped_column(sa.Date)


class AccessGrant(Base):
    __tablename__ = "access_grants"
    grant_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    employee_id: Mapped[str] = mapped_column(sa.ForeignKey("employees.employee_id"))
    system_id: Mapped[str] = mapped_column(sa.ForeignKey("systems.system_id"))
    request_id: Mapped[str | None] = mapped_column(sa.ForeignKey("access_requests.request_id"))
    granted_on: Mapped[dt.date] = mapped_column(sa.Date)


class Device(Base):
    __tablename__ = "devices"
    device_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    employee_id: Mapped[str] = mapped_column(sa.ForeignKey("employees.employee_id"))
    kind: Mapped[str] = mapped_column(sa.String(10), _one_of("kind", DEVICE_KINDS))
    model: Mapped[str] = mapped_column(sa.String(60))
    purchased_on: Mapped[dt.date] = mapped_column(sa.Date)
    warranty_end: Mapped[dt.date] = mapped_column(sa.Date)
    replacement_cost: Mapped[Decimal] = mapped_column(Money)
    status: Mapped[str] = mapped_column(sa.String(20), _one_of("status", DEVICE_STATUSES))


class ReplacementOrder(Base):
    __tablename__ = "replacement_orders"
    order_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    device_id: Mapped[str] = mapped_column(sa.ForeignKey("devices.device_id"))
    employee_id: Mapped[str] = mapped_column(sa.ForeignKey("employees.employee_id"))
    billing: Mapped[str] = mapped_column(sa.String(10), _one_of("billing", BILLINGS))
    cost: Mapped[Decimal] = mapped_column(Money)
    ordered_on: Mapped[dt.date] = mapped_column(sa.Date)


class Ticket(Base):
    __tablename__ = "tickets"
    ticket_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    employee_id: Mapped[str] = mapped_column(sa.ForeignKey("employees.employee_id"))
    summary: Mapped[str] = mapped_column(sa.String(120))
    priority: Mapped[str] = mapped_column(sa.String(10), _one_of("priority", PRIORITIES))
    status: Mapped[str] = mapped_column(sa.String(10), _one_of("status", TICKET_STATUSES))
    escalation_level: Mapped[int] = mapped_column(
        sa.Integer, sa.CheckConstraint(f"escalation_level between 1 and {MAX_ESCALATION_LEVEL}")
    )
    opened_on: Mapped[dt.date] = mapped_column(sa.Date)
    escalated_on: Mapped[dt.date | None] = mapped_column(sa.Date)


class AuditEvent(AuditEventColumns, Base):
    """Bookkeeping: one row per write tool call. Ungraded."""


METADATA = Base.metadata
UNGRADED = frozenset({"audit_events"})
