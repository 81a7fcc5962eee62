"""Helpdesk task templates for support work: devices, tickets, values to tell, several actions.

Each template builds one task from a ``WorldBuilder`` and a variant number
``k``. Traps (the right action is to refuse) have golden interactions that only
read, so their golden state equals the initial state.
"""

from __future__ import annotations

from typing import Any

from rewardbox.domains.authoring import call, short_ask, task_spec
from rewardbox.domains.helpdesk.builder import (
    RESTRICTED,
    SEED_NAMES,
    STANDARD,
    WorldBuilder,
    user_context,
)

PROBLEMS = {
    "laptop": "won't turn on anymore",
    "phone": "has a cracked screen",
    "monitor": "has dead pixels all over",
    "tablet": "no longer charges",
    "headset": "has a broken microphone",
}
KINDS = tuple(PROBLEMS)


def _me(p: Any) -> dict[str, Any]:
    """The lookup of the caller that the policy asks for before anything else."""
    return call("get_employee", employee_id=p.employee_id)


_OPENINGS = (
    "Hi, I'm {name} ({id}).",
    "Hello, this is {name}, employee id {id}.",
    "{name} here ({id}).",
    "Hi IT, {name} from {department}, id {id}.",
)


def _hello(p: Any) -> str:
    """Who is writing (name and employee id), in one of four wordings by employee."""
    return _OPENINGS[int(p.employee_id[-3:]) % len(_OPENINGS)].format(
        name=p.name, id=p.employee_id, department=p.department
    )


def device_warranty(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    d = b.device(p, in_warranty=True, warranty_days_left=0 if k == 3 else None)
    b.device(p, in_warranty=False, kind=next(x for x in KINDS if x != d.kind))
    return task_spec(
        f"{_hello(p)} My {d.kind} {d.device_id} {PROBLEMS[d.kind]}. Please order a replacement.",
        user_context(
            p,
            f"get a replacement for your {d.kind} {d.device_id}.",
            extra=[f"Device: {d.device_id} ({d.model})"],
        ),
        [
            _me(p),
            call("get_device", device_id=d.device_id),
            call("order_replacement", device_id=d.device_id, billing="warranty"),
        ],
        write=True,
    )


def device_lookup(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    kinds = b.rng.sample(KINDS, 3)
    d = b.device(p, in_warranty=True, kind=kinds[0])
    for kind in kinds[1:]:
        b.device(p, in_warranty=b.rng.random() < 0.5, kind=kind)
    return task_spec(
        f"{_hello(p)} My {d.kind} {PROBLEMS[d.kind]}. Can I get a new one?",
        user_context(
            p,
            f"get a replacement for your {d.kind} (you do not know its device id).",
            extra=[f"Broken device: your {d.kind} ({d.model})"],
        ),
        [
            _me(p),
            call("get_device", device_id=d.device_id),
            call("order_replacement", device_id=d.device_id, billing="warranty"),
        ],
        write=True,
    )


def device_paid(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    d = b.device(p, in_warranty=False, warranty_days_left=-1 if k == 0 else None)
    return task_spec(
        f"{_hello(p)} My {d.kind} {d.device_id} {PROBLEMS[d.kind]}. If the warranty doesn't cover "
        "it, my department agreed to pay for a new one. Please order the replacement and tell me "
        "what it costs.",
        user_context(
            p,
            f"get a replacement for your {d.kind} {d.device_id} and learn its cost.",
            extra=[
                f"Device: {d.device_id} ({d.model})",
                "Your department agrees to pay for a replacement: yes",
            ],
        ),
        [
            _me(p),
            call("get_device", device_id=d.device_id),
            call("order_replacement", device_id=d.device_id, billing="department"),
        ],
        write=True,
        values=[d.replacement_cost],
    )


def device_refused(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    d = b.device(p, in_warranty=False, warranty_days_left=-1 if k == 0 else None)
    return task_spec(
        f"{_hello(p)} My {d.kind} {d.device_id} {PROBLEMS[d.kind]}. Please replace it, but only if "
        "it's free: my department will not pay for a replacement.",
        user_context(
            p,
            f"get a free replacement for your {d.kind} {d.device_id}.",
            extra=[
                f"Device: {d.device_id} ({d.model})",
                "Your department agrees to pay for a replacement: no",
            ],
            agrees=False,
        ),
        [_me(p), call("get_device", device_id=d.device_id)],
        write=False,
    )


def escalate_explicit(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    priority = ("urgent", "high", "normal", "high")[k % 4]
    t = b.ticket(p, priority, b.eligible_age(priority), level=2 if k == 3 else 1)
    b.ticket(p, "low", b.rng.randint(1, 20))
    return task_spec(
        short_ask(f"escalate ticket {t.ticket_id}; it is still not fixed", k),
        user_context(
            p,
            f"get ticket {t.ticket_id} escalated.",
            extra=[f"Ticket: {t.ticket_id} ({t.summary})"],
        ),
        [
            _me(p),
            call("get_ticket", ticket_id=t.ticket_id),
            call("escalate_ticket", ticket_id=t.ticket_id),
        ],
        write=True,
    )


def escalate_lookup(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    priority = ("high", "normal", "urgent")[k % 3]
    b.ticket(p, "normal", b.rng.randint(0, 6))
    t = b.ticket(p, priority, b.eligible_age(priority))
    b.ticket(p, "high", b.rng.randint(3, 9), status="resolved")
    return task_spec(
        f'{_hello(p)} My ticket about "{t.summary}" is still not solved. Please escalate it.',
        user_context(p, f'get your ticket about "{t.summary}" escalated (you do not know its id).'),
        [
            _me(p),
            call("get_ticket", ticket_id=t.ticket_id),
            call("escalate_ticket", ticket_id=t.ticket_id),
        ],
        write=True,
    )


def escalate_refused(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    priority = ("urgent", "high", "normal", "low")[k % 4]
    t = b.ticket(p, priority, b.early_age(priority))
    return task_spec(
        f"{_hello(p)} Please escalate ticket {t.ticket_id}, I have waited long enough.",
        user_context(
            p,
            f"get ticket {t.ticket_id} escalated.",
            extra=[f"Ticket: {t.ticket_id} ({t.summary})"],
        ),
        [_me(p), call("get_ticket", ticket_id=t.ticket_id)],
        write=False,
    )


def tell_value(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    variant, reject = k % 4, []
    if variant == 0:
        d = b.device(p, in_warranty=b.rng.random() < 0.5)
        question, values = (
            f"When does the warranty of my {d.kind} {d.device_id} end?",
            [d.warranty_end],
        )
        golden = [_me(p), call("get_device", device_id=d.device_id)]
    elif variant == 1:
        question, values = "Who is registered as my manager?", [p.manager_name]
        golden = [_me(p)]
    elif variant == 2:
        sid, name, _level, owner = b.rng.choice(RESTRICTED)
        question, values = f"Who has to approve access to {name}?", [(SEED_NAMES[owner], owner)]
        golden = [_me(p), call("list_systems")]
        reject = (
            [p.manager_name] if p.manager_name != SEED_NAMES[owner] else []
        )  # the standard-system rule
    else:
        t = b.ticket(p, b.rng.choice(("normal", "high")), b.rng.randint(2, 20))
        question, values = f"On which date was my ticket {t.ticket_id} opened?", [t.opened_on]
        golden = [_me(p), call("get_ticket", ticket_id=t.ticket_id)]
    return task_spec(
        f"{_hello(p)} {question}",
        user_context(p, f"learn the answer to: {question}"),
        golden,
        write=False,
        values=values,
        reject=reject,
    )


def multi_action(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee(status="locked" if k % 3 == 0 else "active")
    variant = k % 3
    if variant == 0:
        t = b.ticket(p, "urgent", b.eligible_age("urgent"))
        query = (
            f"{_hello(p)} Two things: I'm locked out, please reset my password (my badge number is "
            f"{p.badge_number}), and please escalate my ticket {t.ticket_id}."
        )
        golden = [
            _me(p),
            call("verify_identity", employee_id=p.employee_id, badge_number=p.badge_number),
            call("reset_password", employee_id=p.employee_id),
            call("get_ticket", ticket_id=t.ticket_id),
            call("escalate_ticket", ticket_id=t.ticket_id),
        ]
        extra = [f"Badge number: {p.badge_number}"]
        goal = f"get your password reset and ticket {t.ticket_id} escalated."
    elif variant == 1:
        d = b.device(p, in_warranty=True)
        sid, name, _level, _owner = b.rng.choice(STANDARD)
        query = (
            f"{_hello(p)} My {d.kind} {d.device_id} {PROBLEMS[d.kind]}, please order a replacement. "
            f"I also need access to {name}."
        )
        golden = [
            _me(p),
            call("get_device", device_id=d.device_id),
            call("order_replacement", device_id=d.device_id, billing="warranty"),
            call("list_systems"),
            call(
                "request_access", employee_id=p.employee_id, system_id=sid, approver_id=p.manager_id
            ),
        ]
        extra = [f"Your manager: {p.manager_name}"]
        goal = f"get {d.device_id} replaced and access to {name} requested."
    else:
        d = b.device(p, in_warranty=False)
        t = b.ticket(p, "high", b.eligible_age("high"))
        query = (
            f"{_hello(p)} My {d.kind} {d.device_id} {PROBLEMS[d.kind]}; please order a new one, my department "
            f"agreed to pay if needed. And please escalate ticket {t.ticket_id}."
        )
        golden = [
            _me(p),
            call("get_device", device_id=d.device_id),
            call("order_replacement", device_id=d.device_id, billing="department"),
            call("get_ticket", ticket_id=t.ticket_id),
            call("escalate_ticket", ticket_id=t.ticket_id),
        ]
        extra = ["Your department agrees to pay for a replacement: yes"]
        goal = f"get {d.device_id} replaced and ticket {t.ticket_id} escalated."
    return task_spec(query, user_context(p, goal, extra=extra), golden, write=True)


def wrong_owner(b: WorldBuilder, k: int) -> dict[str, Any]:
    """The caller asks for a change to a colleague's device, ticket or access request: refuse.

    The same change would be allowed for the colleague (warranty running, ticket old
    enough, request approved by the right approver), so only ownership decides.
    """
    p = b.employee()
    c = b.colleague(p)
    variant = k % 4
    if variant in (0, 3):
        d = b.device(c, in_warranty=True)
        ask = (
            f"My {d.kind} {d.device_id} {PROBLEMS[d.kind]}. Please order a replacement."
            if variant == 0
            else f"{c.name.split()[0]}'s {d.kind} {d.device_id} {PROBLEMS[d.kind]}; they asked me to get it replaced."
        )
        golden = [_me(p), call("get_device", device_id=d.device_id)]
    elif variant == 1:
        t = b.ticket(c, "urgent", b.eligible_age("urgent"))
        ask = f"Please escalate ticket {t.ticket_id}, it is still not fixed."
        golden = [_me(p), call("get_ticket", ticket_id=t.ticket_id)]
    else:
        sid, name, _level, _owner = b.rng.choice(STANDARD)
        rid = b.request(c, sid, c.manager_id, "approved", c.manager_id)
        ask = f"My access request {rid} for {name} was approved, please grant it."
        golden = [_me(p)]
    return task_spec(
        f"{_hello(p)} {ask}",
        user_context(
            p, f"{ask} (It really belongs to your colleague {c.name}; do not say so unless asked.)"
        ),
        golden,
        write=False,
    )


def onboarding(b: WorldBuilder, k: int) -> dict[str, Any]:
    """Three to five writes: access to two or three systems (two approvers), a device, a ticket."""
    p = b.employee()
    std = b.rng.sample(STANDARD, 2)
    systems = std + ([b.rng.choice(RESTRICTED)] if k % 2 == 0 else [])
    paid = k % 4 == 1
    d = b.device(p, in_warranty=not paid)
    t = b.ticket(p, "urgent", b.eligible_age("urgent")) if k >= 2 else None
    names = ", ".join(s[1] for s in systems[:-1]) + f" and {systems[-1][1]}"
    query = (
        f"{_hello(p)} I just moved to a new team. Please request access to {names}. Also my {d.kind} "
        f"{d.device_id} {PROBLEMS[d.kind]}, please get it replaced"
        + (" (my department agreed to pay if needed)" if paid else "")
        + (f", and escalate my ticket {t.ticket_id}, nobody has looked at it." if t else ".")
    )
    golden = [_me(p), call("list_systems")]
    golden += [
        call(
            "request_access",
            employee_id=p.employee_id,
            system_id=sid,
            approver_id=owner if level == "restricted" else p.manager_id,
        )
        for sid, _name, level, owner in systems
    ]
    golden += [
        call("get_device", device_id=d.device_id),
        call(
            "order_replacement", device_id=d.device_id, billing="department" if paid else "warranty"
        ),
    ]
    golden += (
        [call("get_ticket", ticket_id=t.ticket_id), call("escalate_ticket", ticket_id=t.ticket_id)]
        if t
        else []
    )
    extra = [f"Your manager: {p.manager_name}"] + (
        ["Your department agrees to pay for a replacement: yes"] if paid else []
    )
    goal = f"get access to {names} requested and {d.device_id} replaced" + (
        f", and ticket {t.ticket_id} escalated." if t else "."
    )
    return task_spec(query, user_context(p, goal, extra=extra), golden, write=True)
