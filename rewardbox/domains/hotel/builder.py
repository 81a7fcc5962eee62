"""Per-task world building for the hotel task generator.

A ``WorldBuilder`` makes the ``data_patch`` of one task: its own traveller(s),
bookings, payments, refunds, approval requests and credit history, with ids in
ranges the seed never uses (``TRV-2nnn``/``TRV-3nnn``, ``BK-6nnn``), so tasks
never depend on each other or on seed bookings. Hotels, room types and managers
are the seed's (the company's shared catalogue); tasks only read them. Dates are
offsets from the domain's fixed ``TODAY``; within one task every booking is at a
different hotel, so "my booking in Lisbon" is never ambiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from rewardbox.domains.authoring import RowBuilder, user_context_text
from rewardbox.domains.hotel.seed import HOTELS, MANAGERS, day
from rewardbox.domains.hotel.tools_common import REDEEM_LIMIT_CREDITS
from rewardbox.domains.toolkit import money

FIRST_NAMES = (
    "Ana",
    "Ben",
    "Chloe",
    "Dmitri",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jonas",
    "Kavya",
    "Liam",
    "Mei",
    "Nadia",
    "Oscar",
    "Priya",
    "Quinn",
    "Rosa",
    "Samir",
    "Tess",
    "Umar",
    "Vera",
    "Wes",
    "Yara",
    "Zoe",
)
LAST_NAMES = (
    "Lopez",
    "Brennan",
    "Dubois",
    "Ivanov",
    "Costa",
    "Rahimi",
    "Okafor",
    "Sato",
    "Moreau",
    "Berg",
    "Iyer",
    "Walsh",
    "Lin",
    "Petrova",
    "Lind",
    "Nair",
    "Foster",
    "Diaz",
    "Haddad",
    "Keller",
    "Mensah",
    "Kowalski",
    "Reyes",
    "Yilmaz",
    "Fischer",
)


@dataclass
class Person:
    traveller_id: str
    name: str
    email: str
    tier: str
    balance: int
    manager_id: str
    manager_name: str


@dataclass
class Room:
    room_type_id: str
    name: str
    rate: str


@dataclass
class Stay:
    """One booking of the task and the facts templates need about it."""

    booking_id: str
    hotel_id: str
    hotel: str
    city: str
    room: Room
    others: list[Room]
    nights: int
    check_in: str
    check_out: str
    total: str
    status: str
    payment_id: str

    def refund_if_cancelled_now(self, fee: bool) -> str:
        """The refund of a cancellation today (total minus one night when ``fee``)."""
        return money(Decimal(self.total) - (Decimal(self.room.rate) if fee else Decimal("0")))

    def cheaper(self) -> Room:
        return min(self.others, key=lambda r: Decimal(r.rate))

    def dearer(self) -> Room:
        return max(self.others, key=lambda r: Decimal(r.rate))


_DEFAULT_OFFSETS = {"confirmed": (5, 40), "cancelled": (5, 30)}
GIVE_UP = "If the agent says the request is not possible or must wait, accept it and say goodbye."
"""A travel request may also have to wait for the manager's approval."""


@dataclass
class WorldBuilder(RowBuilder):
    """Builds the rows of one task's ``data_patch`` (see ``RowBuilder`` for the arguments)."""

    _used_hotels: set[str] = field(default_factory=set)

    def traveller(
        self, tier: str | None = None, balance: int | None = None, *, other: bool = False
    ) -> Person:
        """A new traveller (an employee) reporting to one of the seed managers."""
        tid = f"TRV-{3 if other else 2}{self.index:03d}"
        first, last = self.rng.choice(FIRST_NAMES), self.rng.choice(LAST_NAMES)
        tier = tier or self.rng.choice(("standard", "silver", "gold"))
        balance = self.rng.randint(61, 480) if balance is None else balance
        manager_id, manager_name, _ = self.rng.choice(MANAGERS)
        email = (
            f"{first.lower()}.{last.lower()}{'.' + str(self.index) if other else ''}@northwind.test"
        )
        self._add(
            "travellers",
            {
                "traveller_id": tid,
                "name": f"{first} {last}",
                "email": email,
                "tier": tier,
                "credit_balance": balance,
                "manager_id": manager_id,
            },
        )
        return Person(tid, f"{first} {last}", email, tier, balance, manager_id, manager_name)

    def _hotel(self) -> tuple[str, str, str, tuple[tuple[str, str, str], ...]]:
        free = [h for h in HOTELS if h[0] not in self._used_hotels]
        hotel = self.rng.choice(free)
        self._used_hotels.add(hotel[0])
        return hotel

    def booking(
        self,
        person: Person,
        status: str,
        *,
        offset: int | None = None,
        nights: int | None = None,
        room_index: int | None = None,
    ) -> Stay:
        """A new booking of ``person`` at a hotel not yet used in this task, paid in full.

        ``offset`` is check-in minus today in days (defaults fit the status); a
        cancelled booking also gets its full refund.
        """
        hotel_id, hotel, city, rooms = self._hotel()
        offset, nights = self._dates(status, offset, nights)
        pick = self.rng.randrange(3) if room_index is None else room_index
        room = Room(*rooms[pick])
        others = [Room(*r) for i, r in enumerate(rooms) if i != pick]
        booking_id = self._next("BK-")
        total = money(Decimal(room.rate) * nights)
        self._add(
            "bookings",
            {
                "booking_id": booking_id,
                "traveller_id": person.traveller_id,
                "room_type_id": room.room_type_id,
                "check_in": day(offset),
                "check_out": day(offset + nights),
                "nightly_rate": room.rate,
                "total": total,
                "status": status,
            },
        )
        payment_id = self._payment(booking_id, offset, total)
        stay = Stay(
            booking_id,
            hotel_id,
            hotel,
            city,
            room,
            others,
            nights,
            day(offset),
            day(offset + nights),
            total,
            status,
            payment_id,
        )
        if status == "cancelled":
            self.refund(stay, Decimal(total), "cancellation")
        return stay

    def _dates(self, status: str, offset: int | None, nights: int | None) -> tuple[int, int]:
        """``(offset, nights)`` of a new booking: the given ones, else defaults that fit the status."""
        nights = nights or self.rng.randint(1, 4)
        if status == "checked_in":
            offset, nights = (-self.rng.randint(0, 1) if offset is None else offset), max(nights, 2)
        elif status == "completed" and offset is None:
            offset = -nights - self.rng.randint(2, 40)
        elif offset is None:
            offset = self.rng.randint(*_DEFAULT_OFFSETS[status])
        return offset, nights

    def _payment(self, booking_id: str, offset: int, total: str) -> str:
        """The full payment of a new booking, 5-30 days before check-in or today, whichever is earlier; its id."""
        payment_id = "PAY-" + booking_id[3:]
        self._add(
            "payments",
            {
                "payment_id": payment_id,
                "booking_id": booking_id,
                "method": self.rng.choice(("corporate_card", "personal_card")),
                "card_last4": f"{self.rng.randint(1000, 9999)}",
                "amount": total,
                "created_on": day(min(offset, 0) - self.rng.randint(5, 30)),
            },
        )
        return payment_id

    def refund(self, stay: Stay, amount: Decimal, reason: str) -> str:
        """An earlier refund on ``stay``; returns its id."""
        refund_id = self._next("RF-")
        self._add(
            "refunds",
            {
                "refund_id": refund_id,
                "booking_id": stay.booking_id,
                "payment_id": stay.payment_id,
                "amount": money(amount),
                "reason": reason,
                "created_on": day(-2),
            },
        )
        return refund_id

    def approval(self, person: Person, stay: Stay, room: Room, status: str) -> str:
        """An earlier approval request on ``stay`` for ``room``; returns its id."""
        approval_id = self._next("APR-")
        self._add(
            "approval_requests",
            {
                "approval_id": approval_id,
                "booking_id": stay.booking_id,
                "manager_id": person.manager_id,
                "requested_room_type_id": room.room_type_id,
                "status": status,
                "reason": "Traveller asked for a different room.",
                "created_on": day(-self.rng.randint(1, 6)),
            },
        )
        return approval_id

    def credits(self, person: Person, stay: Stay, kind: str, credits: int) -> str:
        """Earlier credits on ``stay`` (a redemption also refunds the card); returns the transaction id."""
        tx_id = self._next("CT-")
        self._add(
            "credit_transactions",
            {
                "tx_id": tx_id,
                "traveller_id": person.traveller_id,
                "booking_id": stay.booking_id,
                "kind": kind,
                "credits": credits,
                "reason": f"earlier {kind} credits",
                "created_on": day(-3),
            },
        )
        if kind == "redeemed":
            self.refund(stay, Decimal(credits), "credits")
        return tx_id

    def distractors(self, person: Person, n: int = 1) -> list[Stay]:
        """Other bookings of the same traveller in mixed statuses."""
        statuses = ("completed", "confirmed", "cancelled", "completed")
        return [self.booking(person, self.rng.choice(statuses)) for _ in range(n)]

    def redeemable(self, tier: str) -> int:
        """A credit amount within the tier's limit, a multiple of 5."""
        return 5 * self.rng.randint(2, REDEEM_LIMIT_CREDITS[tier] // 5)


def user_context(
    person: Person,
    goal: str,
    *,
    booking: str | None = None,
    agrees: bool = True,
    extra: list[str] | None = None,
) -> str:
    """The simulated user's private facts, one ``Key: value`` per line."""
    facts = [
        f"You are {person.name}, a Northwind employee who travels for work.",
        f"Name: {person.name}",
        f"Email: {person.email}",
        f"Traveller id: {person.traveller_id} (give it only if asked)",
    ]
    if booking:
        facts.append(f"Booking: {booking}")
    return user_context_text(facts, goal, agrees=agrees, extra=extra, give_up=GIVE_UP)
