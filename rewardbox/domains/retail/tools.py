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
    OrderItem,
    Payment,
    Refund,
    Ticket,
)
from rewardbox.domains.toolkit import get_row, keyed_id, money

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
    return {"address_id": a.address_id, "label": a.label, "line1": a.line1, "city": a.city,
            "postal_code": a.postal_code, "country": a.country}


def _customer_view(db: Session, c: Customer) -> dict[str, Any]:
    addresses = db.scalars(sa.select(Address).where(Address.customer_id == c.customer_id).order_by(Address.address_id))
    order_ids = db.scalars(sa.select(Order.order_id).where(Order.customer_id == c.customer_id).order_by(Order.order_id))
    return {"customer_id": c.customer_id, "name": c.name, "email": c.email, "phone": c.phone, "tier": c.tier,
            "member_since": c.member_since.isoformat(), "addresses": [_address_view(a) for a in addresses],
            "order_ids": list(order_ids)}


def _payment(db: Session, order: Order) -> Payment:
    payment = db.scalars(sa.select(Payment).where(Payment.order_id == order.order_id).order_by(Payment.payment_id)).first()
    if payment is None:
        raise ToolFailure(f"Order {order.order_id} has no payment on file; open a ticket with category 'billing'")
    return payment


def _refund(db: Session, order: Order, amount: Decimal, reason: str, key: str) -> Refund:
    """A refund row with id ``RF-<key>`` (the order or item it refunds)."""
    payment = _payment(db, order)
    refund = Refund(refund_id=keyed_id(db, Refund.refund_id, f"RF-{key}"), order_id=order.order_id,
                    payment_id=payment.payment_id, amount=amount, reason=reason, created_on=TODAY)
    db.add(refund)
    return refund


def find_customer(db: Session, email: str) -> dict[str, Any]:
    """Find a customer by email address.

    Args:
        email: the customer's email address, e.g. "ana.lopez@mail.test".

    Returns the customer: customer_id, name, email, phone, tier (standard, silver
    or gold), member_since, saved addresses (address_id, label, line1, city,
    postal_code, country) and the ids of all their orders.
    Error if no customer has this email.
    """
    customer = db.scalars(sa.select(Customer).where(sa.func.lower(Customer.email) == email.strip().lower())).first()
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
    matches = list(db.scalars(
        sa.select(Customer).join(Address, Address.customer_id == Customer.customer_id)
        .where(sa.func.lower(Customer.name) == full_name.strip().lower(), Address.postal_code == postal_code.strip())
        .distinct().order_by(Customer.customer_id)))
    if len(matches) != 1:
        raise ToolFailure(f"{'No' if not matches else 'More than one'} customer named {full_name!r} with postal code "
                          f"{postal_code!r}; ask for the email instead")
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
    orders = db.scalars(sa.select(Order).where(Order.customer_id == customer_id.strip()).order_by(Order.placed_on, Order.order_id))
    out = []
    for o in orders:
        names = db.scalars(sa.select(OrderItem.product_name).where(OrderItem.order_id == o.order_id).order_by(OrderItem.item_id))
        out.append({"order_id": o.order_id, "status": o.status, "placed_on": o.placed_on.isoformat(),
                    "delivered_on": o.delivered_on.isoformat() if o.delivered_on else None,
                    "total": money(o.total), "products": list(names)})
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
    items = db.scalars(sa.select(OrderItem).where(OrderItem.order_id == o.order_id).order_by(OrderItem.item_id))
    payments = db.scalars(sa.select(Payment).where(Payment.order_id == o.order_id).order_by(Payment.payment_id))
    refunds = db.scalars(sa.select(Refund).where(Refund.order_id == o.order_id).order_by(Refund.refund_id))
    address = db.get(Address, o.shipping_address_id)
    return {
        "order_id": o.order_id, "customer_id": o.customer_id, "status": o.status,
        "placed_on": o.placed_on.isoformat(), "delivered_on": o.delivered_on.isoformat() if o.delivered_on else None,
        "total": money(o.total), "shipping_address": _address_view(address) if address else None,
        "items": [{"item_id": i.item_id, "sku": i.sku, "product_name": i.product_name, "unit_price": money(i.unit_price),
                   "quantity": i.quantity, "returned_quantity": i.returned_quantity} for i in items],
        "payments": [{"payment_id": p.payment_id, "method": p.method, "card_last4": p.card_last4,
                      "amount": money(p.amount)} for p in payments],
        "refunds": [{"refund_id": r.refund_id, "amount": money(r.amount), "reason": r.reason,
                     "created_on": r.created_on.isoformat()} for r in refunds],
    }


def cancel_order(db: Session, order_id: str) -> dict[str, Any]:
    """Cancel an order that has not shipped yet and refund it in full.

    Only orders with status "pending" or "processing" can be cancelled. The
    whole order total is refunded to the original payment method.

    Args:
        order_id: the order id, e.g. "ORD-1042".

    Returns: order_id, the new status "cancelled", refund_id, refund_amount and
    payment_method. Error if the order does not exist or has already shipped,
    been delivered, cancelled or returned.
    """
    o = _order(db, order_id)
    if o.status not in MUTABLE_STATUSES:
        raise ToolFailure(f"Order {o.order_id} is {o.status}; only pending or processing orders can be cancelled")
    refund = _refund(db, o, o.total, "cancellation", f"{o.order_id}-CANCEL")
    o.status = "cancelled"
    _audit(db, "cancel_order", order_id=o.order_id, refund_id=refund.refund_id)
    return {"order_id": o.order_id, "status": o.status, "refund_id": refund.refund_id,
            "refund_amount": money(refund.amount), "payment_method": _payment(db, o).method}


def update_shipping_address(db: Session, order_id: str, address_id: str) -> dict[str, Any]:
    """Ship an order that has not shipped yet to another saved address of the same customer.

    Args:
        order_id: the order id, e.g. "ORD-1042".
        address_id: one of the customer's saved address ids (see find_customer), e.g. "ADR-2001-W".

    Returns: order_id and the new shipping address. Error if the order does not
    exist, is not pending or processing, or the address is not one of the order's
    customer's saved addresses.
    """
    o = _order(db, order_id)
    if o.status not in MUTABLE_STATUSES:
        raise ToolFailure(f"Order {o.order_id} is {o.status}; the address can only change while pending or processing")
    address = db.get(Address, address_id.strip())
    if address is None or address.customer_id != o.customer_id:
        raise ToolFailure(f"Address {address_id!r} is not a saved address of customer {o.customer_id}")
    o.shipping_address_id = address.address_id
    _audit(db, "update_shipping_address", order_id=o.order_id, address_id=address.address_id)
    return {"order_id": o.order_id, "shipping_address": _address_view(address)}


def return_items(db: Session, order_id: str, item_ids: list[str]) -> dict[str, Any]:
    """Return items of a delivered order and refund them to the original payment method.

    Check the return window in the policy BEFORE calling this tool. Each listed
    item is returned in its full quantity and refunded on its own (refund id
    "RF-<item id>"), so one call with two items and two calls with one item
    each do the same. When every item of the order has been returned, the
    order status becomes "returned".

    Args:
        order_id: the order id, e.g. "ORD-1042".
        item_ids: the item ids to return (from get_order), e.g. ["ORD-1042-1"].

    Returns: order_id, status, returned item ids, refund_ids (one per item)
    and refund_amount (their sum).
    Error if the order is not delivered, an item id is not in the order, an item
    was already returned, or the list is empty.
    """
    o = _order(db, order_id)
    if o.status != "delivered":
        raise ToolFailure(f"Order {o.order_id} is {o.status}; only delivered orders can be returned")
    wanted = [i.strip() for i in item_ids]
    if not wanted or len(set(wanted)) != len(wanted):
        raise ToolFailure("item_ids must list each item to return once")
    items = {i.item_id: i for i in db.scalars(sa.select(OrderItem).where(OrderItem.order_id == o.order_id))}
    for item_id in wanted:
        item = items.get(item_id)
        if item is None:
            raise ToolFailure(f"Item {item_id!r} is not part of order {o.order_id}")
        if item.returned_quantity >= item.quantity:
            raise ToolFailure(f"Item {item_id} was already returned")
    refunds = []
    for item_id in wanted:
        item = items[item_id]
        amount = item.unit_price * (item.quantity - item.returned_quantity)
        item.returned_quantity = item.quantity
        refunds.append(_refund(db, o, amount, "return", item.item_id))
    if all(i.returned_quantity >= i.quantity for i in items.values()):
        o.status = "returned"
    refund_ids = [r.refund_id for r in refunds]
    _audit(db, "return_items", order_id=o.order_id, item_ids=wanted, refund_ids=refund_ids)
    return {"order_id": o.order_id, "status": o.status, "returned_item_ids": wanted, "refund_ids": refund_ids,
            "refund_amount": money(sum((r.amount for r in refunds), Decimal("0")))}


def create_ticket(db: Session, customer_id: str, category: TicketCategory, description: str, order_id: str = "") -> dict[str, Any]:
    """Open a support ticket for something the other tools cannot solve.

    Args:
        customer_id: the customer id, e.g. "CUS-1001".
        category: one of "damaged_item", "missing_package", "wrong_item", "billing", "other".
        description: a short summary of the problem in your own words.
        order_id: the related order id, or "" when no order is concerned.

    Returns: ticket_id ("TCK-<order id, else customer id>-<CATEGORY>") and
    status "open". Error if the customer or order does not
    exist, or the order belongs to another customer.
    """
    customer = _customer(db, customer_id)
    order = _order(db, order_id) if order_id.strip() else None
    if order is not None and order.customer_id != customer.customer_id:
        raise ToolFailure(f"Order {order.order_id} does not belong to customer {customer.customer_id}")
    subject = order.order_id if order else customer.customer_id
    ticket = Ticket(ticket_id=keyed_id(db, Ticket.ticket_id, f"TCK-{subject}-{category.upper()}"),
                    customer_id=customer.customer_id,
                    order_id=order.order_id if order else None, category=category, status="open",
                    description=description, created_on=TODAY)
    db.add(ticket)
    _audit(db, "create_ticket", ticket_id=ticket.ticket_id, category=category)
    return {"ticket_id": ticket.ticket_id, "status": ticket.status, "category": category}


def list_tickets(db: Session, customer_id: str) -> dict[str, Any]:
    """List the support tickets of a customer.

    Args:
        customer_id: the customer id, e.g. "CUS-1001".

    Returns tickets with ticket_id, order_id, category, status, created_on.
    Error if the customer does not exist.
    """
    _customer(db, customer_id)
    tickets = db.scalars(sa.select(Ticket).where(Ticket.customer_id == customer_id.strip()).order_by(Ticket.ticket_id))
    return {"customer_id": customer_id.strip(), "tickets": [
        {"ticket_id": t.ticket_id, "order_id": t.order_id, "category": t.category, "status": t.status,
         "created_on": t.created_on.isoformat()} for t in tickets]}


TOOLS = (find_customer, find_customer_by_name, get_customer, list_orders, get_order, cancel_order, update_shipping_address,
         return_items, create_ticket, list_tickets)
READONLY_TOOLS = frozenset({"find_customer", "find_customer_by_name", "get_customer", "list_orders", "get_order", "list_tickets"})
SPLITTABLE = {"return_items": "item_ids"}
"""Items may come back in one call or one call each: the same refunds and statuses."""
