"""Wilson and Jeffreys intervals; P(tuned better) from Jeffreys posteriors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rewardbox.metrics import jeffreys_interval, prob_better, prob_better_overall, wilson_interval


def _wilson_by_hand(s: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    p = s / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return centre - half, centre + half


@pytest.mark.parametrize("s, n", [(5, 10), (0, 7), (7, 7), (51, 100), (1, 3)])
def test_wilson_matches_the_closed_form(s, n):
    low, high = wilson_interval(s, n)
    exp_low, exp_high = _wilson_by_hand(s, n)
    assert low == pytest.approx(max(0.0, exp_low), abs=1e-9)
    assert high == pytest.approx(min(1.0, exp_high), abs=1e-9)


def test_wilson_known_value_and_no_information_case():
    low, high = wilson_interval(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_jeffreys_tails_and_edges():
    low, high = jeffreys_interval(3, 10, confidence=0.9)
    posterior = stats.beta(3.5, 7.5)
    assert posterior.cdf(low) == pytest.approx(0.05, abs=1e-9)
    assert posterior.cdf(high) == pytest.approx(0.95, abs=1e-9)
    assert jeffreys_interval(0, 10)[0] == 0.0
    assert jeffreys_interval(10, 10)[1] == 1.0
    assert 0.0 < jeffreys_interval(0, 10)[1] < 0.25


@pytest.mark.parametrize("args", [(3, 2), (-1, 4), (2, 4, 1.0), (2, 4, 0.0), (2.5, 4)])
def test_interval_errors(args):
    for fn in (wilson_interval, jeffreys_interval):
        with pytest.raises(ValueError):
            fn(*args)


def test_prob_better_identical_is_half_and_complementary():
    assert prob_better(3, 8, 3, 8) == 0.5
    p = prob_better(2, 8, 5, 8)
    q = prob_better(5, 8, 2, 8)
    assert p + q == pytest.approx(1.0, abs=1e-7)
    assert p > 0.85


def test_prob_better_matches_monte_carlo():
    rng = np.random.default_rng(123)
    base = rng.beta(2 + 0.5, 6 + 0.5, size=400_000)
    tuned = rng.beta(5 + 0.5, 3 + 0.5, size=400_000)
    monte_carlo = float(np.mean(tuned > base))
    assert prob_better(2, 8, 5, 8) == pytest.approx(monte_carlo, abs=0.003)


def test_prob_better_peaked_posteriors_stay_accurate():
    # 20/20 vs 0/20: the posteriors hardly overlap.
    assert prob_better(0, 20, 20, 20) > 0.999999
    assert prob_better(20, 20, 0, 20) < 1e-6
    # Monotone in the tuned successes.
    values = [prob_better(10, 20, c, 20) for c in range(21)]
    assert all(b > a for a, b in zip(values, values[1:]))


def test_prob_better_overall_is_seeded_and_sensible():
    base = [(2, 8), (0, 8), (4, 8)]
    tuned = [(6, 8), (3, 8), (7, 8)]
    first = prob_better_overall(base, tuned, draws=5000, seed=7)
    assert first == prob_better_overall(base, tuned, draws=5000, seed=7)
    assert first > 0.99
    assert prob_better_overall(tuned, base, draws=5000, seed=7) < 0.01
    same = prob_better_overall(base, base, draws=20_000, seed=1)
    assert same == pytest.approx(0.5, abs=0.02)
    # One task: the exact integral, not Monte Carlo.
    assert prob_better_overall([(2, 8)], [(5, 8)]) == prob_better(2, 8, 5, 8)


def test_prob_better_overall_errors():
    with pytest.raises(ValueError, match="match tasks"):
        prob_better_overall([(1, 2)], [(1, 2), (0, 2)])
    with pytest.raises(ValueError, match="no tasks"):
        prob_better_overall([], [])
    with pytest.raises(ValueError):
        prob_better_overall([(3, 2)], [(1, 2)])
