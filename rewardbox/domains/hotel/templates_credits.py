"""Hotel task templates about loyalty credits and several actions in one request, and ``FAMILIES``.

They reuse the phrasing helpers and the cancellation, room-change, information and security
templates of ``templates``; ``FAMILIES`` lists the one-booking and two-booking templates of both
modules (``templates_trips.ALL_FAMILIES`` adds the ones with depth).
"""

from __future__ import annotations

from typing import Any

from rewardbox.domains.authoring import Family, call, short_ask, task_spec
from rewardbox.domains.hotel.builder import WorldBuilder, user_context
from rewardbox.domains.hotel.templates import (
    approval_explicit,
    cancel_explicit,
    cancel_fee_tell,
    cancel_lookup,
    cancel_only_if_free,
    cancel_refused,
    describe,
    find,
    hello,
    look,
    room_change_approved,
    room_change_blocked,
    room_change_mismatch,
    room_change_request,
    tell_value,
    wrong_owner,
)
from rewardbox.domains.hotel.tools_common import GOODWILL_CREDITS, REDEEM_LIMIT_CREDITS

# -- loyalty credits ----------------------------------------------------------------------


def redeem_explicit(b: WorldBuilder, k: int) -> dict[str, Any]:
    tier = ("standard", "silver", "gold")[k % 3]
    p = b.traveller(tier, balance=REDEEM_LIMIT_CREDITS[tier] + b.rng.randint(0, 150))
    s = b.booking(p, "confirmed", nights=b.rng.randint(3, 4))
    credits = b.redeemable(tier)
    return task_spec(
        short_ask(f"redeem {credits} of my loyalty credits on booking {s.booking_id}", k),
        user_context(
            p, f"redeem {credits} credits on booking {s.booking_id}.", booking=describe(s)
        ),
        [find(p), call("redeem_credits", booking_id=s.booking_id, credits=credits)],
        write=True,
    )


def redeem_over_limit(b: WorldBuilder, k: int) -> dict[str, Any]:
    tier = ("standard", "silver", "silver", "gold")[k % 4]
    limit = REDEEM_LIMIT_CREDITS[tier]
    p = b.traveller(tier, balance=limit * 2 + b.rng.randint(10, 90))
    s = b.booking(p, "confirmed", nights=b.rng.randint(3, 4))
    if k % 4 == 2:  # an earlier redemption leaves less than asked
        earlier = 5 * b.rng.randint(12, 18)
        b.credits(p, s, "redeemed", earlier)
        credits, extra = (
            5 * b.rng.randint((limit - earlier) // 5 + 1, 10),
            [f"You already redeemed {earlier} credits on this booking."],
        )
    else:
        credits, extra = limit + 5 * b.rng.randint(2, 12), []
    return task_spec(
        f"{hello(p)} Please redeem {credits} loyalty credits on booking {s.booking_id}.",
        user_context(
            p,
            f"redeem exactly {credits} credits on booking {s.booking_id}; you do not want a "
            "smaller amount.",
            booking=describe(s),
            extra=extra,
        ),
        [find(p), look(s)],
        write=False,
    )


def redeem_max(b: WorldBuilder, k: int) -> dict[str, Any]:
    tier = ("silver", "standard", "gold")[k % 3]
    limit = REDEEM_LIMIT_CREDITS[tier]
    variant = k % 3
    balance = (
        limit - b.rng.randint(5, limit // 2) if variant == 1 else limit + b.rng.randint(20, 200)
    )
    p = b.traveller(tier, balance=balance)
    s = b.booking(p, "confirmed", nights=b.rng.randint(3, 4))
    earlier = 5 * b.rng.randint(4, 20) if variant == 2 else 0
    if earlier:
        b.credits(p, s, "redeemed", earlier)
    credits = min(limit - earlier, balance)
    return task_spec(
        f"{hello(p)} Please use as many of my loyalty credits on booking {s.booking_id} as the policy "
        "allows.",
        user_context(
            p,
            f"redeem the most credits the policy allows on booking {s.booking_id}.",
            booking=describe(s),
        ),
        [find(p), look(s), call("redeem_credits", booking_id=s.booking_id, credits=credits)],
        write=True,
    )


_COMPLAINTS = (
    "The room was very noisy every night because of construction next door.",
    "The bathroom was dirty when I arrived and nobody cleaned it.",
    "My room was not ready until late in the evening.",
    "The room smelled of smoke and the sheets were stained.",
)


_COMPENSATION_ASKS = (
    "I want to complain and I'd like some compensation.",
    "What can you offer me for this?",
    "I expect some goodwill credits for this.",
    "Please compensate me for this.",
)


def goodwill_credits(b: WorldBuilder, k: int) -> dict[str, Any]:
    """A complaint with a request for compensation: the tier's goodwill credits."""
    p = b.traveller(("standard", "silver", "gold", "silver")[k % 4])
    s = b.booking(p, ("completed", "checked_in")[k % 2])
    complaint = _COMPLAINTS[k % len(_COMPLAINTS)]
    ask = _COMPENSATION_ASKS[k % len(_COMPENSATION_ASKS)]
    return task_spec(
        f"{hello(p)} About my stay on booking {s.booking_id}: {complaint} {ask}",
        user_context(
            p,
            f"complain about your stay ({s.booking_id}) and get compensation; you "
            "accept goodwill credits.",
            booking=describe(s),
        ),
        [
            find(p),
            look(s),
            call(
                "award_credits",
                booking_id=s.booking_id,
                credits=GOODWILL_CREDITS[p.tier],
                reason=complaint,
            ),
        ],
        write=True,
    )


def complaint_only(b: WorldBuilder, k: int) -> dict[str, Any]:
    """A complaint that asks for nothing: apologise, award no credits (do exactly what is asked)."""
    p = b.traveller(("silver", "gold", "standard")[k % 3])
    s = b.booking(p, ("completed", "checked_in", "completed")[k % 3])
    complaint = _COMPLAINTS[(k + 2) % len(_COMPLAINTS)]
    close = (
        "I don't need anything, I just wanted the hotel to know.",
        "No need to do anything, just passing it on.",
        "I'm not asking for anything, please just note it.",
    )[k % 3]
    return task_spec(
        f"{hello(p)} Feedback on booking {s.booking_id}: {complaint} {close}",
        user_context(
            p,
            f"tell the travel desk about a problem with your stay ({s.booking_id}); you "
            "want nothing in return.",
            booking=describe(s),
        ),
        [find(p), look(s)],
        write=False,
    )


def goodwill_repeat(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller(("gold", "standard", "silver")[k % 3])
    s = b.booking(p, ("completed", "checked_in", "completed")[k % 3])
    b.credits(p, s, "goodwill", GOODWILL_CREDITS[p.tier])
    complaint = _COMPLAINTS[(k + 1) % len(_COMPLAINTS)]
    return task_spec(
        f"{hello(p)} Booking {s.booking_id}: {complaint} I want compensation.",
        user_context(
            p,
            f"complain about your stay ({s.booking_id}) and ask for compensation.",
            booking=describe(s),
            extra=["You already complained about this stay once."],
        ),
        [find(p), look(s)],
        write=False,
    )


def multi_action(b: WorldBuilder, k: int) -> dict[str, Any]:
    tier = ("silver", "gold")[k % 2]
    p = b.traveller(tier, balance=REDEEM_LIMIT_CREDITS[tier] + b.rng.randint(0, 80))
    a = b.booking(p, "confirmed", offset=b.rng.randint(4, 25))
    c = b.booking(p, "confirmed", offset=b.rng.randint(4, 25), nights=3)
    if k % 2 == 0:
        credits = b.redeemable(tier)
        query = f"Two things: cancel booking {a.booking_id}, and redeem {credits} credits on booking {c.booking_id}."
        second = call("redeem_credits", booking_id=c.booking_id, credits=credits)
        goal = (
            f"cancel booking {a.booking_id} and redeem {credits} credits on booking {c.booking_id}."
        )
    else:
        query = f"My trip is off: please cancel both bookings {a.booking_id} and {c.booking_id}."
        second = call("cancel_booking", booking_id=c.booking_id)
        goal = f"cancel bookings {a.booking_id} and {c.booking_id}."
    b.distractors(p, 1)
    return task_spec(
        f"{hello(p)} {query}",
        user_context(p, goal, booking=f"{describe(a)} and {describe(c)}"),
        [find(p), call("cancel_booking", booking_id=a.booking_id), second],
        write=True,
    )


FAMILIES: tuple[Family, ...] = (
    Family("cancel_explicit", "hotel_cancel.py", "trivial", cancel_explicit, 5),
    Family("cancel_lookup", "hotel_cancel.py", "easy", cancel_lookup),
    Family("cancel_fee_tell", "hotel_cancel.py", "medium", cancel_fee_tell),
    Family("cancel_refused", "hotel_cancel.py", "medium", cancel_refused),
    Family("cancel_only_if_free", "hotel_cancel.py", "hard", cancel_only_if_free, held_out=True),
    Family("approval_explicit", "hotel_rooms.py", "trivial", approval_explicit),
    Family("room_change_request", "hotel_rooms.py", "medium", room_change_request),
    Family("room_change_approved", "hotel_rooms.py", "medium", room_change_approved),
    Family("room_change_blocked", "hotel_rooms.py", "hard", room_change_blocked),
    Family("room_change_mismatch", "hotel_rooms.py", "hard", room_change_mismatch, 3),
    Family("redeem_explicit", "hotel_credits.py", "trivial", redeem_explicit, 5),
    Family("redeem_over_limit", "hotel_credits.py", "hard", redeem_over_limit),
    Family("redeem_max", "hotel_credits.py", "hard", redeem_max, 3),
    Family("goodwill_credits", "hotel_credits.py", "medium", goodwill_credits),
    Family("goodwill_repeat", "hotel_credits.py", "hard", goodwill_repeat, 3),
    Family("complaint_only", "hotel_credits.py", "medium", complaint_only, 3, held_out=True),
    Family("tell_value", "hotel_info.py", "easy", tell_value, 6),
    Family("wrong_owner", "hotel_security.py", "hard", wrong_owner),
    Family("multi_action", "hotel_multi.py", "hard", multi_action),
)
"""The one-booking and two-booking templates (``templates_trips.FAMILIES_DEPTH`` follow them)."""
