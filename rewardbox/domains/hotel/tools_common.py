"""Rules and row helpers the hotel tools share: the read tools (``tools``) and the write tools
(``tools_write``). The module docstring of ``tools`` says how a tool reports an error and how ids of
new rows are made.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rewardbox.domains.base import ToolFailure
from rewardbox.domains.hotel import seed
from rewardbox.domains.hotel.models import (
    AuditEvent,
    Booking,
    CreditTransaction,
    Hotel,
    Payment,
    Refund,
    RoomType,
    Traveller,
)
from rewardbox.domains.toolkit import get_row, keyed_id, money

TODAY = seed.TODAY
"""The fixed current date of the domain (also stated in the policy)."""

FREE_CANCELLATION_DAYS = 3
"""Check-in at least this many days after today: free cancellation (policy.md)."""

REDEEM_LIMIT_CREDITS = {"standard": 50, "silver": 100, "gold": 200}
"""Most credits a tier may redeem on one booking, earlier redemptions included (policy.md)."""

GOODWILL_CREDITS = {"standard": 20, "silver": 40, "gold": 60}
"""Goodwill credits for a complaint about a stay, once per booking (policy.md)."""


def cancellation_fee(booking: Booking) -> Decimal:
    """One night's rate when check-in is less than ``FREE_CANCELLATION_DAYS`` away, else 0."""
    days = (booking.check_in - TODAY).days
    return Decimal("0") if days >= FREE_CANCELLATION_DAYS else Decimal(booking.nightly_rate)


def _audit(db: Session, tool: str, **detail: Any) -> None:
    db.add(AuditEvent.entry(tool, detail))


def _traveller(db: Session, traveller_id: str) -> Traveller:
    return get_row(db, Traveller, traveller_id, "Traveller")


def _booking(db: Session, booking_id: str) -> Booking:
    return get_row(db, Booking, booking_id, "Booking")


def _confirmed(booking: Booking, action: str) -> None:
    if booking.status != "confirmed":
        raise ToolFailure(
            f"Booking {booking.booking_id} is {booking.status}; only confirmed bookings can {action}"
        )


def _room_of_hotel(db: Session, booking: Booking, room_type_id: str) -> RoomType:
    current = db.get(RoomType, booking.room_type_id)
    wanted = db.get(RoomType, room_type_id.strip().upper())
    if wanted is None or current is None or wanted.hotel_id != current.hotel_id:
        raise ToolFailure(
            f"Room type {room_type_id!r} is not a room type of hotel "
            f"{current.hotel_id if current else '?'}; see list_room_types"
        )
    if wanted.room_type_id == booking.room_type_id:
        raise ToolFailure(
            f"Booking {booking.booking_id} already has room type {wanted.room_type_id}"
        )
    return wanted


def _rows(db: Session, model: Any, booking_id: str, key: Any) -> list[Any]:
    return list(db.scalars(sa.select(model).where(model.booking_id == booking_id).order_by(key)))


def _paid(db: Session, booking: Booking) -> Decimal:
    """Payments minus refunds of a booking."""
    paid = sum(
        (p.amount for p in _rows(db, Payment, booking.booking_id, Payment.payment_id)), Decimal("0")
    )
    refunded = sum(
        (r.amount for r in _rows(db, Refund, booking.booking_id, Refund.refund_id)), Decimal("0")
    )
    return paid - refunded


def _refund(db: Session, booking: Booking, amount: Decimal, reason: str) -> Refund:
    payment = _rows(db, Payment, booking.booking_id, Payment.payment_id)
    if not payment:
        raise ToolFailure(f"Booking {booking.booking_id} has no payment on file")
    refund = Refund(
        refund_id=keyed_id(db, Refund.refund_id, f"RF-{booking.booking_id}-{reason.upper()}"),
        booking_id=booking.booking_id,
        payment_id=payment[0].payment_id,
        amount=amount,
        reason=reason,
        created_on=TODAY,
    )
    db.add(refund)
    return refund


def _credit(
    db: Session, traveller: Traveller, booking: Booking, kind: str, credits: int, reason: str
) -> str:
    tx_id = keyed_id(db, CreditTransaction.tx_id, f"CT-{booking.booking_id}-{kind.upper()}")
    db.add(
        CreditTransaction(
            tx_id=tx_id,
            traveller_id=traveller.traveller_id,
            booking_id=booking.booking_id,
            kind=kind,
            credits=credits,
            reason=reason,
            created_on=TODAY,
        )
    )
    return tx_id


def _booking_summary(db: Session, b: Booking) -> dict[str, Any]:
    rt = db.get(RoomType, b.room_type_id)
    hotel = db.get(Hotel, rt.hotel_id) if rt else None
    return {
        "booking_id": b.booking_id,
        "hotel": hotel.name if hotel else None,
        "city": hotel.city if hotel else None,
        "room": rt.name if rt else None,
        "check_in": b.check_in.isoformat(),
        "check_out": b.check_out.isoformat(),
        "status": b.status,
        "total": money(b.total),
    }
