"""Per-task world building for the retail task generator.

A ``WorldBuilder`` makes the ``data_patch`` of one task: its own customer(s),
saved addresses, orders, items and payments, with ids in ranges the seed never
uses (``CUS-2nnn``/``CUS-3nnn``, ``ORD-6nnn``), so tasks never depend on each
other or on seed rows. Dates are relative to the domain's fixed ``TODAY``.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from rewardbox.domains.authoring import RowBuilder, user_context_text
from rewardbox.domains.retail.seed import CATALOGUE, TODAY
from rewardbox.domains.retail.tools_common import RETURN_WINDOW_DAYS
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
STREETS = (
    "Oak Lane",
    "Birch Road",
    "Harbor Road",
    "Hill Street",
    "Canal Way",
    "Cedar Court",
    "Mill Road",
    "Station Square",
    "Park Avenue",
    "River Walk",
)
CITIES = (
    ("Portland", "97201"),
    ("Denver", "80202"),
    ("Austin", "73301"),
    ("Boston", "02108"),
    ("Madison", "53703"),
    ("Raleigh", "27601"),
)


def day(days_ago: int) -> str:
    """ISO date ``days_ago`` days before TODAY."""
    return (TODAY - dt.timedelta(days=days_ago)).isoformat()


@dataclass
class Person:
    customer_id: str
    name: str
    email: str
    tier: str
    home_id: str
    work_id: str
    work_line1: str
    home_postal: str = ""


@dataclass
class OrderFacts:
    order_id: str
    status: str
    total: str
    items: list[dict[str, Any]]
    payment: dict[str, Any]
    delivered_ago: int | None = None

    def item_id(self, product_name: str) -> str:
        return next(i["item_id"] for i in self.items if i["product_name"] == product_name)

    def item_ids_of(self, product_names: list[str]) -> list[str]:
        """The item ids of ``product_names``, in that order."""
        return [self.item_id(name) for name in product_names]

    @property
    def products(self) -> list[str]:
        return [i["product_name"] for i in self.items]


@dataclass
class WorldBuilder(RowBuilder):
    """Builds the rows of one task's ``data_patch`` (see ``RowBuilder`` for the arguments)."""

    _used_skus: set[str] = field(default_factory=set)

    def person(self, tier: str | None = None, *, other: bool = False) -> Person:
        """A new customer with a home and a work address."""
        cid = f"CUS-{3 if other else 2}{self.index:03d}"
        first, last = self.rng.choice(FIRST_NAMES), self.rng.choice(LAST_NAMES)
        tier = tier or self.rng.choice(("standard", "silver", "gold"))
        email = f"{first.lower()}.{last.lower()}{'.' + str(self.index) if other else ''}@mail.test"
        self._add(
            "customers",
            {
                "customer_id": cid,
                "name": f"{first} {last}",
                "email": email,
                "phone": f"+1-555-{(3000 if other else 2000) + self.index:04d}",
                "tier": tier,
                "member_since": day(self.rng.randint(200, 2000)),
            },
        )
        lines = {}
        for label, suffix in (("home", "H"), ("work", "W")):
            city, postal = self.rng.choice(CITIES)
            line1 = f"{self.rng.randint(2, 480)} {self.rng.choice(STREETS)}"
            lines[label], lines[f"{label}_postal"] = line1, postal
            self._add(
                "addresses",
                {
                    "address_id": f"ADR-{cid[4:]}-{suffix}",
                    "customer_id": cid,
                    "label": label,
                    "line1": line1,
                    "city": city,
                    "postal_code": postal,
                    "country": "US",
                },
            )
        return Person(
            cid,
            f"{first} {last}",
            email,
            tier,
            f"ADR-{cid[4:]}-H",
            f"ADR-{cid[4:]}-W",
            lines["work"],
            lines["home_postal"],
        )

    def products(self, n: int) -> list[tuple[str, str, str]]:
        """``n`` catalogue products not yet used in this task (names stay unambiguous)."""
        free = [p for p in CATALOGUE if p[0] not in self._used_skus]
        picks = self.rng.sample(free, n)
        self._used_skus.update(p[0] for p in picks)
        return picks

    def order(
        self,
        person: Person,
        status: str,
        n_items: int = 1,
        *,
        delivered_ago: int | None = None,
        quantities: list[int] | None = None,
        method: str | None = None,
    ) -> OrderFacts:
        """A new order of ``person`` (delivered/returned orders need ``delivered_ago``)."""
        oid = self._next("ORD-")
        if status in ("delivered", "returned") and delivered_ago is None:
            delivered_ago = self.rng.randint(3, 20)
        placed_ago = (delivered_ago or 0) + self.rng.randint(3, 9)
        total, items = Decimal("0"), []
        for k, (sku, name, price) in enumerate(self.products(n_items), start=1):
            qty = quantities[k - 1] if quantities else self.rng.choice((1, 1, 2, 3))
            total += Decimal(price) * qty
            item = {
                "item_id": f"{oid}-{k}",
                "order_id": oid,
                "sku": sku,
                "product_name": name,
                "unit_price": price,
                "quantity": qty,
                "returned_quantity": qty if status == "returned" else 0,
            }
            items.append(item)
        self._add(
            "orders",
            {
                "order_id": oid,
                "customer_id": person.customer_id,
                "status": status,
                "placed_on": day(placed_ago),
                "delivered_on": day(delivered_ago) if delivered_ago is not None else None,
                "shipping_address_id": person.home_id,
                "total": money(total),
            },
        )
        for item in items:
            self._add("order_items", item)
        method = method or self.rng.choice(("credit_card", "paypal", "gift_card"))
        payment = {
            "payment_id": f"PAY-{oid[4:]}",
            "order_id": oid,
            "method": method,
            "card_last4": f"{self.rng.randint(1000, 9999)}" if method == "credit_card" else None,
            "amount": money(total),
        }
        self._add("payments", payment)
        return OrderFacts(oid, status, money(total), items, payment, delivered_ago)

    def refund(self, order: OrderFacts, reason: str) -> str:
        """An earlier full refund of ``order``; returns the refund id."""
        refund_id = f"RF-{self._number()}"
        self._add(
            "refunds",
            {
                "refund_id": refund_id,
                "order_id": order.order_id,
                "payment_id": order.payment["payment_id"],
                "amount": order.total,
                "reason": reason,
                "created_on": day(2),
            },
        )
        return refund_id

    def distractors(self, person: Person, n: int = 1) -> list[OrderFacts]:
        """Other orders of the same customer in mixed statuses."""
        statuses = ("delivered", "shipped", "cancelled", "delivered")
        return [self.order(person, self.rng.choice(statuses)) for _ in range(n)]

    def delivered_within(self, tier: str, *, beyond_standard: bool = False) -> int:
        """Days since delivery inside the tier's window (past 30 days if asked)."""
        window = RETURN_WINDOW_DAYS[tier]
        low = 31 if beyond_standard else 2
        return self.rng.randint(low, window)

    def delivered_outside(self, tier: str) -> int:
        """Days since delivery after the tier's window (by 1 to 15 days)."""
        return RETURN_WINDOW_DAYS[tier] + self.rng.randint(1, 15)


def user_context(
    person: Person,
    goal: str,
    *,
    order: str | None = None,
    agrees: bool = True,
    extra: list[str] | None = None,
    knows_email: bool = True,
) -> str:
    """The simulated user's private facts, one ``Key: value`` per line (``knows_email=False``: forgotten)."""
    facts = [
        f"You are {person.name}, a customer of the store.",
        f"Name: {person.name}",
        f"Email: {person.email if knows_email else 'you do not remember it'}",
        f"Customer id: {person.customer_id} (give it only if asked)",
    ]
    if order:
        facts.append(f"Order: {order}")
    return user_context_text(facts, goal, agrees=agrees, extra=extra)
