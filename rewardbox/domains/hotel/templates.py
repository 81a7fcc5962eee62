"""Parametrised hotel task templates, from one explicit call to policy traps.

Each template builds one task from a ``WorldBuilder`` and a variant number
``k``: the data patch (through the builder), the first user message, the
simulated user's facts, the golden tool interactions, and optionally values the
agent must tell the user. Traps (the right action is to refuse or to do nothing)
have golden interactions that only read, so their golden state equals the
initial state. The credit and multi-action templates and the ordered ``FAMILIES``
are in ``templates_credits``; the ones with depth in ``templates_trips``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from rewardbox.domains.authoring import call, short_ask, task_spec
from rewardbox.domains.hotel.builder import Person, Stay, WorldBuilder, user_context
from rewardbox.domains.toolkit import money

_OPENINGS = (
    "Hi, I'm {name} ({email}).",
    "Hello, {name} here, email {email}.",
    "Good afternoon, this is {name} ({email}).",
    "Hi travel desk, {name} writing - {email}.",
)


def hello(p: Person) -> str:
    """The opening of a first message: who is writing (name and email), in one of four wordings by traveller."""
    return _OPENINGS[int(p.traveller_id[-3:]) % len(_OPENINGS)].format(name=p.name, email=p.email)


def describe(s: Stay) -> str:
    """A booking as the traveller knows it."""
    return f"{s.booking_id} ({s.hotel}, {s.city}, {s.room.name}, {s.check_in} to {s.check_out})"


def find(p: Person) -> dict[str, Any]:
    return call("find_traveller", email=p.email)


def look(s: Stay) -> dict[str, Any]:
    return call("get_booking", booking_id=s.booking_id)


# -- cancellations ------------------------------------------------------------------------


def cancel_explicit(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller()
    s = b.booking(p, "confirmed", offset=b.rng.randint(3, 30))
    b.distractors(p, 1)
    return task_spec(
        short_ask(f"cancel my booking {s.booking_id}", k),
        user_context(p, f"cancel booking {s.booking_id}.", booking=describe(s)),
        [find(p), call("cancel_booking", booking_id=s.booking_id)],
        write=True,
    )


def cancel_lookup(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller()
    b.distractors(p, 1 + k % 2)
    s = b.booking(p, "confirmed", offset=b.rng.randint(4, 30))
    b.distractors(p, 1)
    return task_spec(
        f"{hello(p)} Please cancel my booking at the {s.hotel} in {s.city}.",
        user_context(
            p,
            f"cancel your booking at the {s.hotel} in {s.city} (you do not know its id).",
            extra=[f"Stay: {s.check_in} to {s.check_out}"],
        ),
        [
            find(p),
            call("list_bookings", traveller_id=p.traveller_id),
            call("cancel_booking", booking_id=s.booking_id),
        ],
        write=True,
    )


def cancel_fee_tell(b: WorldBuilder, k: int) -> dict[str, Any]:
    """A late cancellation; the refund (and in one variant the fee) to tell. Three or more nights, so the
    refund (total minus one night) never equals the fee (one night) and stating the fee alone fails."""
    p = b.traveller()
    s = b.booking(
        p, "confirmed", offset=(0, 1, 2, b.rng.randint(1, 2))[k % 4], nights=b.rng.randint(3, 5)
    )
    refund, fee = s.refund_if_cancelled_now(fee=True), s.room.rate
    both = k % 4 == 3
    ask = "what the fee is and how much will be refunded" if both else "how much will be refunded"
    return task_spec(
        f"{hello(p)} Please cancel booking {s.booking_id} and tell me {ask}.",
        user_context(
            p,
            f"cancel booking {s.booking_id} even if there is a fee, and learn "
            f"{'the fee and ' if both else ''}the refund amount.",
            booking=describe(s),
        ),
        [find(p), call("cancel_booking", booking_id=s.booking_id)],
        write=True,
        values=[fee, refund] if both else [refund],
    )


def cancel_refused(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller()
    s = b.booking(p, ("checked_in", "completed", "checked_in", "cancelled")[k % 4])
    b.distractors(p, 1)
    return task_spec(
        f"{hello(p)} Please cancel booking {s.booking_id} and refund me.",
        user_context(p, f"cancel booking {s.booking_id} and get a refund.", booking=describe(s)),
        [find(p), look(s)],
        write=False,
    )


def cancel_only_if_free(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller()
    offset = (3, 2, b.rng.randint(4, 20), b.rng.randint(0, 1))[k % 4]
    free = offset >= 3
    s = b.booking(p, "confirmed", offset=offset, nights=b.rng.randint(1, 3))
    b.distractors(p, 1)
    golden = [find(p), look(s)] + (
        [call("cancel_booking", booking_id=s.booking_id)] if free else []
    )
    return task_spec(
        f"{hello(p)} Please cancel booking {s.booking_id}, but only if it is free of charge. "
        "If there is a cancellation fee, keep the booking.",
        user_context(
            p,
            f"cancel booking {s.booking_id} only if there is no fee; with a fee, keep it.",
            booking=describe(s),
        ),
        golden,
        write=free,
    )


# -- room changes -------------------------------------------------------------------------


def approval_explicit(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller()
    s = b.booking(p, "confirmed")
    target = s.others[k % 2]
    return task_spec(
        short_ask(
            f"file a manager approval request to change booking {s.booking_id} "
            f"to room type {target.room_type_id}",
            k,
        ),
        user_context(
            p,
            f"have an approval request filed to move booking {s.booking_id} to room type "
            f"{target.room_type_id} ({target.name}).",
            booking=describe(s),
        ),
        [
            find(p),
            call(
                "request_approval",
                booking_id=s.booking_id,
                room_type_id=target.room_type_id,
                reason=f"Traveller asks for the {target.name}.",
            ),
        ],
        write=True,
    )


def wanted_room(s: Stay, k: int) -> tuple[str, Any]:
    """Downgrade on even variants, upgrade on odd ones: (verb, room)."""
    return ("downgrade", s.cheaper()) if k % 2 == 0 else ("upgrade", s.dearer())


def room_change_request(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller()
    s = b.booking(p, "confirmed", room_index=1)
    b.distractors(p, k // 2)
    verb, room = wanted_room(s, k)
    return task_spec(
        f"{hello(p)} I'd like to {verb} booking {s.booking_id} to the {room.name}.",
        user_context(
            p,
            f"{verb} booking {s.booking_id} to the {room.name}. You accept that your manager "
            f"({p.manager_name}) must approve it first.",
            booking=describe(s),
        ),
        [
            find(p),
            look(s),
            call("list_room_types", hotel_id=s.hotel_id),
            call(
                "request_approval",
                booking_id=s.booking_id,
                room_type_id=room.room_type_id,
                reason=f"Traveller asks to {verb} to the {room.name}.",
            ),
        ],
        write=True,
    )


def room_change_approved(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller()
    s = b.booking(p, "confirmed", room_index=1, nights=b.rng.randint(2, 4))
    verb, room = wanted_room(s, k)
    b.approval(p, s, room, "approved")
    new_total = money(Decimal(room.rate) * s.nights)
    ask = " and tell me the new total" if k == 3 else ""
    opening = "My manager approved it: please " if k < 2 else "Please "
    return task_spec(
        f"{hello(p)} {opening}{verb} booking {s.booking_id} to the {room.name}{ask}.",
        user_context(
            p,
            f"{verb} booking {s.booking_id} to the {room.name}"
            f"{' and learn the new total' if ask else ''}.",
            booking=describe(s),
            extra=[f"Your manager {p.manager_name} approved the change."],
        ),
        [
            find(p),
            look(s),
            call("change_room", booking_id=s.booking_id, room_type_id=room.room_type_id),
        ],
        write=True,
        values=[new_total] if ask else None,
    )


def room_change_blocked(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller()
    s = b.booking(p, "confirmed", room_index=1)
    verb, room = wanted_room(s, k // 2)
    status = ("pending", "denied")[k % 2]
    b.approval(p, s, room, status)
    b.distractors(p, 1)
    return task_spec(
        f"{hello(p)} Please {verb} booking {s.booking_id} to the {room.name}.",
        user_context(
            p,
            f"{verb} booking {s.booking_id} to the {room.name}.",
            booking=describe(s),
            extra=[f"You asked for this change before; the manager's answer is {status}."],
        ),
        [find(p), look(s)],
        write=False,
    )


def room_change_mismatch(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.traveller()
    s = b.booking(p, "confirmed", room_index=1)
    verb, room = wanted_room(s, k)
    _other_verb, approved = wanted_room(s, k + 1)
    b.approval(p, s, approved, "approved")
    return task_spec(
        f"{hello(p)} Please {verb} booking {s.booking_id} to the {room.name}.",
        user_context(
            p,
            f"{verb} booking {s.booking_id} to the {room.name} (not the {approved.name}). You "
            "accept that your manager must approve it first.",
            booking=describe(s),
            extra=[
                f"Earlier your manager approved the {approved.name}, but you changed your mind."
            ],
        ),
        [
            find(p),
            look(s),
            call("list_room_types", hotel_id=s.hotel_id),
            call(
                "request_approval",
                booking_id=s.booking_id,
                room_type_id=room.room_type_id,
                reason=f"Traveller now asks for the {room.name}.",
            ),
        ],
        write=True,
    )


# -- information --------------------------------------------------------------------------


def tell_value(b: WorldBuilder, k: int) -> dict[str, Any]:
    """Tell one value; the other booking's or the other room's value is a wrong answer."""
    p = b.traveller()
    s = b.booking(p, "confirmed", nights=b.rng.randint(2, 4))
    (d,) = b.distractors(p, 1)
    variant = k % 6
    golden, reject = [find(p), look(s)], []
    if variant == 0:
        question, values, golden = (
            "How many loyalty credits do I have?",
            [str(p.balance)],
            [find(p)],
        )
    elif variant == 1:
        question, values = f"What is the nightly rate of booking {s.booking_id}?", [s.room.rate]
        reject = [r.rate for r in s.others]
    elif variant == 2:
        question, values = f"What is my check-out date for booking {s.booking_id}?", [s.check_out]
        reject = [d.check_out]
    elif variant == 3:
        question, values, reject = (
            f"What is the total price of booking {s.booking_id}?",
            [s.total],
            [d.total],
        )
    elif variant == 4:
        other = s.others[0]
        question = (
            f"How much per night is the {other.name} at the hotel of my booking {s.booking_id}?"
        )
        values, golden = [other.rate], golden + [call("list_room_types", hotel_id=s.hotel_id)]
        reject = [s.room.rate]
    else:
        question, values, golden = (
            "Who is my manager for travel approvals?",
            [p.manager_name],
            [find(p)],
        )
    return task_spec(
        question if variant in (1, 2, 3) else f"{hello(p)} {question}",
        user_context(p, f"learn the answer to: {question}", booking=describe(s)),
        golden,
        write=False,
        values=values,
        reject=[r for r in reject if r not in values],
    )


def wrong_owner(b: WorldBuilder, k: int) -> dict[str, Any]:
    p, other = b.traveller(), b.traveller(other=True)
    b.booking(p, "confirmed")
    s = b.booking(other, "confirmed", room_index=1, nights=3)
    asks = (
        f"Please cancel booking {s.booking_id}.",
        f"Please redeem 20 of my credits on booking {s.booking_id}.",
        f"Please downgrade booking {s.booking_id} to the {s.cheaper().name}.",
        f"Please cancel booking {s.booking_id}, the trip is off.",
    )
    message = asks[k % len(asks)]
    return task_spec(
        f"{hello(p)} {message}",
        user_context(
            p,
            f"{message} (It is really your colleague's booking, but do not say so unless asked.)",
            booking=s.booking_id,
        ),
        [find(p), look(s)],
        write=False,
    )
