"""Per-task world building for the IT helpdesk task generator.

A ``WorldBuilder`` makes the ``data_patch`` of one task: its own employees
(each with a new manager who reports to a seed department head), identity
factors, devices, access requests and tickets, with ids in ranges the seed never
uses (``EMP-2nnn`` the caller, ``EMP-3nnn`` managers, ``EMP-4nnn`` others,
``DEV-/AR-/TCK-`` numbers from 6000), so tasks never depend on each other. The
systems and their owners come from the seed. Dates are relative to ``TODAY``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rewardbox.domains.authoring import RowBuilder, user_context_text
from rewardbox.domains.helpdesk.seed import DEVICE_MODELS, SYSTEMS, day

FIRST_NAMES = (
    "Ana",
    "Ben",
    "Chloe",
    "Dmitri",
    "Elena",
    "Farid",
    "Gwen",
    "Hiro",
    "Ines",
    "Jonas",
    "Kavya",
    "Liam",
    "Mei",
    "Nadia",
    "Oscar",
    "Pia",
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
    "Lindqvist",
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
DEPARTMENTS = {
    "Engineering": ("EMP-1004", "Software Engineer"),
    "Finance": ("EMP-1003", "Financial Analyst"),
    "Sales": ("EMP-1006", "Account Manager"),
    "HR": ("EMP-1005", "Recruiter"),
    "IT": ("EMP-1002", "Support Technician"),
}
"""Department -> (seed head of department, title of its staff)."""

SUMMARIES = (
    "VPN disconnects every few minutes",
    "Cannot open the shared drive",
    "Printer on floor 3 jams",
    "Email client crashes on start",
    "Laptop battery drains fast",
    "Video calls drop audio",
    "Cannot install approved software",
    "Second monitor flickers",
    "Wi-Fi drops in meeting rooms",
    "Calendar invites arrive twice",
)
ESCALATE_AFTER_DAYS = {"urgent": 1, "high": 3, "normal": 7}
"""Minimum ticket age (days) for an escalation, by priority (policy.md); low is never escalated."""

STANDARD = tuple(s for s in SYSTEMS if s[2] == "standard")
RESTRICTED = tuple(s for s in SYSTEMS if s[2] == "restricted")
SEED_NAMES = {
    "EMP-1002": "Marcus Bell",
    "EMP-1003": "Priya Raman",
    "EMP-1004": "Tom Alvarez",
    "EMP-1005": "Grace Liu",
    "EMP-1006": "Sam Okoye",
    "EMP-1010": "Raj Patel",
}
"""Names of the seed employees who own systems (the approvers of restricted systems)."""


@dataclass
class Person:
    employee_id: str
    name: str
    email: str
    department: str
    title: str
    manager_id: str
    manager_name: str
    badge_number: str
    phone_last4: str


@dataclass
class DeviceFacts:
    device_id: str
    kind: str
    model: str
    warranty_end: str
    replacement_cost: str


@dataclass
class TicketFacts:
    ticket_id: str
    summary: str
    priority: str
    age_days: int
    opened_on: str


@dataclass
class WorldBuilder(RowBuilder):
    """Builds the rows of one task's ``data_patch`` (see ``RowBuilder`` for the arguments)."""

    _names: set[str] = field(default_factory=set)

    def _fresh_name(self) -> tuple[str, str]:
        while True:
            first, last = self.rng.choice(FIRST_NAMES), self.rng.choice(LAST_NAMES)
            if first not in self._names and last not in self._names:
                self._names.update((first, last))
                return first, last

    def _employee(
        self, eid: str, department: str, title: str, manager_id: str, manager_name: str, status: str
    ) -> Person:
        if any(r["employee_id"] == eid for r in self.rows.get("employees", [])):
            raise ValueError(
                f"task {self.index}: employee {eid} already exists (one per role and task)"
            )
        first, last = self._fresh_name()
        person = Person(
            eid,
            f"{first} {last}",
            f"{first.lower()}.{last.lower()}@northwind.test",
            department,
            title,
            manager_id,
            manager_name,
            f"B-{self.rng.randint(10000, 99999)}",
            f"{self.rng.randint(0, 9999):04d}",
        )
        self._add(
            "employees",
            {
                "employee_id": eid,
                "name": person.name,
                "email": person.email,
                "department": department,
                "title": title,
                "manager_id": manager_id,
                "account_status": status,
                "password_reset_on": day(self.rng.randint(30, 300)),
            },
        )
        self._add(
            "identity_factors",
            {
                "employee_id": eid,
                "badge_number": person.badge_number,
                "phone_last4": person.phone_last4,
            },
        )
        return person

    def employee(
        self,
        *,
        status: str = "active",
        department: str | None = None,
        manager: Person | None = None,
        other: bool = False,
    ) -> Person:
        """A new employee; without ``manager``, also a new manager (reporting to the seed head)."""
        department = department or (
            manager.department if manager else self.rng.choice(sorted(DEPARTMENTS))
        )
        head, title = DEPARTMENTS[department]
        if manager is None:
            manager = self._employee(
                f"EMP-3{self.index:03d}",
                department,
                f"{department} Team Lead",
                head,
                SEED_NAMES[head],
                "active",
            )
        eid = f"EMP-{4 if other else 2}{self.index:03d}"
        return self._employee(eid, department, title, manager.employee_id, manager.name, status)

    def colleague(self, person: Person) -> Person:
        """A peer of ``person``: same department, title and manager (id ``EMP-4nnn``)."""
        return self._employee(
            f"EMP-4{self.index:03d}",
            person.department,
            person.title,
            person.manager_id,
            person.manager_name,
            "active",
        )

    def wrong_badge(self, person: Person) -> str:
        """A badge number that is not ``person``'s."""
        while (badge := f"B-{self.rng.randint(10000, 99999)}") == person.badge_number:
            pass
        return badge

    def wrong_phone(self, person: Person) -> str:
        """Four phone digits that are not ``person``'s."""
        while (digits := f"{self.rng.randint(0, 9999):04d}") == person.phone_last4:
            pass
        return digits

    def device(
        self,
        person: Person,
        *,
        in_warranty: bool,
        kind: str | None = None,
        warranty_days_left: int | None = None,
    ) -> DeviceFacts:
        """A device of ``person``: warranty ends ``warranty_days_left`` days from today (negative: ended)."""
        models = [m for m in DEVICE_MODELS if kind is None or m[0] == kind]
        kind, model, cost = self.rng.choice(models)
        left = warranty_days_left
        if left is None:
            left = self.rng.randint(20, 500) if in_warranty else -self.rng.randint(1, 400)
        device = DeviceFacts(self._next("DEV-"), kind, model, day(-left), cost)
        self._add(
            "devices",
            {
                "device_id": device.device_id,
                "employee_id": person.employee_id,
                "kind": kind,
                "model": model,
                "purchased_on": day(730 - left),
                "warranty_end": device.warranty_end,
                "replacement_cost": cost,
                "status": "active",
            },
        )
        return device

    def request(
        self,
        person: Person,
        system_id: str,
        approver_id: str,
        status: str = "pending_approval",
        approved_by: str | None = None,
    ) -> str:
        """An access request of ``person``; returns its id."""
        rid = self._next("AR-")
        self._add(
            "access_requests",
            {
                "request_id": rid,
                "employee_id": person.employee_id,
                "system_id": system_id,
                "approver_id": approver_id,
                "status": status,
                "approved_by": approved_by,
                "requested_on": day(self.rng.randint(1, 9)),
            },
        )
        return rid

    def ticket(
        self,
        person: Person,
        priority: str,
        age_days: int,
        *,
        level: int = 1,
        status: str = "open",
        summary: str | None = None,
    ) -> TicketFacts:
        """A ticket of ``person`` opened ``age_days`` ago."""
        used = {r["summary"] for r in self.rows.get("tickets", [])}
        summary = summary or self.rng.choice([s for s in SUMMARIES if s not in used])
        facts = TicketFacts(self._next("TCK-"), summary, priority, age_days, day(age_days))
        self._add(
            "tickets",
            {
                "ticket_id": facts.ticket_id,
                "employee_id": person.employee_id,
                "summary": summary,
                "priority": priority,
                "status": status,
                "escalation_level": level,
                "opened_on": facts.opened_on,
                "escalated_on": day(max(age_days - 1, 0)) if level > 1 else None,
            },
        )
        return facts

    def eligible_age(self, priority: str) -> int:
        """A ticket age (days) at or past the escalation threshold of ``priority``."""
        low = ESCALATE_AFTER_DAYS[priority]
        return self.rng.choice((low, low + self.rng.randint(1, 6)))

    def early_age(self, priority: str) -> int:
        """A ticket age (days) below the escalation threshold (any age for low priority)."""
        if priority == "low":
            return self.rng.randint(8, 30)
        return self.rng.randint(0, ESCALATE_AFTER_DAYS[priority] - 1)


def user_context(
    person: Person, goal: str, *, extra: list[str] | None = None, agrees: bool = True
) -> str:
    """The simulated user's private facts, one ``Key: value`` per line."""
    facts = [
        f"You are {person.name}, an employee of Northwind ({person.title}, {person.department}).",
        f"Name: {person.name}",
        f"Employee id: {person.employee_id}",
        f"Email: {person.email}",
    ]
    return user_context_text(facts, goal, agrees=agrees, extra=extra)
