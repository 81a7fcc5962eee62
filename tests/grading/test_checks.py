"""The response rule of the embedded tasks' checks (rewardbox.grading.checks)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rewardbox.grading.checks import check_candidates, response_problems, states
from rewardbox.grading.reward import validate_response


@pytest.mark.parametrize(
    ("text", "value", "stated"),
    [
        ("The refund is 171.00.", "171.00", True),
        ("You get $171 back", "171.00", True),
        ("That comes to 171.0 USD", "171.00", True),
        ("The refund is 1171.00.", "171.00", False),
        ("The refund is 1,171.00.", "1171.00", True),
        ("The refund is 171.50.", "171.00", False),
        ("Order ORD-6171 is on its way", "6171", False),
        ("It was opened on 2025-06-17", "17", False),
        ("Card ending 0421", "0421", True),
        ("Card ending 421", "0421", False),
        ("Your order has shipped.", "shipped", True),
        ("Your order has not shipped yet.", "shipped", False),
        ("It hasn't shipped.", "shipped", False),
        ("It is yet to be shipped", "shipped", False),
        ("It is unshipped", "shipped", False),
        ("It has shipped and cannot be cancelled.", "cancelled", False),
        ("It hasn\u2019t shipped", "shipped", False),
        ("It shipped, not delivered", "shipped", True),
        ("It shipped, not delivered", "delivered", False),
        ("Check-out is June 20, 2025.", "2025-06-20", True),
        ("Check-out is 2025-06-20.", "2025-06-20", True),
        ("Check-out is 2025-06-21.", "2025-06-20", False),
        ("Your approver is tom alvarez.", "Tom Alvarez", True),
    ],
)
def test_states(text, value, stated):
    assert states(text, value) is stated


def test_every_answer_required_alternatives_suffice_and_wrong_candidates_fail():
    expect = ["57.00", ("Tom Alvarez", "EMP-1004")]
    assert response_problems("Fee 57.00; approver EMP-1004.", expect) == []
    assert response_problems("Fee 57.00.", expect) == ["does not state Tom Alvarez or EMP-1004"]
    listed = "It is 57.00 or 114.00, approved by Tom Alvarez."
    assert response_problems(listed, expect, ["114.00"]) == ["states the wrong value 114.00"]


def test_validate_response_asserts_with_the_reply():
    validate_response(SimpleNamespace(response="It has shipped."), ["shipped"], ["pending"])
    with pytest.raises(AssertionError, match="does not state shipped"):
        validate_response(SimpleNamespace(response="It has not shipped yet."), ["shipped"])
    with pytest.raises(AssertionError, match="states the wrong value pending"):
        validate_response(
            SimpleNamespace(response="It is pending, or shipped."), ["shipped"], ["pending"]
        )
    with pytest.raises(AssertionError):
        validate_response(SimpleNamespace(response=None), ["shipped"])


def test_candidates_that_cannot_be_told_apart_are_refused():
    with pytest.raises(ValueError, match="equal an expected answer"):
        check_candidates(["171.00"], ["171"])
    with pytest.raises(ValueError, match="empty"):
        check_candidates([" "], [])
    check_candidates(["171.00"], ["342.00"])
