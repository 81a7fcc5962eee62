"""pass@k and pass^k: issue #5 item 7 exact values, brute-force enumeration, errors."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from rewardbox.metrics import pass_at_k, pass_hat_k, pass_hat_k_plugin


def _counts(trials: list[int]) -> tuple[int, int]:
    return len(trials), sum(trials)


def test_issue_values_four_trials_two_passed():
    n, c = _counts([1, 1, 0, 0])
    assert pass_hat_k(n, c, 2) == pytest.approx(1 / 6, abs=1e-15)
    assert pass_at_k(n, c, 2) == pytest.approx(5 / 6, abs=1e-15)
    # The plug-in is what a naive estimator reports; it is not the unbiased value.
    assert pass_hat_k_plugin(n, c, 2) == pytest.approx(0.25)
    assert pass_hat_k(n, c, 2) != pytest.approx(0.25)


def test_issue_values_three_trials_no_three_all_passed():
    n, c = _counts([1, 1, 0])
    assert pass_hat_k(n, c, 3) == 0.0
    assert pass_hat_k_plugin(n, c, 3) == pytest.approx(8 / 27)  # 0.296, the biased number


def test_issue_values_eight_trials_six_passed():
    n, c = _counts([1, 1, 1, 1, 1, 1, 0, 0])
    assert pass_hat_k(n, c, 4) == pytest.approx(15 / 70, abs=1e-15)


def test_own_case_ten_trials_five_passed_k3():
    # C(5,3) = 10, C(10,3) = 120: pass^3 = 1/12, pass@3 = 1 - 10/120 = 11/12.
    assert pass_hat_k(10, 5, 3) == pytest.approx(1 / 12, abs=1e-15)
    assert pass_at_k(10, 5, 3) == pytest.approx(11 / 12, abs=1e-15)


def test_k_equal_n_is_the_observed_all_pass_indicator():
    assert pass_hat_k(20, 20, 20) == 1.0
    assert pass_hat_k(20, 19, 20) == 0.0
    assert pass_at_k(20, 1, 20) == 1.0
    assert pass_at_k(20, 0, 20) == 0.0


def _brute_force(trials: tuple[int, ...], k: int) -> tuple[Fraction, Fraction]:
    subsets = list(itertools.combinations(range(len(trials)), k))
    any_pass = sum(1 for s in subsets if any(trials[i] for i in s))
    all_pass = sum(1 for s in subsets if all(trials[i] for i in s))
    return Fraction(any_pass, len(subsets)), Fraction(all_pass, len(subsets))


@pytest.mark.parametrize("n", range(1, 9))
def test_matches_enumeration_of_every_k_subset(n):
    for c in range(n + 1):
        trials = tuple([1] * c + [0] * (n - c))
        for k in range(1, n + 1):
            at, hat = _brute_force(trials, k)
            assert pass_at_k(n, c, k) == pytest.approx(float(at), abs=1e-12), (n, c, k)
            assert pass_hat_k(n, c, k) == pytest.approx(float(hat), abs=1e-12), (n, c, k)


def test_k1_is_the_success_rate_and_numpy_ints_are_accepted():
    assert pass_at_k(np.int64(7), np.int64(3), np.int64(1)) == pytest.approx(3 / 7)
    assert pass_hat_k(7, 3, 1) == pytest.approx(3 / 7)


def test_large_n_stays_exact():
    # Exact big-integer binomials: no overflow or cancellation at n = 200.
    expected = math.comb(150, 40) / math.comb(200, 40)
    assert pass_hat_k(200, 150, 40) == pytest.approx(expected, rel=1e-12)
    assert 0.0 < pass_hat_k(200, 150, 40) < 1e-4


@pytest.mark.parametrize(
    "n, c, k",
    [(4, 2, 5), (4, 2, 0), (4, 2, -1), (4, 5, 2), (-1, 0, 1), (4.0, 2, 2), (4, True, 1)],
)
def test_invalid_counts_raise(n, c, k):
    for fn in (pass_at_k, pass_hat_k, pass_hat_k_plugin):
        with pytest.raises(ValueError):
            fn(n, c, k)
