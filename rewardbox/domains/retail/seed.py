"""Deterministic seed rows of the retail domain (the same in every episode).

The seed is a small store: eight customers with saved addresses, orders in
every status, payments, one earlier refund and one open ticket. Tasks add their
own customers and orders through ``data_patch`` (ids ``CUS-2xxx``/``ORD-6xxx``),
so no task depends on another and the seed rows are distractors.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

TODAY = dt.date(2025, 6, 15)

CATALOGUE: tuple[tuple[str, str, str], ...] = (
    ("KTL-BLU", "blue electric kettle", "39.90"),
    ("MUG-SET", "set of four stoneware mugs", "24.50"),
    ("TWL-GRY", "grey bath towel", "19.90"),
    ("LMP-DSK", "LED desk lamp", "45.00"),
    ("HDP-WRL", "wireless headphones", "89.99"),
    ("BKP-NVY", "navy hiking backpack", "64.00"),
    ("CUT-BRD", "bamboo cutting board", "17.35"),
    ("PLW-MEM", "memory foam pillow", "32.80"),
    ("JKT-RAIN", "waterproof rain jacket", "79.95"),
    ("SOC-WOL", "wool socks (3 pairs)", "14.99"),
    ("PAN-CST", "cast iron skillet", "42.10"),
    ("BTL-STL", "steel water bottle", "21.75"),
    ("CHR-OFF", "ergonomic office chair", "189.00"),
    ("BLK-WOV", "woven throw blanket", "54.40"),
    ("SPK-BT", "bluetooth speaker", "59.90"),
    ("GLV-LTH", "leather gloves", "36.60"),
)
"""(sku, product name, unit price) of every product; shared with the task generator."""

_CUSTOMERS = (
    ("CUS-1001", "Maria Santos", "maria.santos@example.com", "standard"),
    ("CUS-1002", "James Whitfield", "james.whitfield@example.com", "silver"),
    ("CUS-1003", "Aiko Tanaka", "aiko.tanaka@example.com", "gold"),
    ("CUS-1004", "Omar Haddad", "omar.haddad@example.com", "standard"),
    ("CUS-1005", "Lena Novak", "lena.novak@example.com", "silver"),
    ("CUS-1006", "Peter Grant", "peter.grant@example.com", "gold"),
    ("CUS-1007", "Sofia Rossi", "sofia.rossi@example.com", "standard"),
    ("CUS-1008", "David Chen", "david.chen@example.com", "standard"),
)
_STATUS_CYCLE = (
    "delivered",
    "pending",
    "shipped",
    "processing",
    "delivered",
    "cancelled",
    "returned",
)
_METHODS = ("credit_card", "paypal", "gift_card")


def _day(days_ago: int) -> str:
    return (TODAY - dt.timedelta(days=days_ago)).isoformat()


def _order_rows(n: int, customer_id: str, rows: dict[str, list[dict[str, Any]]]) -> None:
    order_id = f"ORD-{1001 + n}"
    status = _STATUS_CYCLE[n % len(_STATUS_CYCLE)]
    picks = [CATALOGUE[(n * 5 + k * 3) % len(CATALOGUE)] for k in range(1 + n % 3)]
    total = Decimal("0")
    for k, (sku, name, price) in enumerate(picks, start=1):
        qty = 1 + (n + k) % 2
        total += Decimal(price) * qty
        rows["order_items"].append(
            {
                "item_id": f"{order_id}-{k}",
                "order_id": order_id,
                "sku": sku,
                "product_name": name,
                "unit_price": price,
                "quantity": qty,
                "returned_quantity": qty if status == "returned" else 0,
            }
        )
    placed = 10 + (n * 7) % 80
    delivered = _day(placed - 5) if status in ("delivered", "returned") else None
    rows["orders"].append(
        {
            "order_id": order_id,
            "customer_id": customer_id,
            "status": status,
            "placed_on": _day(placed),
            "delivered_on": delivered,
            "shipping_address_id": f"ADR-{customer_id[4:]}-H",
            "total": str(total),
        }
    )
    method = _METHODS[n % 3]
    rows["payments"].append(
        {
            "payment_id": f"PAY-{1001 + n}",
            "order_id": order_id,
            "method": method,
            "card_last4": f"{4000 + n * 37:04d}"[-4:] if method == "credit_card" else None,
            "amount": str(total),
        }
    )
    if status in ("cancelled", "returned"):
        rows["refunds"].append(
            {
                "refund_id": f"RF-{len(rows['refunds']) + 1:04d}",
                "order_id": order_id,
                "payment_id": f"PAY-{1001 + n}",
                "amount": str(total),
                "reason": "cancellation" if status == "cancelled" else "return",
                "created_on": _day(max(placed - 8, 1)),
            }
        )


def seed_rows() -> dict[str, list[dict[str, Any]]]:
    """The seed rows, ``{table: [row, ...]}`` (plain JSON-able values, deterministic)."""
    rows: dict[str, list[dict[str, Any]]] = {
        t: []
        for t in (
            "customers",
            "addresses",
            "orders",
            "order_items",
            "payments",
            "refunds",
            "tickets",
        )
    }
    n = 0
    for i, (cid, name, email, tier) in enumerate(_CUSTOMERS):
        _customer_rows(i, cid, name, email, tier, rows)
        for _ in range(3):
            _order_rows(n, cid, rows)
            n += 1
    rows["tickets"].append(
        {
            "ticket_id": "TCK-0001",
            "customer_id": "CUS-1002",
            "order_id": "ORD-1004",
            "category": "missing_package",
            "status": "open",
            "description": "Parcel marked delivered but not received.",
            "created_on": _day(3),
        }
    )
    return rows


def _customer_rows(
    i: int, cid: str, name: str, email: str, tier: str, rows: dict[str, list[dict[str, Any]]]
) -> None:
    """The customer row and its addresses (home; work for every other customer) of ``seed_rows``."""
    rows["customers"].append(
        {
            "customer_id": cid,
            "name": name,
            "email": email,
            "phone": f"+1-555-01{i:02d}",
            "tier": tier,
            "member_since": _day(400 + 90 * i),
        }
    )
    suffix = cid[4:]
    rows["addresses"].append(
        {
            "address_id": f"ADR-{suffix}-H",
            "customer_id": cid,
            "label": "home",
            "line1": f"{10 + i} Maple Street",
            "city": "Springfield",
            "postal_code": f"620{i:02d}",
            "country": "US",
        }
    )
    if i % 2 == 0:
        rows["addresses"].append(
            {
                "address_id": f"ADR-{suffix}-W",
                "customer_id": cid,
                "label": "work",
                "line1": f"{200 + i} Commerce Avenue",
                "city": "Springfield",
                "postal_code": f"621{i:02d}",
                "country": "US",
            }
        )
