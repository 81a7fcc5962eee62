"""Policy-relative difficulty bands from a Jeffreys posterior (docs/method.md, "Difficulty bands").

A task probed n times with c clean successes has the posterior
``p | c, n ~ Beta(c + 1/2, n - c + 1/2)`` (Jeffreys prior Beta(1/2, 1/2)).
The unit interval is cut at four boundaries (default 0.08, 0.40, 0.60, 0.90)
into five bands, from hardest to easiest:

=========== ============ ================
band        p range      kept by default
=========== ============ ================
too_hard    [0, 0.08)    no
hard        [0.08, 0.40) yes
medium      [0.40, 0.60) yes
easy        [0.60, 0.90) yes
too_easy    [0.90, 1]    no
=========== ============ ================

The task gets the band holding the largest posterior mass. **Ties** go to the
harder band: masses within ``TIE_TOLERANCE`` (absolute, 1e-12, well above the
~1e-16 rounding of ``scipy.stats.beta.cdf`` differences and far below any real
difference between bands) of the maximum count as tied, and the first of them
in hardest-to-easiest order wins.

Worked values: n = 8, c = 3 -> Beta(3.5, 5.5), mass 0.5396 in ``hard``;
n = 4: c = 0 too_hard, 1 hard, 2 medium, 3 easy, 4 too_easy.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator
from scipy import stats

BANDS: tuple[str, ...] = ("too_hard", "hard", "medium", "easy", "too_easy")
"""The five difficulty bands, hardest first."""

DEFAULT_BOUNDARIES: tuple[float, float, float, float] = (0.08, 0.40, 0.60, 0.90)
DEFAULT_KEPT_BANDS: tuple[str, ...] = ("hard", "medium", "easy")
TIE_TOLERANCE = 1e-12
JEFFREYS_PRIOR = 0.5


def _validate_boundaries(boundaries: Sequence[float]) -> tuple[float, ...]:
    values = tuple(float(b) for b in boundaries)
    if len(values) != len(BANDS) - 1:
        raise ValueError(f"boundaries needs {len(BANDS) - 1} cut points for {len(BANDS)} bands, got {values}")
    if not all(0.0 < b < 1.0 for b in values):
        raise ValueError(f"boundaries must lie strictly inside (0, 1), got {values}")
    if any(later <= earlier for earlier, later in zip(values, values[1:])):
        raise ValueError(f"boundaries must be strictly increasing, got {values}")
    return values


def band_masses(k: int, n: int, boundaries: Sequence[float] = DEFAULT_BOUNDARIES) -> dict[str, float]:
    """Posterior mass of each band under ``Beta(k + 1/2, n - k + 1/2)``.

    Args:
        k: clean successes, ``0 <= k <= n``.
        n: clean probe trials (system errors excluded), ``n >= 0``; ``n = 0``
            gives the prior's masses.
        boundaries: four strictly increasing cut points in (0, 1).

    Returns:
        Band name -> mass, in ``BANDS`` order; the masses sum to 1.

    Raises:
        ValueError: counts out of range or bad boundaries.
    """
    if isinstance(k, bool) or isinstance(n, bool) or int(k) != k or int(n) != n:
        raise ValueError(f"k and n must be integer counts, got k={k!r}, n={n!r}")
    k, n = int(k), int(n)
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    cuts = _validate_boundaries(boundaries)
    cdf = stats.beta(k + JEFFREYS_PRIOR, n - k + JEFFREYS_PRIOR).cdf(cuts)
    edges = [0.0, *(float(v) for v in cdf), 1.0]
    return {band: max(0.0, edges[i + 1] - edges[i]) for i, band in enumerate(BANDS)}


def assign_band(k: int, n: int, boundaries: Sequence[float] = DEFAULT_BOUNDARIES) -> str:
    """The band with the largest Jeffreys posterior mass; ties go to the harder band.

    Args:
        k: clean successes of the probe, ``0 <= k <= n``.
        n: clean probe trials (system errors never count), ``n >= 0``.
        boundaries: four strictly increasing cut points in (0, 1).

    Returns:
        One of ``BANDS``. Masses within ``TIE_TOLERANCE`` of the maximum are
        tied; the hardest of them is returned.

    Raises:
        ValueError: counts out of range or bad boundaries.
    """
    masses = band_masses(k, n, boundaries)
    top = max(masses.values())
    return next(band for band in BANDS if masses[band] >= top - TIE_TOLERANCE)


class SelectionConfig(BaseModel):
    """How probe results become a training pool.

    Attributes:
        boundaries: four strictly increasing cut points in (0, 1) between the
            five bands (docs/method.md, "Difficulty bands"; default 0.08, 0.40, 0.60, 0.90).
        kept_bands: bands that enter the training pool (default hard, medium,
            easy: tasks the policy sometimes but not always solves, the ones
            whose GRPO groups have non-zero reward variance).
        min_clean_trials: a task needs at least this many clean probe trials to
            get a band; with fewer it gets band null and never enters the pool.
            Default 4, the smallest n at which every band is reachable
            (the n = 4 worked values).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    boundaries: tuple[float, float, float, float] = DEFAULT_BOUNDARIES
    kept_bands: tuple[str, ...] = DEFAULT_KEPT_BANDS
    min_clean_trials: int = Field(default=4, ge=1)

    @field_validator("boundaries")
    @classmethod
    def _check_boundaries(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        return _validate_boundaries(value)

    @field_validator("kept_bands")
    @classmethod
    def _check_kept_bands(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [b for b in value if b not in BANDS]
        if unknown:
            raise ValueError(f"unknown band(s) {unknown} in kept_bands; choose from {list(BANDS)}")
        if not value:
            raise ValueError(f"kept_bands is empty, so the pool would be empty; choose from {list(BANDS)}")
        return tuple(dict.fromkeys(value))
