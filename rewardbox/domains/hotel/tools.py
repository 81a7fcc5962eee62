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

from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from rewardbox.domains.base import ToolFailure
from rewardbox.domains.hotel import seed
from rewardbox.domains.hotel.models import (
    ApprovalRequest,
    AuditEvent,
    Booking,
    CreditTransaction,
    Hotel,
    Manager,
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
        raise ToolFailure(f"Booking {booking.booking_id} is {booking.status}; only confirmed bookings can {action}")


def _room_of_hotel(db: Session, booking: Booking, room_type_id: str) -> RoomType:
    current = db.get(RoomType, booking.room_type_id)
    wanted = db.get(RoomType, room_type_id.strip().upper())
    if wanted is None or current is None or wanted.hotel_id != current.hotel_id:
        raise ToolFailure(f"Room type {room_type_id!r} is not a room type of hotel "
                          f"{current.hotel_id if current else '?'}; see list_room_types")
    if wanted.room_type_id == booking.room_type_id:
        raise ToolFailure(f"Booking {booking.booking_id} already has room type {wanted.room_type_id}")
    return wanted


def _rows(db: Session, model: Any, booking_id: str, key: Any) -> list[Any]:
    return list(db.scalars(sa.select(model).where(model.booking_id == booking_id).order_by(key)))


def _paid(db: Session, booking: Booking) -> Decimal:
    """Payments minus refunds of a booking."""
    paid = sum((p.amount for p in _rows(db, Payment, booking.booking_id, Payment.payment_id)), Decimal("0"))
    refunded = sum((r.amount for r in _rows(db, Refund, booking.booking_id, Refund.refund_id)), Decimal("0"))
    return paid - refunded


def _refund(db: Session, booking: Booking, amount: Decimal, reason: str) -> Refund:
    payment = _rows(db, Payment, booking.booking_id, Payment.payment_id)
    if not payment:
        raise ToolFailure(f"Booking {booking.booking_id} has no payment on file")
    refund = Refund(refund_id=keyed_id(db, Refund.refund_id, f"RF-{booking.booking_id}-{reason.upper()}"), booking_id=booking.booking_id,
                    payment_id=payment[0].payment_id, amount=amount, reason=reason, created_on=TODAY)
    db.add(refund)
    return refund


def _credit(db: Session, traveller: Traveller, booking: Booking, kind: str, credits: int, reason: str) -> str:
    tx_id = keyed_id(db, CreditTransaction.tx_id, f"CT-{booking.booking_id}-{kind.upper()}")
    db.add(CreditTransaction(tx_id=tx_id, traveller_id=traveller.traveller_id, booking_id=booking.booking_id,
                             kind=kind, credits=credits, reason=reason, created_on=TODAY))
    return tx_id


def _booking_summary(db: Session, b: Booking) -> dict[str, Any]:
    rt = db.get(RoomType, b.room_type_id)
    hotel = db.get(Hotel, rt.hotel_id) if rt else None
    return {"booking_id": b.booking_id, "hotel": hotel.name if hotel else None, "city": hotel.city if hotel else None,
            "room": rt.name if rt else None, "check_in": b.check_in.isoformat(), "check_out": b.check_out.isoformat(),
            "status": b.status, "total": money(b.total)}


def find_traveller(db: Session, email: str) -> dict[str, Any]:
    """Find a traveller (an employee) by email address.

    Args:
        email: the traveller's email address, e.g. "ana.lopez@northwind.test".

    Returns the traveller: traveller_id, name, email, tier (standard, silver or
    gold), credit_balance (loyalty credits), their manager (manager_id, name)
    and the ids of all their bookings.
    Error if no traveller has this email.
    """
    t = db.scalars(sa.select(Traveller).where(sa.func.lower(Traveller.email) == email.strip().lower())).first()
    if t is None:
        raise ToolFailure(f"No traveller with email {email!r}")
    manager = db.get(Manager, t.manager_id)
    booking_ids = db.scalars(sa.select(Booking.booking_id).where(Booking.traveller_id == t.traveller_id)
                             .order_by(Booking.booking_id))
    return {"traveller_id": t.traveller_id, "name": t.name, "email": t.email, "tier": t.tier,
            "credit_balance": t.credit_balance,
            "manager": {"manager_id": manager.manager_id, "name": manager.name} if manager else None,
            "booking_ids": list(booking_ids)}


def list_bookings(db: Session, traveller_id: str) -> dict[str, Any]:
    """List all bookings of a traveller, earliest check-in first.

    Args:
        traveller_id: the traveller id, e.g. "TRV-1001".

    Returns booking summaries: booking_id, hotel, city, room, check_in,
    check_out, status and total. Use get_booking for the details.
    Error if the traveller does not exist.
    """
    t = _traveller(db, traveller_id)
    bookings = db.scalars(sa.select(Booking).where(Booking.traveller_id == t.traveller_id)
                          .order_by(Booking.check_in, Booking.booking_id))
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
    approvals = _rows(db, ApprovalRequest, b.booking_id, ApprovalRequest.approval_id)
    return {
        "booking_id": b.booking_id, "traveller_id": b.traveller_id, "status": b.status,
        "hotel": {"hotel_id": hotel.hotel_id, "name": hotel.name, "city": hotel.city},
        "room_type": {"room_type_id": rt.room_type_id, "name": rt.name},
        "check_in": b.check_in.isoformat(), "check_out": b.check_out.isoformat(),
        "nights": (b.check_out - b.check_in).days, "nightly_rate": money(b.nightly_rate), "total": money(b.total),
        "payments": [{"payment_id": p.payment_id, "method": p.method, "card_last4": p.card_last4,
                      "amount": money(p.amount)} for p in _rows(db, Payment, b.booking_id, Payment.payment_id)],
        "refunds": [{"refund_id": r.refund_id, "amount": money(r.amount), "reason": r.reason,
                     "created_on": r.created_on.isoformat()}
                    for r in _rows(db, Refund, b.booking_id, Refund.refund_id)],
        "approval_requests": [{"approval_id": a.approval_id, "requested_room_type_id": a.requested_room_type_id,
                               "status": a.status, "created_on": a.created_on.isoformat()} for a in approvals],
        "credits": [{"tx_id": c.tx_id, "kind": c.kind, "credits": c.credits, "created_on": c.created_on.isoformat()}
                    for c in _rows(db, CreditTransaction, b.booking_id, CreditTransaction.tx_id)],
    }


def list_room_types(db: Session, hotel_id: str) -> dict[str, Any]:
    """List the room types of a hotel with their nightly rates.

    Args:
        hotel_id: the hotel id (see get_booking), e.g. "HTL-LIS".

    Returns: hotel_id, name, city and room_types (room_type_id, name,
    nightly_rate), cheapest first. Error if the hotel does not exist.
    """
    hotel = get_row(db, Hotel, hotel_id, "Hotel")
    rooms = db.scalars(sa.select(RoomType).where(RoomType.hotel_id == hotel.hotel_id)
                       .order_by(RoomType.nightly_rate, RoomType.room_type_id))
    return {"hotel_id": hotel.hotel_id, "name": hotel.name, "city": hotel.city,
            "room_types": [{"room_type_id": r.room_type_id, "name": r.name, "nightly_rate": money(r.nightly_rate)}
                           for r in rooms]}


def request_approval(db: Session, booking_id: str, room_type_id: str, reason: str) -> dict[str, Any]:
    """Ask the traveller's manager to approve a room change (upgrade or downgrade).

    The booking does not change; the request waits for the manager. Check the
    booking's approval_requests first (get_booking): file no second request for
    a room type that already has one.

    Args:
        booking_id: the booking id, e.g. "BK-1042".
        room_type_id: the room type the traveller wants (see list_room_types), e.g. "RT-LIS-SUP".
        reason: a short reason in your own words.

    Returns: approval_id, booking_id, requested_room_type_id, manager_id and
    status "pending". Error if the booking does not exist or is not confirmed,
    the room type is not of the same hotel or is the current one, or a pending
    request for that room type already exists.
    """
    b = _booking(db, booking_id)
    _confirmed(b, "change room")
    wanted = _room_of_hotel(db, b, room_type_id)
    for a in _rows(db, ApprovalRequest, b.booking_id, ApprovalRequest.approval_id):
        if a.requested_room_type_id == wanted.room_type_id and a.status == "pending":
            raise ToolFailure(f"Approval request {a.approval_id} for {wanted.room_type_id} is already pending")
    traveller = _traveller(db, b.traveller_id)
    approval = ApprovalRequest(approval_id=keyed_id(db, ApprovalRequest.approval_id, f"APR-{b.booking_id}-{wanted.room_type_id}"), booking_id=b.booking_id,
                               manager_id=traveller.manager_id, requested_room_type_id=wanted.room_type_id,
                               status="pending", reason=reason, created_on=TODAY)
    db.add(approval)
    _audit(db, "request_approval", approval_id=approval.approval_id, booking_id=b.booking_id)
    return {"approval_id": approval.approval_id, "booking_id": b.booking_id,
            "requested_room_type_id": wanted.room_type_id, "manager_id": traveller.manager_id, "status": "pending"}


def change_room(db: Session, booking_id: str, room_type_id: str) -> dict[str, Any]:
    """Move a confirmed booking to another room type of the same hotel and reprice it.

    Policy: call this ONLY when get_booking shows an approved approval request
    for exactly this room type. The new total is the new nightly rate times the
    nights; a cheaper room refunds the difference to the card, a dearer room
    charges the difference to the same card.

    Args:
        booking_id: the booking id, e.g. "BK-1042".
        room_type_id: the new room type (see list_room_types), e.g. "RT-LIS-STD".

    Returns: booking_id, room_type_id, nightly_rate, new total, and
    refund_amount or extra_charge. Error if the booking does not exist or is
    not confirmed, or the room type is not of the same hotel or is the current one.
    """
    b = _booking(db, booking_id)
    _confirmed(b, "change room")
    wanted = _room_of_hotel(db, b, room_type_id)
    new_total = wanted.nightly_rate * (b.check_out - b.check_in).days
    diff = new_total - b.total
    out: dict[str, Any] = {"booking_id": b.booking_id, "room_type_id": wanted.room_type_id,
                           "nightly_rate": money(wanted.nightly_rate), "total": money(new_total)}
    if diff < 0:
        refund = _refund(db, b, -diff, "room_change")
        out.update(refund_id=refund.refund_id, refund_amount=money(-diff))
    elif diff > 0:
        first = _rows(db, Payment, b.booking_id, Payment.payment_id)[0]
        payment = Payment(payment_id=keyed_id(db, Payment.payment_id, f"PAY-{b.booking_id}-{wanted.room_type_id}"), booking_id=b.booking_id,
                          method=first.method, card_last4=first.card_last4, amount=diff, created_on=TODAY)
        db.add(payment)
        out.update(payment_id=payment.payment_id, extra_charge=money(diff))
    b.room_type_id, b.nightly_rate, b.total = wanted.room_type_id, wanted.nightly_rate, new_total
    _audit(db, "change_room", booking_id=b.booking_id, room_type_id=wanted.room_type_id)
    return out


def cancel_booking(db: Session, booking_id: str) -> dict[str, Any]:
    """Cancel a confirmed booking and refund it, minus the late-cancellation fee.

    Check-in 3 or more days after today: no fee. Check-in today, tomorrow or
    the day after: the fee is one night's rate. The rest of what was paid is
    refunded to the card.

    Args:
        booking_id: the booking id, e.g. "BK-1042".

    Returns: booking_id, the new status "cancelled", fee, refund_id and
    refund_amount. Error if the booking does not exist, is not confirmed
    (checked in, completed or already cancelled) or its check-in date has passed.
    """
    b = _booking(db, booking_id)
    _confirmed(b, "be cancelled")
    if b.check_in < TODAY:
        raise ToolFailure(f"Booking {b.booking_id} check-in date {b.check_in.isoformat()} has passed")
    fee = cancellation_fee(b)
    amount = max(_paid(db, b) - fee, Decimal("0"))
    refund = _refund(db, b, amount, "cancellation") if amount > 0 else None
    b.status = "cancelled"
    _audit(db, "cancel_booking", booking_id=b.booking_id, fee=money(fee))
    return {"booking_id": b.booking_id, "status": b.status, "fee": money(fee),
            "refund_id": refund.refund_id if refund else None, "refund_amount": money(amount)}


def redeem_credits(db: Session, booking_id: str, credits: int) -> dict[str, Any]:
    """Redeem the traveller's loyalty credits on a confirmed booking (1 credit = 1.00 USD back to the card).

    Check the tier limit in the policy BEFORE calling this tool.

    Args:
        booking_id: the booking id, e.g. "BK-1042".
        credits: how many credits to redeem, a whole number, e.g. 40.

    Returns: booking_id, credits_redeemed, refund_amount and the traveller's
    new credit_balance. Error if the booking does not exist or is not
    confirmed, credits is below 1, more than the balance, or more than what
    is left to pay back on the booking.
    """
    b = _booking(db, booking_id)
    _confirmed(b, "redeem credits")
    traveller = _traveller(db, b.traveller_id)
    if credits < 1:
        raise ToolFailure("credits must be at least 1")
    if credits > traveller.credit_balance:
        raise ToolFailure(f"Traveller {traveller.traveller_id} has only {traveller.credit_balance} credits")
    if Decimal(credits) > _paid(db, b):
        raise ToolFailure(f"Booking {b.booking_id} has only {money(_paid(db, b))} paid that credits can cover")
    refund = _refund(db, b, Decimal(credits), "credits")
    tx_id = _credit(db, traveller, b, "redeemed", credits, "redeemed on booking")
    traveller.credit_balance -= credits
    _audit(db, "redeem_credits", booking_id=b.booking_id, tx_id=tx_id)
    return {"booking_id": b.booking_id, "credits_redeemed": credits, "refund_id": refund.refund_id,
            "refund_amount": money(Decimal(credits)), "credit_balance": traveller.credit_balance}


def award_credits(db: Session, booking_id: str, credits: int, reason: str) -> dict[str, Any]:
    """Award goodwill loyalty credits to the traveller of a stay they complained about.

    Check the policy for the amount by tier and whether the booking already
    got goodwill credits BEFORE calling this tool.

    Args:
        booking_id: the booking id of the stay, e.g. "BK-1042".
        credits: how many credits to award, a whole number, e.g. 20.
        reason: a short summary of the complaint in your own words.

    Returns: tx_id, booking_id, credits_awarded and the traveller's new
    credit_balance. Error if the booking does not exist, the stay has not
    started (only checked_in or completed bookings), or credits is below 1.
    """
    b = _booking(db, booking_id)
    if b.status not in ("checked_in", "completed"):
        raise ToolFailure(f"Booking {b.booking_id} is {b.status}; goodwill credits are only for checked_in "
                          "or completed stays")
    if credits < 1:
        raise ToolFailure("credits must be at least 1")
    traveller = _traveller(db, b.traveller_id)
    tx_id = _credit(db, traveller, b, "goodwill", credits, reason)
    traveller.credit_balance += credits
    _audit(db, "award_credits", booking_id=b.booking_id, tx_id=tx_id)
    return {"tx_id": tx_id, "booking_id": b.booking_id, "credits_awarded": credits,
            "credit_balance": traveller.credit_balance}


TOOLS = (find_traveller, list_bookings, get_booking, list_room_types, request_approval, change_room,
         cancel_booking, redeem_credits, award_credits)
READONLY_TOOLS = frozenset({"find_traveller", "list_bookings", "get_booking", "list_room_types"})
