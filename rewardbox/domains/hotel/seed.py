"""Deterministic seed rows of the hotel domain (the same in every episode).

The seed is the company's travel account: six hotels with three room types
each (shared by every task), four managers, and eight travellers with bookings
in every status, payments, an earlier refund, approval requests and loyalty
credit history. Tasks add their own travellers and bookings through
``data_patch`` (ids ``TRV-2nnn``/``TRV-3nnn``, ``BK-6nnn``), so no task depends on
another and the seed travellers are distractors.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

TODAY = dt.date(2025, 9, 10)

HOTELS: tuple[tuple[str, str, str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        "HTL-LIS",
        "Harbor View Hotel",
        "Lisbon",
        (
            ("RT-LIS-STD", "Standard Double", "118.00"),
            ("RT-LIS-SUP", "Superior Double", "146.00"),
            ("RT-LIS-STE", "Junior Suite", "215.00"),
        ),
    ),
    (
        "HTL-BER",
        "Spree Tower Hotel",
        "Berlin",
        (
            ("RT-BER-STD", "Standard Queen", "109.00"),
            ("RT-BER-STU", "Studio", "132.50"),
            ("RT-BER-EXE", "Executive King", "159.00"),
        ),
    ),
    (
        "HTL-CHI",
        "Lakeside Plaza",
        "Chicago",
        (
            ("RT-CHI-STD", "Standard King", "189.00"),
            ("RT-CHI-DLX", "Deluxe King", "229.00"),
            ("RT-CHI-STE", "Corner Suite", "349.00"),
        ),
    ),
    (
        "HTL-SIN",
        "Marina Garden Hotel",
        "Singapore",
        (
            ("RT-SIN-STD", "Garden Room", "176.00"),
            ("RT-SIN-DLX", "Deluxe Harbour Room", "238.00"),
            ("RT-SIN-CLB", "Club Room", "295.00"),
        ),
    ),
    (
        "HTL-TOR",
        "Queen Street Inn",
        "Toronto",
        (
            ("RT-TOR-STD", "Classic Room", "142.00"),
            ("RT-TOR-SUP", "Superior Room", "171.00"),
            ("RT-TOR-STE", "One-Bedroom Suite", "260.00"),
        ),
    ),
    (
        "HTL-MAD",
        "Retiro Park Hotel",
        "Madrid",
        (
            ("RT-MAD-STD", "Standard Twin", "97.00"),
            ("RT-MAD-SUP", "Superior Twin", "124.00"),
            ("RT-MAD-STE", "Park Suite", "188.00"),
        ),
    ),
)
"""(hotel_id, name, city, ((room_type_id, room name, nightly rate), ...)); shared with the generator."""

MANAGERS: tuple[tuple[str, str, str], ...] = (
    ("MGR-1001", "Helen Carter", "helen.carter@northwind.test"),
    ("MGR-1002", "Rafael Mendes", "rafael.mendes@northwind.test"),
    ("MGR-1003", "Ingrid Holm", "ingrid.holm@northwind.test"),
    ("MGR-1004", "Kwame Boateng", "kwame.boateng@northwind.test"),
)

_TRAVELLERS = (
    ("TRV-1001", "Maria Santos", "standard", 35),
    ("TRV-1002", "James Whitfield", "silver", 120),
    ("TRV-1003", "Aiko Tanaka", "gold", 410),
    ("TRV-1004", "Omar Haddad", "standard", 0),
    ("TRV-1005", "Lena Novak", "silver", 75),
    ("TRV-1006", "Peter Grant", "gold", 260),
    ("TRV-1007", "Sofia Rossi", "standard", 15),
    ("TRV-1008", "David Chen", "silver", 190),
)
_STATUS_CYCLE = ("confirmed", "completed", "checked_in", "confirmed", "cancelled")
_CHECK_IN_DAYS = {"confirmed": 1, "completed": -20, "checked_in": -1, "cancelled": 12}


def day(offset_days: int) -> str:
    """ISO date ``offset_days`` after TODAY (negative: before)."""
    return (TODAY + dt.timedelta(days=offset_days)).isoformat()


def room(room_type_id: str) -> tuple[str, str, str, str]:
    """``(hotel_id, room_type_id, room name, nightly rate)`` of a room type id."""
    for hotel_id, _name, _city, rooms in HOTELS:
        for rt_id, rt_name, rate in rooms:
            if rt_id == room_type_id:
                return hotel_id, rt_id, rt_name, rate
    raise KeyError(room_type_id)


def _booking_rows(n: int, traveller_id: str, rows: dict[str, list[dict[str, Any]]]) -> None:
    booking_id = f"BK-{1001 + n}"
    status = _STATUS_CYCLE[n % len(_STATUS_CYCLE)]
    _hotel, rt_id, _rt_name, rate = room(HOTELS[n % len(HOTELS)][3][n % 3][0])
    nights = 1 + n % 4 + (1 if status == "checked_in" else 0)  # a checked-in stay runs past today
    check_in = _CHECK_IN_DAYS[status] + (0 if status == "checked_in" else n % 5)
    total = Decimal(rate) * nights
    rows["bookings"].append(
        {
            "booking_id": booking_id,
            "traveller_id": traveller_id,
            "room_type_id": rt_id,
            "check_in": day(check_in),
            "check_out": day(check_in + nights),
            "nightly_rate": rate,
            "total": str(total),
            "status": status,
        }
    )
    payment_id = f"PAY-{1001 + n}"
    rows["payments"].append(
        {
            "payment_id": payment_id,
            "booking_id": booking_id,
            "method": ("corporate_card", "personal_card")[n % 2],
            "card_last4": f"{4000 + n * 37:04d}"[-4:],
            "amount": str(total),
            "created_on": day(check_in - 30),
        }
    )
    if status == "cancelled":
        rows["refunds"].append(
            {
                "refund_id": f"RF-{len(rows['refunds']) + 1:04d}",
                "booking_id": booking_id,
                "payment_id": payment_id,
                "amount": str(total),
                "reason": "cancellation",
                "created_on": day(-3),
            }
        )
    if status == "completed":
        rows["credit_transactions"].append(
            {
                "tx_id": f"CT-{len(rows['credit_transactions']) + 1:04d}",
                "traveller_id": traveller_id,
                "booking_id": booking_id,
                "kind": "earned",
                "credits": 10 * nights,
                "reason": "stay completed",
                "created_on": day(check_in + nights),
            }
        )


def seed_rows() -> dict[str, list[dict[str, Any]]]:
    """The seed rows, ``{table: [row, ...]}`` (plain JSON-able values, deterministic)."""
    rows: dict[str, list[dict[str, Any]]] = {
        t: []
        for t in (
            "managers",
            "travellers",
            "hotels",
            "room_types",
            "bookings",
            "payments",
            "refunds",
            "approval_requests",
            "credit_transactions",
        )
    }
    _directory_rows(rows)
    n = 0
    for i, (tid, name, tier, balance) in enumerate(_TRAVELLERS):
        email = name.lower().replace(" ", ".") + "@northwind.test"
        rows["travellers"].append(
            {
                "traveller_id": tid,
                "name": name,
                "email": email,
                "tier": tier,
                "credit_balance": balance,
                "manager_id": MANAGERS[i % len(MANAGERS)][0],
            }
        )
        for _ in range(2):
            _booking_rows(n, tid, rows)
            n += 1
    rows["approval_requests"] += [
        {
            "approval_id": "APR-0001",
            "booking_id": "BK-1001",
            "manager_id": "MGR-1001",
            "requested_room_type_id": "RT-LIS-SUP",
            "status": "pending",
            "reason": "Needs a desk for work.",
            "created_on": day(-2),
        },
        {
            "approval_id": "APR-0002",
            "booking_id": "BK-1004",
            "manager_id": "MGR-1002",
            "requested_room_type_id": "RT-SIN-DLX",
            "status": "approved",
            "reason": "Client meetings.",
            "created_on": day(-4),
        },
    ]
    return rows


def _directory_rows(rows: dict[str, list[dict[str, Any]]]) -> None:
    """The managers, hotels and room types of ``seed_rows``."""
    rows["managers"] = [
        {"manager_id": m, "name": name, "email": email} for m, name, email in MANAGERS
    ]
    for hotel_id, name, city, rooms in HOTELS:
        rows["hotels"].append({"hotel_id": hotel_id, "name": name, "city": city})
        rows["room_types"] += [
            {"room_type_id": rt, "hotel_id": hotel_id, "name": rt_name, "nightly_rate": rate}
            for rt, rt_name, rate in rooms
        ]
