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


def _monte_carlo(base, tuned, draws=200_000, seed=5):
    rng = np.random.default_rng(seed)
    (bs, bn), (ts, tn) = (np.array(base).T, np.array(tuned).T)
    b = rng.beta(bs + 0.5, bn - bs + 0.5, size=(draws, len(bs))).mean(axis=1)
    t = rng.beta(ts + 0.5, tn - ts + 0.5, size=(draws, len(ts))).mean(axis=1)
    p = float(np.mean(t > b))
    return p, max(np.sqrt(p * (1 - p) / draws), 1e-4)


@pytest.mark.parametrize("tasks, n", [(3, 20), (20, 8), (120, 20), (507, 20), (60, 4)])
def test_inversion_matches_monte_carlo_within_its_error(tasks, n):
    rng = np.random.default_rng(tasks + n)
    bc = rng.integers(0, n + 1, tasks)
    tc = np.clip(bc + rng.integers(-1, 2, tasks), 0, n)
    base, tuned = [(int(c), n) for c in bc], [(int(c), n) for c in tc]
    expected, se = _monte_carlo(base, tuned, draws=200_000 if tasks <= 60 else 20_000)
    assert prob_better_overall(base, tuned) == pytest.approx(expected, abs=4 * se)


def test_groups_single_tasks_and_the_monte_carlo_fallback():
    base = [(2, 8), (3, 8), (5, 8), (1, 8), (8, 8), (0, 4), (4, 4)]
    tuned = [(4, 8), (3, 8), (6, 8), (2, 8), (7, 8), (1, 4), (4, 4)]
    groups = ["a", "a", "b", "b", "c", "d", "d"]
    overall, by_group = prob_better_by_group(base, tuned, groups, draws=20_000, seed=3)
    assert overall == prob_better_overall(base, tuned)
    assert by_group["c"] == pytest.approx(
        prob_better_many([8], [8], [7], [8])[0], abs=1e-12
    )  # one task: exact
    for label in "abd":  # "d": two wide posteriors, the Monte Carlo fallback
        rows = [i for i, g in enumerate(groups) if g == label]
        expected, se = _monte_carlo([base[i] for i in rows], [tuned[i] for i in rows])
        assert by_group[label] == pytest.approx(expected, abs=4 * se + 0.5 / np.sqrt(20_000) * 4), (
            label
        )
    with pytest.raises(ValueError, match="groups"):
        prob_better_by_group(base, tuned, ["a"])
