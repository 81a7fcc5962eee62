"""Hotel task templates with depth: several bookings in one request, a change of mind.

They reuse the phrasing helpers of ``templates``; ``ALL_FAMILIES`` is every
hotel template in the order tasks are numbered and written.
"""

from __future__ import annotations

from typing import Any

from rewardbox.domains.authoring import Family, call, task_spec
from rewardbox.domains.hotel.builder import WorldBuilder, user_context
from rewardbox.domains.hotel.templates import describe, find, hello, look, wanted_room
from rewardbox.domains.hotel.templates_credits import FAMILIES
from rewardbox.domains.hotel.tools_common import REDEEM_LIMIT_CREDITS


def trip_cleanup(b: WorldBuilder, k: int) -> dict[str, Any]:
    """Three or four writes over two or three bookings: cancellations, an approved room change, credits."""
    tier = ("silver", "gold")[k % 2]
    p = b.traveller(tier, balance=REDEEM_LIMIT_CREDITS[tier] + b.rng.randint(10, 80))
    a = b.booking(p, "confirmed", offset=b.rng.randint(4, 25))
    extra = b.booking(p, "confirmed", offset=b.rng.randint(4, 25)) if k % 2 == 1 else None
    c = b.booking(p, "confirmed", room_index=1, nights=4, offset=b.rng.randint(6, 30))
    verb, room = wanted_room(c, k)
    b.approval(p, c, room, "approved")
    credits = 5 * b.rng.randint(4, 10)
    cancel = f"cancel booking {a.booking_id}" + (
        f" and booking {extra.booking_id}" if extra else ""
    )
    query = (
        f"{hello(p)} My travel plans changed. Please {cancel}; {verb} booking {c.booking_id} to the "
        f"{room.name} (my manager approved it); and redeem {credits} of my credits on {c.booking_id}."
    )
    golden = [find(p), call("cancel_booking", booking_id=a.booking_id)]
    golden += [call("cancel_booking", booking_id=extra.booking_id)] if extra else []
    golden += [
        look(c),
        call("change_room", booking_id=c.booking_id, room_type_id=room.room_type_id),
        call("redeem_credits", booking_id=c.booking_id, credits=credits),
    ]
    stays = [s for s in (a, extra, c) if s]
    return task_spec(
        query,
        user_context(
            p,
            f"{cancel}, {verb} booking {c.booking_id} to the {room.name}, and "
            f"redeem {credits} credits on it.",
            booking=" and ".join(describe(s) for s in stays),
            extra=[f"Your manager {p.manager_name} approved the room change."],
        ),
        golden,
        write=True,
    )


def change_of_mind(b: WorldBuilder, k: int) -> dict[str, Any]:
    """The traveller corrects themself in the first message: only the second booking is cancelled."""
    p = b.traveller()
    first = b.booking(p, "confirmed", offset=b.rng.randint(4, 30))
    second = b.booking(p, "confirmed", offset=b.rng.randint(4, 30))
    turn = (
        "Oh wait, sorry, that's the wrong one: keep {a} and cancel {b} instead.",
        "Actually no, {a} stays. It's {b} in {city} that I need cancelled.",
        "Hmm, scratch that: cancel {b}, not {a}.",
    )[k % 3]
    return task_spec(
        f"{hello(p)} Please cancel booking {first.booking_id}. "
        + turn.format(a=first.booking_id, b=second.booking_id, city=second.city),
        user_context(
            p,
            f"cancel booking {second.booking_id} and keep booking {first.booking_id} (you "
            f"named {first.booking_id} by mistake first).",
            booking=f"{describe(first)} and {describe(second)}",
        ),
        [find(p), call("cancel_booking", booking_id=second.booking_id)],
        write=True,
    )


FAMILIES_DEPTH: tuple[Family, ...] = (
    Family("trip_cleanup", "hotel_multi.py", "hard", trip_cleanup, 6),
    Family("change_of_mind", "hotel_cancel.py", "medium", change_of_mind, 3),
)

ALL_FAMILIES: tuple[Family, ...] = FAMILIES + FAMILIES_DEPTH
"""Every hotel template, in the order tasks are numbered and written."""
