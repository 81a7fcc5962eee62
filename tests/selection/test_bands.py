"""Jeffreys-posterior difficulty bands: worked values, ties, brute-force integration, config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from scipy import integrate, special

from rewardbox.selection import BANDS, DEFAULT_BOUNDARIES, SelectionConfig, assign_band, band_masses


def test_worked_value_n8_k3():
    masses = band_masses(3, 8)
    assert assign_band(3, 8) == "hard"
    assert masses["hard"] == pytest.approx(0.54, abs=0.005)
    assert max(masses, key=masses.get) == "hard"


def test_worked_values_n4():
    assert [assign_band(c, 4) for c in range(5)] == [
        "too_hard",
        "hard",
        "medium",
        "easy",
        "too_easy",
    ]


@pytest.mark.parametrize("n", range(0, 11))
def test_masses_match_numerical_integration_of_the_beta_pdf(n):
    edges = (0.0, *DEFAULT_BOUNDARIES, 1.0)
    for c in range(n + 1):
        a, b = c + 0.5, n - c + 0.5
        norm = special.beta(a, b)

        def pdf(x, a=a, b=b, norm=norm):
            return x ** (a - 1) * (1 - x) ** (b - 1) / norm

        expected = [integrate.quad(pdf, lo, hi, limit=200)[0] for lo, hi in zip(edges, edges[1:])]
        masses = band_masses(c, n)
        assert list(masses) == list(BANDS)
        assert sum(masses.values()) == pytest.approx(1.0, abs=1e-12)
        for band, value in zip(BANDS, expected):
            assert masses[band] == pytest.approx(value, abs=1e-7), (n, c, band)
        best = max(range(len(BANDS)), key=lambda i: expected[i])
        assert assign_band(c, n) == BANDS[best], (n, c)


def test_ties_go_to_the_harder_band():
    # Symmetric posterior Beta(1/2, 1/2) and cut points symmetric about 1/2: hard and easy tie.
    cuts = (0.05, 0.45, 0.55, 0.95)
    masses = band_masses(0, 0, cuts)
    assert masses["hard"] == pytest.approx(masses["easy"], abs=1e-12)
    assert masses["hard"] > masses["medium"]
    assert assign_band(0, 0, cuts) == "hard"
    assert assign_band(1, 2, cuts) == "hard"  # Beta(1.5, 1.5), symmetric too
    # The outer bands tie for the U-shaped prior with wide outer bands.
    assert assign_band(0, 0, (0.3, 0.45, 0.55, 0.7)) == "too_hard"


@pytest.mark.parametrize("c, n", [(-1, 4), (5, 4), (1, -1), (1.5, 4), ("1", 4)])
def test_bad_counts_raise(c, n):
    with pytest.raises(ValueError):
        band_masses(c, n)


@pytest.mark.parametrize(
    "cuts",
    [
        (0.4, 0.08, 0.6, 0.9),
        (0.08, 0.4, 0.4, 0.9),
        (0.0, 0.4, 0.6, 0.9),
        (0.08, 0.4, 0.6, 1.0),
        (0.1, 0.5, 0.9),
    ],
)
def test_bad_boundaries_raise(cuts):
    with pytest.raises(ValueError):
        band_masses(1, 4, cuts)
    with pytest.raises(ValidationError):
        SelectionConfig(boundaries=cuts)


def test_selection_config_defaults_and_validation():
    config = SelectionConfig()
    assert config.boundaries == (0.08, 0.40, 0.60, 0.90)
    assert config.kept_bands == ("hard", "medium", "easy")
    with pytest.raises(ValidationError, match="unknown band"):
        SelectionConfig(kept_bands=("hard", "impossible"))
    with pytest.raises(ValidationError, match="empty"):
        SelectionConfig(kept_bands=())
    with pytest.raises(ValidationError):
        SelectionConfig(min_clean_trials=0)
    with pytest.raises(ValidationError):
        SelectionConfig(unknown_knob=1)
