"""Retail write tools: cancellation, shipping address, returns, tickets (``tools`` lists them).

Each docstring is what the model reads; the docstring of ``tools`` says how a tool reports an
error and how the ids of new rows are made.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rewardbox.domains.base import ToolFailure
from rewardbox.domains.retail.models import (
    Address,
    OrderItem,
    Ticket,
)
from rewardbox.domains.retail.tools_common import (
    MUTABLE_STATUSES,
    TODAY,
    TicketCategory,
    _address_view,
    _audit,
    _customer,
    _order,
    _payment,
    _refund,
)
from rewardbox.domains.toolkit import keyed_id, money


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
        raise ToolFailure(
            f"Order {o.order_id} is {o.status}; only pending or processing orders can be cancelled"
        )
    refund = _refund(db, o, o.total, "cancellation", f"{o.order_id}-CANCEL")
    o.status = "cancelled"
    _audit(db, "cancel_order", order_id=o.order_id, refund_id=refund.refund_id)
    return {
        "order_id": o.order_id,
        "status": o.status,
        "refund_id": refund.refund_id,
        "refund_amount": money(refund.amount),
        "payment_method": _payment(db, o).method,
    }


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
        raise ToolFailure(
            f"Order {o.order_id} is {o.status}; the address can only change while pending or processing"
        )
    address = db.get(Address, address_id.strip())
    if address is None or address.customer_id != o.customer_id:
        raise ToolFailure(
            f"Address {address_id!r} is not a saved address of customer {o.customer_id}"
        )
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
        raise ToolFailure(
            f"Order {o.order_id} is {o.status}; only delivered orders can be returned"
        )
    wanted = [i.strip() for i in item_ids]
    if not wanted or len(set(wanted)) != len(wanted):
        raise ToolFailure("item_ids must list each item to return once")
    items = {
        i.item_id: i
        for i in db.scalars(sa.select(OrderItem).where(OrderItem.order_id == o.order_id))
    }
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
    return {
        "order_id": o.order_id,
        "status": o.status,
        "returned_item_ids": wanted,
        "refund_ids": refund_ids,
        "refund_amount": money(sum((r.amount for r in refunds), Decimal("0"))),
    }


def create_ticket(
    db: Session, customer_id: str, category: TicketCategory, description: str, order_id: str = ""
) -> dict[str, Any]:
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
        raise ToolFailure(
            f"Order {order.order_id} does not belong to customer {customer.customer_id}"
        )
    subject = order.order_id if order else customer.customer_id
    ticket = Ticket(
        ticket_id=keyed_id(db, Ticket.ticket_id, f"TCK-{subject}-{category.upper()}"),
        customer_id=customer.customer_id,
        order_id=order.order_id if order else None,
        category=category,
        status="open",
        description=description,
        created_on=TODAY,
    )
    db.add(ticket)
    _audit(db, "create_ticket", ticket_id=ticket.ticket_id, category=category)
    return {"ticket_id": ticket.ticket_id, "status": ticket.status, "category": category}
