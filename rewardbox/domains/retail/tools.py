"""Retail tools: plain functions over a session. Each docstring is what the model reads.

Every tool takes the episode's ``Session`` first (hidden from the model) and
returns a JSON-able dict. A tool's own error raises ``ToolFailure``; the server
turns it into ``{"error": "...", "tool": name}`` and writes nothing. Tools
enforce hard facts (an order must be pending to cancel); the policy rules that
need judgement (return windows, who owns an order) are the agent's job.
Ids of new rows derive from their business key (``toolkit.keyed_id``), so the
order of the calls never changes them: the refund of a cancelled order is
``RF-<order id>-CANCEL``, the refund of a returned item ``RF-<item id>`` (one
refund per item, whether the items come back in one call or several), a ticket
``TCK-<order or customer id>-<CATEGORY>``.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rewardbox.domains.base import ToolFailure
from rewardbox.domains.retail.models import (
    Address,
    Customer,
    Order,
    OrderItem,
    Payment,
    Refund,
    Ticket,
)
from rewardbox.domains.retail.tools_common import (
    _address_view,
    _customer,
    _customer_view,
    _order,
)
from rewardbox.domains.retail.tools_write import (
    cancel_order,
    create_ticket,
    return_items,
    update_shipping_address,
)
from rewardbox.domains.toolkit import money


def find_customer(db: Session, email: str) -> dict[str, Any]:
    """Find a customer by email address.

    Args:
        email: the customer's email address, e.g. "ana.lopez@mail.test".

    Returns the customer: customer_id, name, email, phone, tier (standard, silver
    or gold), member_since, saved addresses (address_id, label, line1, city,
    postal_code, country) and the ids of all their orders.
    Error if no customer has this email.
    """
    customer = db.scalars(
        sa.select(Customer).where(sa.func.lower(Customer.email) == email.strip().lower())
    ).first()
    if customer is None:
        raise ToolFailure(f"No customer with email {email!r}")
    return _customer_view(db, customer)


def find_customer_by_name(db: Session, full_name: str, postal_code: str) -> dict[str, Any]:
    """Find a customer by full name and the postal code of one of their saved addresses.

    Use it when the customer does not remember their email.

    Args:
        full_name: the customer's full name, e.g. "Ana Lopez" (case-insensitive).
        postal_code: the postal code of a saved address, e.g. "97201".

    Returns the same record as find_customer. Error if no customer, or more
    than one, has this name and postal code.
    """
    matches = list(
        db.scalars(
            sa.select(Customer)
            .join(Address, Address.customer_id == Customer.customer_id)
            .where(
                sa.func.lower(Customer.name) == full_name.strip().lower(),
                Address.postal_code == postal_code.strip(),
            )
            .distinct()
            .order_by(Customer.customer_id)
        )
    )
    if len(matches) != 1:
        raise ToolFailure(
            f"{'No' if not matches else 'More than one'} customer named {full_name!r} with postal code "
            f"{postal_code!r}; ask for the email instead"
        )
    return _customer_view(db, matches[0])


def get_customer(db: Session, customer_id: str) -> dict[str, Any]:
    """Get a customer by customer id.

    Args:
        customer_id: the customer id, e.g. "CUS-1001".

    Returns the same record as find_customer. Error if the id does not exist.
    """
    return _customer_view(db, _customer(db, customer_id))


def list_orders(db: Session, customer_id: str) -> dict[str, Any]:
    """List all orders of a customer, oldest first.

    Args:
        customer_id: the customer id, e.g. "CUS-1001".

    Returns a list of order summaries: order_id, status, placed_on, delivered_on,
    total and the product names in the order. Use get_order for item ids.
    Error if the customer does not exist.
    """
    _customer(db, customer_id)
    orders = db.scalars(
        sa.select(Order)
        .where(Order.customer_id == customer_id.strip())
        .order_by(Order.placed_on, Order.order_id)
    )
    out = []
    for o in orders:
        names = db.scalars(
            sa.select(OrderItem.product_name)
            .where(OrderItem.order_id == o.order_id)
            .order_by(OrderItem.item_id)
        )
        out.append(
            {
                "order_id": o.order_id,
                "status": o.status,
                "placed_on": o.placed_on.isoformat(),
                "delivered_on": o.delivered_on.isoformat() if o.delivered_on else None,
                "total": money(o.total),
                "products": list(names),
            }
        )
    return {"customer_id": customer_id.strip(), "orders": out}


def get_order(db: Session, order_id: str) -> dict[str, Any]:
    """Get the full details of one order.

    Args:
        order_id: the order id, e.g. "ORD-1042".

    Returns: order_id, customer_id, status (pending, processing, shipped,
    delivered, cancelled or returned), placed_on, delivered_on, total, the
    shipping address, the items (item_id, sku, product_name, unit_price,
    quantity, returned_quantity), the payment (payment_id, method, card_last4,
    amount) and any refunds already issued. Error if the order does not exist.
    """
    o = _order(db, order_id)
    address = db.get(Address, o.shipping_address_id)
    return {
        "order_id": o.order_id,
        "customer_id": o.customer_id,
        "status": o.status,
        "placed_on": o.placed_on.isoformat(),
        "delivered_on": o.delivered_on.isoformat() if o.delivered_on else None,
        "total": money(o.total),
        "shipping_address": _address_view(address) if address else None,
        **_order_records(db, o),
    }


def _order_records(db: Session, o: Order) -> dict[str, list[dict[str, Any]]]:
    """The items, payments and refunds of an order (``get_order``)."""
    items = db.scalars(
        sa.select(OrderItem).where(OrderItem.order_id == o.order_id).order_by(OrderItem.item_id)
    )
    payments = db.scalars(
        sa.select(Payment).where(Payment.order_id == o.order_id).order_by(Payment.payment_id)
    )
    refunds = db.scalars(
        sa.select(Refund).where(Refund.order_id == o.order_id).order_by(Refund.refund_id)
    )
    return {
        "items": [
            {
                "item_id": i.item_id,
                "sku": i.sku,
                "product_name": i.product_name,
                "unit_price": money(i.unit_price),
                "quantity": i.quantity,
                "returned_quantity": i.returned_quantity,
            }
            for i in items
        ],
        "payments": [
            {
                "payment_id": p.payment_id,
                "method": p.method,
                "card_last4": p.card_last4,
                "amount": money(p.amount),
            }
            for p in payments
        ],
        "refunds": [
            {
                "refund_id": r.refund_id,
                "amount": money(r.amount),
                "reason": r.reason,
                "created_on": r.created_on.isoformat(),
            }
            for r in refunds
        ],
    }


def list_tickets(db: Session, customer_id: str) -> dict[str, Any]:
    """List the support tickets of a customer.

    Args:
        customer_id: the customer id, e.g. "CUS-1001".

    Returns tickets with ticket_id, order_id, category, status, created_on.
    Error if the customer does not exist.
    """
    _customer(db, customer_id)
    tickets = db.scalars(
        sa.select(Ticket)
        .where(Ticket.customer_id == customer_id.strip())
        .order_by(Ticket.ticket_id)
    )
    return {
        "customer_id": customer_id.strip(),
        "tickets": [
            {
                "ticket_id": t.ticket_id,
                "order_id": t.order_id,
                "category": t.category,
                "status": t.status,
                "created_on": t.created_on.isoformat(),
            }
            for t in tickets
        ],
    }


TOOLS = (
    find_customer,
    find_customer_by_name,
    get_customer,
    list_orders,
    get_order,
    cancel_order,
    update_shipping_address,
    return_items,
    create_ticket,
    list_tickets,
)
READONLY_TOOLS = frozenset(
    {
        "find_customer",
        "find_customer_by_name",
        "get_customer",
        "list_orders",
        "get_order",
        "list_tickets",
    }
)
SPLITTABLE = {"return_items": "item_ids"}
"""Items may come back in one call or one call each: the same refunds and statuses."""
