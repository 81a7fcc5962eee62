"""Hotel write tools: room-change approval, room change, cancellation, credits (``tools`` lists them).

Each docstring is what the model reads; the module docstring of ``tools`` says how errors and ids of
new rows work.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from rewardbox.domains.base import ToolFailure
from rewardbox.domains.hotel.models import (
    ApprovalRequest,
    Payment,
)
from rewardbox.domains.hotel.tools_common import (
    TODAY,
    _audit,
    _booking,
    _confirmed,
    _credit,
    _paid,
    _refund,
    _room_of_hotel,
    _rows,
    _traveller,
    cancellation_fee,
)
from rewardbox.domains.toolkit import keyed_id, money


def request_approval(
    db: Session, booking_id: str, room_type_id: str, reason: str
) -> dict[str, Any]:
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
            raise ToolFailure(
                f"Approval request {a.approval_id} for {wanted.room_type_id} is already pending"
            )
    traveller = _traveller(db, b.traveller_id)
    approval = ApprovalRequest(
        approval_id=keyed_id(
            db, ApprovalRequest.approval_id, f"APR-{b.booking_id}-{wanted.room_type_id}"
        ),
        booking_id=b.booking_id,
        manager_id=traveller.manager_id,
        requested_room_type_id=wanted.room_type_id,
        status="pending",
        reason=reason,
        created_on=TODAY,
    )
    db.add(approval)
    _audit(db, "request_approval", approval_id=approval.approval_id, booking_id=b.booking_id)
    return {
        "approval_id": approval.approval_id,
        "booking_id": b.booking_id,
        "requested_room_type_id": wanted.room_type_id,
        "manager_id": traveller.manager_id,
        "status": "pending",
    }


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
    out: dict[str, Any] = {
        "booking_id": b.booking_id,
        "room_type_id": wanted.room_type_id,
        "nightly_rate": money(wanted.nightly_rate),
        "total": money(new_total),
    }
    if diff < 0:
        refund = _refund(db, b, -diff, "room_change")
        out.update(refund_id=refund.refund_id, refund_amount=money(-diff))
    elif diff > 0:
        first = _rows(db, Payment, b.booking_id, Payment.payment_id)[0]
        payment = Payment(
            payment_id=keyed_id(
                db, Payment.payment_id, f"PAY-{b.booking_id}-{wanted.room_type_id}"
            ),
            booking_id=b.booking_id,
            method=first.method,
            card_last4=first.card_last4,
            amount=diff,
            created_on=TODAY,
        )
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
        raise ToolFailure(
            f"Booking {b.booking_id} check-in date {b.check_in.isoformat()} has passed"
        )
    fee = cancellation_fee(b)
    amount = max(_paid(db, b) - fee, Decimal("0"))
    refund = _refund(db, b, amount, "cancellation") if amount > 0 else None
    b.status = "cancelled"
    _audit(db, "cancel_booking", booking_id=b.booking_id, fee=money(fee))
    return {
        "booking_id": b.booking_id,
        "status": b.status,
        "fee": money(fee),
        "refund_id": refund.refund_id if refund else None,
        "refund_amount": money(amount),
    }


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
        raise ToolFailure(
            f"Traveller {traveller.traveller_id} has only {traveller.credit_balance} credits"
        )
    if Decimal(credits) > _paid(db, b):
        raise ToolFailure(
            f"Booking {b.booking_id} has only {money(_paid(db, b))} paid that credits can cover"
        )
    refund = _refund(db, b, Decimal(credits), "credits")
    tx_id = _credit(db, traveller, b, "redeemed", credits, "redeemed on booking")
    traveller.credit_balance -= credits
    _audit(db, "redeem_credits", booking_id=b.booking_id, tx_id=tx_id)
    return {
        "booking_id": b.booking_id,
        "credits_redeemed": credits,
        "refund_id": refund.refund_id,
        "refund_amount": money(Decimal(credits)),
        "credit_balance": traveller.credit_balance,
    }


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
        raise ToolFailure(
            f"Booking {b.booking_id} is {b.status}; goodwill credits are only for checked_in "
            "or completed stays"
        )
    if credits < 1:
        raise ToolFailure("credits must be at least 1")
    traveller = _traveller(db, b.traveller_id)
    tx_id = _credit(db, traveller, b, "goodwill", credits, reason)
    traveller.credit_balance += credits
    _audit(db, "award_credits", booking_id=b.booking_id, tx_id=tx_id)
    return {
        "tx_id": tx_id,
        "booking_id": b.booking_id,
        "credits_awarded": credits,
        "credit_balance": traveller.credit_balance,
    }
