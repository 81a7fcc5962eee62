"""Rules and row helpers the retail tools share: the read tools (``tools``) and the write tools
(``tools_write``).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rewardbox.domains.base import ToolFailure
from rewardbox.domains.retail import seed
from rewardbox.domains.retail.models import (
    Address,
    AuditEvent,
    Customer,
    Order,
    Payment,
    Refund,
)
from rewardbox.domains.toolkit import get_row, keyed_id

TODAY: dt.date = seed.TODAY
"""The fixed current date of the domain (also stated in the policy)."""

RETURN_WINDOW_DAYS = {"standard": 30, "silver": 45, "gold": 60}
"""Days after delivery in which a tier may return items (policy.md)."""

MUTABLE_STATUSES = ("pending", "processing")

TicketCategory = Literal["damaged_item", "missing_package", "wrong_item", "billing", "other"]


def _audit(db: Session, tool: str, **detail: Any) -> None:
    db.add(AuditEvent.entry(tool, detail))


def _customer(db: Session, customer_id: str) -> Customer:
    return get_row(db, Customer, customer_id, "Customer", upper=False)


def _order(db: Session, order_id: str) -> Order:
    return get_row(db, Order, order_id, "Order")


def _address_view(a: Address) -> dict[str, Any]:
    return {
        "address_id": a.address_id,
        "label": a.label,
        "line1": a.line1,
        "city": a.city,
        "postal_code": a.postal_code,
        "country": a.country,
    }


def _customer_view(db: Session, c: Customer) -> dict[str, Any]:
    addresses = db.scalars(
        sa.select(Address).where(Address.customer_id == c.customer_id).order_by(Address.address_id)
    )
    order_ids = db.scalars(
        sa.select(Order.order_id).where(Order.customer_id == c.customer_id).order_by(Order.order_id)
    )
    return {
        "customer_id": c.customer_id,
        "name": c.name,
        "email": c.email,
        "phone": c.phone,
        "tier": c.tier,
        "member_since": c.member_since.isoformat(),
        "addresses": [_address_view(a) for a in addresses],
        "order_ids": list(order_ids),
    }


def _payment(db: Session, order: Order) -> Payment:
    payment = db.scalars(
        sa.select(Payment).where(Payment.order_id == order.order_id).order_by(Payment.payment_id)
    ).first()
    if payment is None:
        raise ToolFailure(
            f"Order {order.order_id} has no payment on file; open a ticket with category 'billing'"
        )
    return payment


def _refund(db: Session, order: Order, amount: Decimal, reason: str, key: str) -> Refund:
    """A refund row with id ``RF-<key>`` (the order or item it refunds)."""
    payment = _payment(db, order)
    refund = Refund(
        refund_id=keyed_id(db, Refund.refund_id, f"RF-{key}"),
        order_id=order.order_id,
        payment_id=payment.payment_id,
        amount=amount,
        reason=reason,
        created_on=TODAY,
    )
    db.add(refund)
    return refund
