"""Vectorised forms agree with the per-task definitions they replace."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, special

from rewardbox.metrics.intervals import prob_better_by_group, prob_better_many, prob_better_overall


def _quad(bs: int, bn: int, ts: int, tn: int) -> float:
    """The definition: integral of f_base(x) (1 - F_tuned(x)) dx by adaptive quadrature."""
    a1, b1, a2, b2 = bs + 0.5, bn - bs + 0.5, ts + 0.5, tn - ts + 0.5

    def integrand(x: float) -> float:
        pdf = np.exp((a1 - 1) * np.log(x) + (b1 - 1) * np.log1p(-x) - special.betaln(a1, b1))
        return pdf * special.betaincc(a2, b2, x)

    return integrate.quad(integrand, 0, 1, points=[a1 / (a1 + b1), a2 / (a2 + b2)], limit=200)[0]


@pytest.mark.parametrize("n", [1, 4, 8, 20, 60, 200])
def test_prob_better_many_matches_adaptive_quadrature(n):
    rng = np.random.default_rng(n)
    bs, ts = rng.integers(0, n + 1, 40), rng.integers(0, n + 1, 40)
    tn = np.full(40, n)
    got = prob_better_many(bs, np.full(40, n), ts, tn)
    expected = [0.5 if b == t else _quad(int(b), n, int(t), n) for b, t in zip(bs, ts)]
    np.testing.assert_allclose(got, expected, atol=1e-9)
    assert (got[bs == ts] == 0.5).all()


def test_groups_share_the_draws_of_the_overall_probability():
    base = [(2, 8), (3, 8), (5, 8), (1, 8), (8, 8)]
    tuned = [(4, 8), (3, 8), (6, 8), (2, 8), (7, 8)]
    overall, groups = prob_better_by_group(base, tuned, ["a", "a", "b", "b", "c"], draws=4000, seed=3)
    assert overall == prob_better_overall(base, tuned, draws=4000, seed=3)  # same stream as the ungrouped call
    alone, _ = prob_better_by_group(base[:2], tuned[:2], None, draws=20_000, seed=9)
    assert groups["a"] == pytest.approx(alone, abs=0.02)  # same quantity, other draws: within Monte Carlo error
    assert groups["c"] == pytest.approx(prob_better_many([8], [8], [7], [8])[0], abs=1e-12)  # one task: exact
    with pytest.raises(ValueError, match="groups"):
        prob_better_by_group(base, tuned, ["a"])
