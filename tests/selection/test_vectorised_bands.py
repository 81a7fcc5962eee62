"""Vectorised bands agree with one scipy.stats.beta per task (the brute force) on a random sample."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from rewardbox.selection import (
    BANDS,
    DEFAULT_BOUNDARIES,
    band_indices,
    band_mass_matrix,
    task_difficulty,
)


def _brute_force(c: int, n: int, cuts=DEFAULT_BOUNDARIES) -> tuple[list[float], str]:
    cdf = stats.beta(c + 0.5, n - c + 0.5).cdf(cuts)
    edges = [0.0, *cdf, 1.0]
    masses = [max(0.0, edges[i + 1] - edges[i]) for i in range(len(BANDS))]
    top = max(masses)
    return masses, BANDS[next(i for i, m in enumerate(masses) if m >= top - 1e-12)]


@pytest.mark.parametrize(
    "cuts", [DEFAULT_BOUNDARIES, (0.05, 0.45, 0.55, 0.95), (0.2, 0.3, 0.7, 0.8)]
)
def test_mass_matrix_matches_brute_force_for_every_pair_up_to_n_20(cuts):
    pairs = [(c, n) for n in range(21) for c in range(n + 1)]
    c, n = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    masses = band_mass_matrix(c, n, cuts)
    bands = [BANDS[i] for i in band_indices(masses)]
    for row, band, (ki, ni) in zip(masses, bands, pairs):
        expected, expected_band = _brute_force(ki, ni, cuts)
        np.testing.assert_allclose(row, expected, atol=1e-14)
        assert band == expected_band, (ki, ni)


def test_task_difficulty_matches_per_task_brute_force_on_a_random_sample():
    rng = np.random.default_rng(7)
    tasks, trials = 3_000, 8
    rate = np.repeat(rng.beta(0.6, 0.9, size=tasks), trials)
    errors = (
        rng.random(tasks * trials) < 0.15
    )  # enough system errors to leave some tasks below min_clean_trials
    rows = pl.DataFrame(
        {
            "uid": np.repeat([f"t{i:05d}" for i in range(tasks)], trials),
            "trial": np.tile(np.arange(trials), tasks),
            "passed": rng.random(tasks * trials) < rate,
            "system_error": pl.Series(np.where(errors, "sandbox: fault", "")).replace("", None),
        }
    )
    difficulty = task_difficulty(rows)
    assert difficulty.height == tasks
    for record in difficulty.iter_rows(named=True):
        masses, band = _brute_force(record["c"], record["n"])
        assert record["band"] == (band if record["n"] >= 4 else None), record["uid"]
        assert [record[f"mass_{b}"] for b in BANDS] == pytest.approx(masses, abs=1e-14)
    assert difficulty["band"].null_count() > 0  # the unbanded path was exercised


@pytest.mark.parametrize("c, n", [([1, 5], [4, 4]), ([1], [-1]), ([1.5], [4]), ([1, 2], [4])])
def test_bad_count_arrays_raise(c, n):
    with pytest.raises(ValueError):
        band_mass_matrix(c, n)
