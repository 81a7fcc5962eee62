"""Every response check of every embedded task discriminates: the right answer passes; the other value,
the negation and a number that only contains the right one fail."""

from __future__ import annotations

import re

import pytest

from rewardbox.grading.checks import response_problems

from .conftest import DOMAIN_NAMES, domain_tasks

MIN_REJECTING_TASKS = {"retail": 4, "hotel": 4, "helpdesk": 1}
"""At least this many tasks per domain name wrong candidates (another record's value, another status)."""


def _first(answer):
    return answer if isinstance(answer, str) else answer[0]


def _told(name):
    return [t for t in domain_tasks(name) if t["response_values"]]


@pytest.mark.parametrize("name", DOMAIN_NAMES)
def test_the_right_answer_passes_and_the_other_value_fails(name):
    rejecting = 0
    for task in _told(name):
        expect, reject = task["response_values"], task["response_reject"]
        right = "Here you go: " + " and ".join(_first(a) for a in expect) + "."
        assert response_problems(right, expect, reject) == [], task["uid"]
        for wrong in reject:
            other = (
                right.replace(_first(expect[0]), wrong) if len(expect) == 1 else f"It is {wrong}."
            )
            assert response_problems(other, expect, reject), (task["uid"], other)
            assert response_problems(right + f" Or maybe {wrong}.", expect, reject), (
                task["uid"],
                wrong,
            )
        rejecting += bool(reject)
    assert rejecting >= MIN_REJECTING_TASKS[name]


@pytest.mark.parametrize("name", DOMAIN_NAMES)
def test_the_negation_and_a_longer_number_fail(name):
    for task in _told(name):
        expect = task["response_values"]
        for answer in expect:
            for value in [answer] if isinstance(answer, str) else answer:
                others = " and ".join(_first(a) for a in expect if a is not answer)
                negated = f"It is not {value}; {others}." if others else f"It is not {value}."
                assert response_problems(negated, expect), (task["uid"], negated)
                if re.fullmatch(r"\d+(\.\d+)?", value):
                    longer = f"It is 1{value}; {others}." if others else f"It is 1{value}."
                    assert response_problems(longer, expect), (task["uid"], longer)


def test_issue_cases_fail_as_the_issue_says():
    status = next(t for t in _told("retail") if t["response_values"] == ["shipped"])
    assert response_problems(
        "Your order is not shipped yet.", status["response_values"], status["response_reject"]
    )
    for task in (t for t in _told("hotel") if t["family"] == "cancel_fee_tell"):
        (booking,) = next(iter(task["init"].values()))["data_patch"]["bookings"]
        fee = str(booking["nightly_rate"])  # a late cancellation costs one night
        assert response_problems(f"The cancellation fee is {fee}.", task["response_values"], []), (
            task["uid"]
        )
