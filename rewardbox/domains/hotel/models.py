"""Hotel booking tables (SQLAlchemy 2 declarative models on SQLite).

Company travel: travellers (employees with a loyalty tier, a credit balance and
a manager), hotels and their room types, bookings, payments and refunds, manager
approval requests for room changes, and loyalty credit transactions.

Money is ``NUMERIC(10, 2)`` (compared as two-decimal strings in the canonical
state); credits are whole numbers (1 credit = 1.00 USD). ``audit_events`` is
bookkeeping: ungraded. The free-text ``approval_requests.reason`` and
``credit_transactions.reason``, written by the agent, are ungraded as well.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rewardbox.domains.toolkit import AuditEventColumns, Money

TIERS = ("standard", "silver", "gold")
BOOKING_STATUSES = ("confirmed", "checked_in", "completed", "cancelled")
APPROVAL_STATUSES = ("pending", "approved", "denied")
CREDIT_KINDS = ("earned", "redeemed", "goodwill")
PAYMENT_METHODS = ("corporate_card", "personal_card")


class Base(DeclarativeBase):
    metadata = sa.MetaData()


class Manager(Base):
    __tablename__ = "managers"
    manager_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(80))
    email: Mapped[str] = mapped_column(sa.String(120), unique=True)


class Traveller(Base):
    __tablename__ = "travellers"
    traveller_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(80))
    email: Mapped[str] = mapped_column(sa.String(120), unique=True)
    tier: Mapped[str] = mapped_column(
        sa.String(10), sa.CheckConstraint("tier in ('standard','silver','gold')")
    )
    credit_balance: Mapped[int] = mapped_column(
        sa.Integer, sa.CheckConstraint("credit_balance >= 0")
    )
    manager_id: Mapped[str] = mapped_column(sa.ForeignKey("managers.manager_id"))


class Hotel(Base):
    __tablename__ = "hotels"
    hotel_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(80))
    city: Mapped[str] = mapped_column(sa.String(60))


class RoomType(Base):
    __tablename__ = "room_types"
    room_type_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    hotel_id: Mapped[str] = mapped_column(sa.ForeignKey("hotels.hotel_id"))
    name: Mapped[str] = mapped_column(sa.String(60))
    nightly_rate: Mapped[Decimal] = mapped_column(Money)


class Booking(Base):
    __tablename__ = "bookings"
    booking_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    traveller_id: Mapped[str] = mapped_column(sa.ForeignKey("travellers.traveller_id"))
    room_type_id: Mapped[str] = mapped_column(sa.ForeignKey("room_types.room_type_id"))
    check_in: Mapped[dt.date] = mapped_column(sa.Date)
    check_out: Mapped[dt.date] = mapped_column(sa.Date)
    nightly_rate: Mapped[Decimal] = mapped_column(Money)
    total: Mapped[Decimal] = mapped_column(Money)
    status: Mapped[str] = mapped_column(sa.String(12))


class Payment(Base):
    __tablename__ = "payments"
    payment_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    booking_id: Mapped[str] = mapped_column(sa.ForeignKey("bookings.booking_id"))
    method: Mapped[str] = mapped_column(sa.String(16))
    card_last4: Mapped[str] = mapped_column(sa.String(4))
    amount: Mapped[Decimal] = mapped_column(Money)
    created_on: Mapped[dt.date] = mapped_column(sa.Date)


class Refund(Base):
    __tablename__ = "refunds"
    refund_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    booking_id: Mapped[str] = mapped_column(sa.ForeignKey("bookings.booking_id"))
    payment_id: Mapped[str] = mapped_column(sa.ForeignKey("payments.payment_id"))
    amount: Mapped[Decimal] = mapped_column(Money)
    reason: Mapped[str] = mapped_column(sa.String(20))
    created_on: Mapped[dt.date] = mapped_column(sa.Date)


class ApprovalRequest(Base):
    __tablename__ = "approval_requests"
    approval_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    booking_id: Mapped[str] = mapped_column(sa.ForeignKey("bookings.booking_id"))
    manager_id: Mapped[str] = mapped_column(sa.ForeignKey("managers.manager_id"))
    requested_room_type_id: Mapped[str] = mapped_column(sa.ForeignKey("room_types.room_type_id"))
    status: Mapped[str] = mapped_column(sa.String(10))
    reason: Mapped[str] = mapped_column(sa.Text)
    created_on: Mapped[dt.date] = mapped_column(sa.Date)


class CreditTransaction(Base):
    __tablename__ = "credit_transactions"
    tx_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    traveller_id: Mapped[str] = mapped_column(sa.ForeignKey("travellers.traveller_id"))
    booking_id: Mapped[str | None] = mapped_column(sa.ForeignKey("bookings.booking_id"))
    kind: Mapped[str] = mapped_column(sa.String(10))
    credits: Mapped[int] = mapped_column(sa.Integer, sa.CheckConstraint("credits > 0"))
    reason: Mapped[str] = mapped_column(sa.Text)
    created_on: Mapped[dt.date] = mapped_column(sa.Date)


class AuditEvent(AuditEventColumns, Base):
    """Bookkeeping: one row per write tool call. Ungraded."""


METADATA = Base.metadata
UNGRADED = frozenset({"audit_events", "approval_requests.reason", "credit_transactions.reason"})
