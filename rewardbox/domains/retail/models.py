"""Retail tables (SQLAlchemy 2 declarative models on SQLite).

Money is ``NUMERIC(10, 2)`` (compared as two-decimal strings in the canonical
state). ``audit_events`` is bookkeeping: ungraded, never part of the hash.
``tickets.description`` is free text written by the agent: ungraded as well.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from rewardbox.domains.toolkit import AuditEventColumns, Money

TIERS = ("standard", "silver", "gold")
ORDER_STATUSES = ("pending", "processing", "shipped", "delivered", "cancelled", "returned")
PAYMENT_METHODS = ("credit_card", "paypal", "gift_card")
TICKET_CATEGORIES = ("damaged_item", "missing_package", "wrong_item", "billing", "other")


class Base(DeclarativeBase):
    metadata = sa.MetaData()


class Customer(Base):
    __tablename__ = "customers"
    customer_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(80))
    email: Mapped[str] = mapped_column(sa.String(120), unique=True)
    phone: Mapped[str | None] = mapped_column(sa.String(30))
    tier: Mapped[str] = mapped_column(
        sa.String(10), sa.CheckConstraint("tier in ('standard','silver','gold')")
    )
    member_since: Mapped[dt.date] = mapped_column(sa.Date)


class Address(Base):
    __tablename__ = "addresses"
    address_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    customer_id: Mapped[str] = mapped_column(sa.ForeignKey("customers.customer_id"))
    label: Mapped[str] = mapped_column(sa.String(20))
    line1: Mapped[str] = mapped_column(sa.String(120))
    city: Mapped[str] = mapped_column(sa.String(60))
    postal_code: Mapped[str] = mapped_column(sa.String(12))
    country: Mapped[str] = mapped_column(sa.String(2))


class Order(Base):
    __tablename__ = "orders"
    order_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    customer_id: Mapped[str] = mapped_column(sa.ForeignKey("customers.customer_id"))
    status: Mapped[str] = mapped_column(sa.String(12))
    placed_on: Mapped[dt.date] = mapped_column(sa.Date)
    delivered_on: Mapped[dt.date | None] = mapped_column(sa.Date)
    shipping_address_id: Mapped[str] = mapped_column(sa.ForeignKey("addresses.address_id"))
    total: Mapped[Decimal] = mapped_column(Money)


class OrderItem(Base):
    __tablename__ = "order_items"
    item_id: Mapped[str] = mapped_column(sa.String(24), primary_key=True)
    order_id: Mapped[str] = mapped_column(sa.ForeignKey("orders.order_id"))
    sku: Mapped[str] = mapped_column(sa.String(20))
    product_name: Mapped[str] = mapped_column(sa.String(80))
    unit_price: Mapped[Decimal] = mapped_column(Money)
    quantity: Mapped[int] = mapped_column(sa.Integer)
    returned_quantity: Mapped[int] = mapped_column(sa.Integer, default=0)


class Payment(Base):
    __tablename__ = "payments"
    payment_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    order_id: Mapped[str] = mapped_column(sa.ForeignKey("orders.order_id"))
    method: Mapped[str] = mapped_column(sa.String(12))
    card_last4: Mapped[str | None] = mapped_column(sa.String(4))
    amount: Mapped[Decimal] = mapped_column(Money)


class Refund(Base):
    __tablename__ = "refunds"
    refund_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    order_id: Mapped[str] = mapped_column(sa.ForeignKey("orders.order_id"))
    payment_id: Mapped[str] = mapped_column(sa.ForeignKey("payments.payment_id"))
    amount: Mapped[Decimal] = mapped_column(Money)
    reason: Mapped[str] = mapped_column(sa.String(20))
    created_on: Mapped[dt.date] = mapped_column(sa.Date)


class Ticket(Base):
    __tablename__ = "tickets"
    ticket_id: Mapped[str] = mapped_column(sa.String(20), primary_key=True)
    customer_id: Mapped[str] = mapped_column(sa.ForeignKey("customers.customer_id"))
    order_id: Mapped[str | None] = mapped_column(sa.ForeignKey("orders.order_id"))
    category: Mapped[str] = mapped_column(sa.String(20))
    status: Mapped[str] = mapped_column(sa.String(10))
    description: Mapped[str] = mapped_column(sa.Text)
    created_on: Mapped[dt.date] = mapped_column(sa.Date)


class AuditEvent(AuditEventColumns, Base):
    """Bookkeeping: one row per write tool call. Ungraded."""


METADATA = Base.metadata
UNGRADED = frozenset({"audit_events", "tickets.description"})
