"""Policy and data slips of issue #15: goldens do the lookups the policy asks for, wrong-owner traps
are decided by ownership alone, and nobody gets credits they did not ask for."""

from __future__ import annotations

import re

from rewardbox.domains.base import ToolRunner
from rewardbox.domains.golden import build_golden_state

from .conftest import domain_tasks, domain_under_test, golden_calls


def _patch(task):
    (config,) = task["world_state"].values()
    return config["data_patch"]


def test_every_helpdesk_golden_looks_the_caller_up_first():
    for task in domain_tasks("helpdesk"):
        first = golden_calls(task)[0]
        caller = re.search(r"EMP-\d{4}", task["user_context"]).group()
        assert first == {"tool": "get_employee", "parameters": {"employee_id": caller}}, task["uid"]


def test_helpdesk_wrong_owner_is_refused_only_because_of_the_owner():
    """The colleague's device, ticket or request would be changed by the tools: only the policy refuses."""
    runner = ToolRunner(domain_under_test("helpdesk").domain)
    tasks = [t for t in domain_tasks("helpdesk") if t["family"] == "wrong_owner"]
    assert len(tasks) >= 4 and not any(t["expects_write"] for t in tasks)
    kinds = set()
    for task in tasks:
        caller = golden_calls(task)[0]["parameters"]["employee_id"]
        target = re.search(r"(DEV|TCK|AR)-\d{4}", task["query"]).group()
        kind = target.split("-")[0]
        owner = next(
            r["employee_id"]
            for table in ("devices", "tickets", "access_requests")
            for r in _patch(task).get(table, [])
            if target in r.values()
        )
        assert owner != caller, task["uid"]
        tempting = {
            "DEV": ("order_replacement", {"device_id": target, "billing": "warranty"}),
            "TCK": ("escalate_ticket", {"ticket_id": target}),
            "AR": ("grant_access", {"request_id": target}),
        }[kind]
        calls = [*golden_calls(task), {"tool": tempting[0], "parameters": tempting[1]}]
        _, error = build_golden_state(runner, _patch(task), calls)
        assert error is None, (task["uid"], error)
        kinds.add(kind)
    assert kinds == {"DEV", "TCK", "AR"}


def test_retail_wrong_owner_friend_is_another_person():
    for task in (t for t in domain_tasks("retail") if t["family"] == "wrong_owner"):
        customers = _patch(task)["customers"]
        assert len(customers) == 2, task["uid"]
        for field in ("customer_id", "email", "phone", "name"):
            assert customers[0][field] != customers[1][field], (task["uid"], field)


def test_hotel_credits_only_when_asked():
    tasks = domain_tasks("hotel")
    goodwill = [t for t in tasks if t["family"] == "goodwill_credits"]
    quiet = [t for t in tasks if t["family"] == "complaint_only"]
    assert goodwill and quiet
    asks = re.compile(r"compensat|offer me|goodwill credits", re.IGNORECASE)
    for task in goodwill:
        assert asks.search(task["query"]) and any(
            c["tool"] == "award_credits" for c in golden_calls(task)
        )
    for task in quiet:
        assert not asks.search(task["query"]) and not task["expects_write"], task["uid"]
    policy = domain_under_test("hotel").domain.policy_text
    assert "No request, no credits." in policy
