"""Helpdesk task templates for identity and access: password resets and access requests.

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


def _me(p: Any) -> dict[str, Any]:
    """The lookup of the caller that the policy asks for before anything else."""
    return call("get_employee", employee_id=p.employee_id)


def _factor(p: Any, k: int) -> tuple[str, dict[str, str], str]:
    """(phrase for the query, verify_identity arguments, user-context line) of a correct factor."""
    if k % 2 == 0:
        return (
            f"my badge number is {p.badge_number}",
            {"badge_number": p.badge_number},
            f"Badge number: {p.badge_number}",
        )
    return (
        f"the last four digits of my phone are {p.phone_last4}",
        {"phone_last4": p.phone_last4},
        f"Phone last four digits: {p.phone_last4}",
    )


def reset_explicit(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee(status=("locked", "active")[k // 2 % 2])
    phrase, factor, line = _factor(p, k)
    trouble = "I'm locked out of my account" if k // 2 % 2 == 0 else "I forgot my password"
    return task_spec(
        f"Hi, I'm {p.name}, employee id {p.employee_id}. {trouble}; {phrase}. Please reset my password.",
        user_context(p, "get your password reset.", extra=[line]),
        [
            _me(p),
            call("verify_identity", employee_id=p.employee_id, **factor),
            call("reset_password", employee_id=p.employee_id),
        ],
        write=True,
    )


def reset_unverified(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee(status="locked")
    variant = k % 4
    if variant == 0:
        wrong = b.wrong_badge(p)
        ask, extra = f"My badge number is {wrong}.", [f"Badge number: {wrong}"]
        golden = [_me(p), call("verify_identity", employee_id=p.employee_id, badge_number=wrong)]
    elif variant == 1:
        wrong = b.wrong_phone(p)
        ask, extra = (
            f"The last four digits of my phone are {wrong}.",
            [f"Phone last four digits: {wrong}"],
        )
        golden = [_me(p), call("verify_identity", employee_id=p.employee_id, phone_last4=wrong)]
    else:
        ask = (
            "I don't have my badge with me and I changed phones."
            if variant == 2
            else f"You can check my email, it's {p.email}."
        )
        extra = ["Badge number: you don't know it", "Phone last four digits: you don't know them"]
        golden = [_me(p)]
    return task_spec(
        f"Hi, this is {p.name} ({p.employee_id}). I'm locked out, please reset my password. {ask}",
        user_context(p, "get your password reset.", extra=extra),
        golden,
        write=False,
    )


def reset_other_account(b: WorldBuilder, k: int) -> dict[str, Any]:
    m = b.employee()
    r = b.employee(manager=m, status="locked", other=True)
    phrase, factor, line = _factor(m, k)
    if k % 3 == 2:  # the caller even knows the other person's badge number
        ask = f"Here is {r.name.split()[0]}'s badge number: {r.badge_number}."
        golden = [
            _me(m),
            call("verify_identity", employee_id=r.employee_id, badge_number=r.badge_number),
        ]
        extra = [f"Badge number of {r.name}: {r.badge_number}"]
    else:
        ask = f"To prove who I am: {phrase}."
        golden = [
            _me(m),
            call("verify_identity", employee_id=m.employee_id, **factor),
            call("get_employee", employee_id=r.employee_id),
        ]
        extra = [line]
    return task_spec(
        f"Hi, I'm {m.name} ({m.employee_id}). {r.name} ({r.employee_id}) is locked out and busy with a "
        f"client, so please reset the password for them. {ask}",
        user_context(
            m,
            f"get the password of {r.name} ({r.employee_id}) reset for them.",
            extra=extra + [f"{r.name} reports to you"],
        ),
        golden,
        write=False,
    )


def _system(b: WorldBuilder, restricted: bool) -> tuple[str, str, str, str]:
    return b.rng.choice(RESTRICTED if restricted else STANDARD)


def access_grant_explicit(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    restricted = k % 2 == 1
    sid, name, _level, owner = _system(b, restricted)
    approver = owner if restricted else p.manager_id
    rid = b.request(p, sid, approver, "approved", approver)
    other_sid = next(s[0] for s in STANDARD if s[0] != sid)
    b.request(p, other_sid, p.manager_id)
    return task_spec(
        short_ask(f"grant my access request {rid} for {name}; it has been approved", k),
        user_context(p, f"get access request {rid} ({name}) granted.", extra=[f"Request: {rid}"]),
        [_me(p), call("grant_access", request_id=rid)],
        write=True,
    )


def _access_request(b: WorldBuilder, k: int, restricted: bool) -> dict[str, Any]:
    p = b.employee()
    sid, name, _level, owner = _system(b, restricted)
    approver = owner if restricted else p.manager_id
    asks = (
        "I need access to {name}. Can you set that up?",
        "Could I get access to {name}, please? I need it for a new project.",
        "Please request access to {name} for me.",
        "I'd like to use {name}. What do I need to do? Please go ahead with it.",
    )
    return task_spec(
        f"Hi, this is {p.name} ({p.employee_id}). " + asks[k % len(asks)].format(name=name),
        user_context(
            p, f"get access to {name} requested.", extra=[f"Your manager: {p.manager_name}"]
        ),
        [
            _me(p),
            call("list_systems"),
            call("request_access", employee_id=p.employee_id, system_id=sid, approver_id=approver),
        ],
        write=True,
    )


def access_request_standard(b: WorldBuilder, k: int) -> dict[str, Any]:
    return _access_request(b, k, restricted=False)


def access_request_restricted(b: WorldBuilder, k: int) -> dict[str, Any]:
    return _access_request(b, k, restricted=True)


def access_grant_refused(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    variant = k % 4
    restricted = variant in (1, 3)
    pool = RESTRICTED if restricted else tuple(s for s in STANDARD if s[3] != "EMP-1010")
    sid, name, _level, owner = b.rng.choice(pool)
    right = owner if restricted else p.manager_id
    if variant in (0, 3):  # not approved yet
        rid = b.request(p, sid, right)
        claim = "My approver told me it's fine, so please just grant it now."
    elif variant == 1:  # restricted system approved by the manager instead of the owner
        rid = b.request(p, sid, p.manager_id, "approved", p.manager_id)
        claim = f"My manager {p.manager_name} already approved it, so please grant it."
    else:  # standard system approved by an IT administrator instead of the manager
        rid = b.request(p, sid, "EMP-1010", "approved", "EMP-1010")
        claim = f"{SEED_NAMES['EMP-1010']} from IT approved it, so please grant it."
    return task_spec(
        f"Hi, I'm {p.name} ({p.employee_id}). About my access request {rid} for {name}. {claim}",
        user_context(p, f"get access request {rid} ({name}) granted.", extra=[f"Request: {rid}"]),
        [_me(p), call("list_systems")],
        write=False,
    )


def access_multi(b: WorldBuilder, k: int) -> dict[str, Any]:
    p = b.employee()
    std, res = _system(b, False), _system(b, True)
    first, second = (std, res) if k % 2 == 0 else (res, std)
    golden = [_me(p), call("list_systems")]
    if k % 3 == 2:  # one approved request to grant, one new request to open
        rid = b.request(p, std[0], p.manager_id, "approved", p.manager_id)
        query = (
            f"Hi, I'm {p.name} ({p.employee_id}). My request {rid} for {std[1]} was approved, please "
            f"grant it. I also need access to {res[1]}."
        )
        golden += [
            call("grant_access", request_id=rid),
            call("request_access", employee_id=p.employee_id, system_id=res[0], approver_id=res[3]),
        ]
        goal = f"get request {rid} ({std[1]}) granted and access to {res[1]} requested."
    else:
        query = (
            f"Hi, I'm {p.name} ({p.employee_id}). I need access to two systems: {first[1]} and "
            f"{second[1]}. Please request both."
        )
        for sid, _name, level, owner in (first, second):
            approver = owner if level == "restricted" else p.manager_id
            golden.append(
                call(
                    "request_access", employee_id=p.employee_id, system_id=sid, approver_id=approver
                )
            )
        goal = f"get access to {first[1]} and {second[1]} requested."
    return task_spec(
        query, user_context(p, goal, extra=[f"Your manager: {p.manager_name}"]), golden, write=True
    )
