"""Hotel booking tools: plain functions over a session. Each docstring is what the model reads.

Every tool takes the episode's ``Session`` first (hidden from the model) and
returns a JSON-able dict. A tool's own error raises ``ToolFailure``; the server
turns it into ``{"error": "...", "tool": name}`` and writes nothing. Tools
enforce hard facts (only a confirmed booking can change, credits cannot exceed
the balance) and compute the cancellation fee; the policy rules that need
judgement (manager approval before a room change, redemption limits by tier,
goodwill credits once per booking, who owns a booking) are the agent's job.
Ids of new rows derive from their business key (``toolkit.keyed_id``), so the
order of the calls never changes them: ``RF-<booking id>-<REASON>``,
``CT-<booking id>-<KIND>``, ``APR-<booking id>-<room type id>`` and
``PAY-<booking id>-<room type id>``; the same fact recorded twice on one
booking gets ``-2``, ``-3``, ... in call order.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rewardbox.domains.base import ToolFailure
from rewardbox.domains.hotel.models import (
    ApprovalRequest,
    Booking,
    CreditTransaction,
    Hotel,
    Manager,
    Payment,
    Refund,
    RoomType,
    Traveller,
)
from rewardbox.domains.hotel.tools_common import (
    _booking,
    _booking_summary,
    _rows,
    _traveller,
)
from rewardbox.domains.hotel.tools_write import (
    award_credits,
    cancel_booking,
    change_room,
    redeem_credits,
    request_approval,
)
from rewardbox.domains.toolkit import get_row, money


def find_traveller(db: Session, email: str) -> dict[str, Any]:
    """Find a traveller (an employee) by email address.

    Args:
        email: the traveller's email address, e.g. "ana.lopez@northwind.test".

    Returns the traveller: traveller_id, name, email, tier (standard, silver or
    gold), credit_balance (loyalty credits), their manager (manager_id, name)
    and the ids of all their bookings.
    Error if no traveller has this email.
    """
    t = db.scalars(
        sa.select(Traveller).where(sa.func.lower(Traveller.email) == email.strip().lower())
    ).first()
    if t is None:
        raise ToolFailure(f"No traveller with email {email!r}")
    manager = db.get(Manager, t.manager_id)
    booking_ids = db.scalars(
        sa.select(Booking.booking_id)
        .where(Booking.traveller_id == t.traveller_id)
        .order_by(Booking.booking_id)
    )
    return {
        "traveller_id": t.traveller_id,
        "name": t.name,
        "email": t.email,
        "tier": t.tier,
        "credit_balance": t.credit_balance,
        "manager": {"manager_id": manager.manager_id, "name": manager.name} if manager else None,
        "booking_ids": list(booking_ids),
    }


def list_bookings(db: Session, traveller_id: str) -> dict[str, Any]:
    """List all bookings of a traveller, earliest check-in first.

    Args:
        traveller_id: the traveller id, e.g. "TRV-1001".

    Returns booking summaries: booking_id, hotel, city, room, check_in,
    check_out, status and total. Use get_booking for the details.
    Error if the traveller does not exist.
    """
    t = _traveller(db, traveller_id)
    bookings = db.scalars(
        sa.select(Booking)
        .where(Booking.traveller_id == t.traveller_id)
        .order_by(Booking.check_in, Booking.booking_id)
    )
    return {"traveller_id": t.traveller_id, "bookings": [_booking_summary(db, b) for b in bookings]}


def get_booking(db: Session, booking_id: str) -> dict[str, Any]:
    """Get the full details of one booking.

    Args:
        booking_id: the booking id, e.g. "BK-1042".

    Returns: booking_id, traveller_id, status (confirmed, checked_in, completed
    or cancelled), hotel (hotel_id, name, city), room_type (room_type_id, name),
    check_in, check_out, nights, nightly_rate, total, payments, refunds, the
    approval_requests for room changes (approval_id, requested_room_type_id,
    status pending/approved/denied) and the loyalty credits linked to the
    booking (kind earned/redeemed/goodwill, credits). Error if it does not exist.
    """
    b = _booking(db, booking_id)
    rt = db.get(RoomType, b.room_type_id)
    hotel = db.get(Hotel, rt.hotel_id)
    return {
        "booking_id": b.booking_id,
        "traveller_id": b.traveller_id,
        "status": b.status,
        "hotel": {"hotel_id": hotel.hotel_id, "name": hotel.name, "city": hotel.city},
        "room_type": {"room_type_id": rt.room_type_id, "name": rt.name},
        "check_in": b.check_in.isoformat(),
        "check_out": b.check_out.isoformat(),
        "nights": (b.check_out - b.check_in).days,
        "nightly_rate": money(b.nightly_rate),
        "total": money(b.total),
        **_booking_records(db, b),
    }


def _booking_records(db: Session, b: Booking) -> dict[str, list[dict[str, Any]]]:
    """The payments, refunds, approval requests and credit transactions of a booking (``get_booking``)."""
    approvals = _rows(db, ApprovalRequest, b.booking_id, ApprovalRequest.approval_id)
    return {
        "payments": [
            {
                "payment_id": p.payment_id,
                "method": p.method,
                "card_last4": p.card_last4,
                "amount": money(p.amount),
            }
            for p in _rows(db, Payment, b.booking_id, Payment.payment_id)
        ],
        "refunds": [
            {
                "refund_id": r.refund_id,
                "amount": money(r.amount),
                "reason": r.reason,
                "created_on": r.created_on.isoformat(),
            }
            for r in _rows(db, Refund, b.booking_id, Refund.refund_id)
        ],
        "approval_requests": [
            {
                "approval_id": a.approval_id,
                "requested_room_type_id": a.requested_room_type_id,
                "status": a.status,
                "created_on": a.created_on.isoformat(),
            }
            for a in approvals
        ],
        "credits": [
            {
                "tx_id": c.tx_id,
                "kind": c.kind,
                "credits": c.credits,
                "created_on": c.created_on.isoformat(),
            }
            for c in _rows(db, CreditTransaction, b.booking_id, CreditTransaction.tx_id)
        ],
    }


def list_room_types(db: Session, hotel_id: str) -> dict[str, Any]:
    """List the room types of a hotel with their nightly rates.

    Args:
        hotel_id: the hotel id (see get_booking), e.g. "HTL-LIS".

    Returns: hotel_id, name, city and room_types (room_type_id, name,
    nightly_rate), cheapest first. Error if the hotel does not exist.
    """
    hotel = get_row(db, Hotel, hotel_id, "Hotel")
    rooms = db.scalars(
        sa.select(RoomType)
        .where(RoomType.hotel_id == hotel.hotel_id)
        .order_by(RoomType.nightly_rate, RoomType.room_type_id)
    )
    return {
        "hotel_id": hotel.hotel_id,
        "name": hotel.name,
        "city": hotel.city,
        "room_types": [
            {"room_type_id": r.room_type_id, "name": r.name, "nightly_rate": money(r.nightly_rate)}
            for r in rooms
        ],
    }


TOOLS = (
    find_traveller,
    list_bookings,
    get_booking,
    list_room_types,
    request_approval,
    change_room,
    cancel_booking,
    redeem_credits,
    award_credits,
)
READONLY_TOOLS = frozenset({"find_traveller", "list_bookings", "get_booking", "list_room_types"})
