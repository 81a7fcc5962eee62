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

The task gets the band holding the largest posterior mass. Masses are the
regularised incomplete beta function ``I_x(a, b)`` (``scipy.special.betainc``,
the function behind ``scipy.stats.beta.cdf``) at the cut points, evaluated once
per distinct (c, n) pair and vectorised over tasks (:func:`band_mass_matrix`). **Ties** go to the
harder band: masses within ``TIE_TOLERANCE`` (absolute, 1e-12, well above the
~1e-16 rounding of ``scipy.stats.beta.cdf`` differences and far below any real
difference between bands) of the maximum count as tied, and the first of them
in hardest-to-easiest order wins.

Worked values: n = 8, c = 3 -> Beta(3.5, 5.5), mass 0.5396 in ``hard``;
n = 4: c = 0 too_hard, 1 hard, 2 medium, 3 easy, 4 too_easy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator
from scipy import special

BANDS: tuple[str, ...] = ("too_hard", "hard", "medium", "easy", "too_easy")
"""The five difficulty bands, hardest first."""

DEFAULT_BOUNDARIES: tuple[float, float, float, float] = (0.08, 0.40, 0.60, 0.90)
DEFAULT_KEPT_BANDS: tuple[str, ...] = ("hard", "medium", "easy")
TIE_TOLERANCE = 1e-12
JEFFREYS_PRIOR = 0.5


def _validate_boundaries(boundaries: Sequence[float]) -> tuple[float, ...]:
    values = tuple(float(b) for b in boundaries)
    if len(values) != len(BANDS) - 1:
        raise ValueError(
            f"boundaries needs {len(BANDS) - 1} cut points for {len(BANDS)} bands, got {values}"
        )
    if not all(0.0 < b < 1.0 for b in values):
        raise ValueError(f"boundaries must lie strictly inside (0, 1), got {values}")
    if any(later <= earlier for earlier, later in zip(values, values[1:])):
        raise ValueError(f"boundaries must be strictly increasing, got {values}")
    return values


def _check_count_arrays(
    c: np.ndarray | Sequence[int], n: np.ndarray | Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    c_arr, n_arr = np.asarray(c), np.asarray(n)
    if c_arr.shape != n_arr.shape or c_arr.ndim != 1:
        raise ValueError(
            f"c and n must be 1-d arrays of one length, got shapes {c_arr.shape} and {n_arr.shape}"
        )
    for name, arr in (("c", c_arr), ("n", n_arr)):
        if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"{name} must hold integer counts, got dtype {arr.dtype}")
    c_arr, n_arr = c_arr.astype(np.int64), n_arr.astype(np.int64)
    bad = np.flatnonzero((n_arr < 0) | (c_arr < 0) | (c_arr > n_arr))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"need 0 <= c <= n, got c={c_arr[i]}, n={n_arr[i]} at position {i} ({bad.size} bad)"
        )
    return c_arr, n_arr


def band_mass_matrix(
    c: np.ndarray | Sequence[int],
    n: np.ndarray | Sequence[int],
    boundaries: Sequence[float] = DEFAULT_BOUNDARIES,
) -> np.ndarray:
    """Posterior band masses of many tasks at once, shape ``(tasks, len(BANDS))``.

    The Jeffreys posterior ``Beta(c + 1/2, n - c + 1/2)`` is evaluated with
    ``scipy.special.betainc`` once per distinct (c, n) pair (probes have few:
    at most (n + 1)(n + 2)/2 for n <= n_max) and broadcast back to the tasks.

    Args:
        c: clean successes per task, integer array of shape ``(tasks,)``.
        n: clean probe trials per task (system errors excluded), same shape.
        boundaries: four strictly increasing cut points in (0, 1).

    Returns:
        float64 array; row i holds the masses of ``BANDS`` (hardest first), summing to 1.

    Raises:
        ValueError: non-integer or out-of-range counts (names the first bad
            position), mismatched shapes, or bad boundaries.
    """
    cuts = np.asarray(_validate_boundaries(boundaries))
    c_arr, n_arr = _check_count_arrays(c, n)
    pairs, inverse = np.unique(np.stack([c_arr, n_arr], axis=1), axis=0, return_inverse=True)
    a = pairs[:, 0] + JEFFREYS_PRIOR
    b = pairs[:, 1] - pairs[:, 0] + JEFFREYS_PRIOR
    cdf = special.betainc(a[:, None], b[:, None], cuts[None, :])
    edges = np.concatenate([np.zeros((len(pairs), 1)), cdf, np.ones((len(pairs), 1))], axis=1)
    masses = np.maximum(np.diff(edges, axis=1), 0.0)
    return masses[inverse.reshape(-1)]


def band_indices(masses: np.ndarray) -> np.ndarray:
    """Index into ``BANDS`` of each row's largest mass; ties (``TIE_TOLERANCE``) go to the harder band.

    Args:
        masses: ``(tasks, len(BANDS))`` array from :func:`band_mass_matrix`.

    Returns:
        int64 array of shape ``(tasks,)``.
    """
    top = masses.max(axis=1, keepdims=True)
    return np.argmax(masses >= top - TIE_TOLERANCE, axis=1).astype(np.int64)


def band_masses(
    c: int, n: int, boundaries: Sequence[float] = DEFAULT_BOUNDARIES
) -> dict[str, float]:
    """Posterior mass of each band under ``Beta(c + 1/2, n - c + 1/2)``.

    Args:
        c: clean successes, ``0 <= c <= n``.
        n: clean probe trials (system errors excluded), ``n >= 0``; ``n = 0``
            gives the prior's masses.
        boundaries: four strictly increasing cut points in (0, 1).

    Returns:
        Band name -> mass, in ``BANDS`` order; the masses sum to 1.

    Raises:
        ValueError: counts out of range or bad boundaries.
    """
    if isinstance(c, bool) or isinstance(n, bool) or int(c) != c or int(n) != n:
        raise ValueError(f"c and n must be integer counts, got c={c!r}, n={n!r}")
    row = band_mass_matrix([int(c)], [int(n)], boundaries)[0]
    return {band: float(value) for band, value in zip(BANDS, row)}


def assign_band(c: int, n: int, boundaries: Sequence[float] = DEFAULT_BOUNDARIES) -> str:
    """The band with the largest Jeffreys posterior mass; ties go to the harder band.

    The posterior is ``Beta(c + 1/2, n - c + 1/2)`` (Jeffreys prior; docs/method.md,
    "Difficulty bands"); its mass per band is ``I_x(a, b)`` at the cut points.
    Examples: ``assign_band(0, 4) == "too_hard"``, ``assign_band(2, 4) == "medium"``. Degenerate
    case: ``n = 0`` uses the prior's masses alone (``assign_band(0, 0) == "hard"``);
    ``task_difficulty`` gives such a task no band at all (fewer than ``min_clean_trials``).

    Args:
        c: clean successes of the probe, ``0 <= c <= n``.
        n: clean probe trials (system errors never count), ``n >= 0``.
        boundaries: four strictly increasing cut points in (0, 1).

    Returns:
        One of ``BANDS``. Masses within ``TIE_TOLERANCE`` of the maximum are
        tied; the hardest of them is returned.

    Raises:
        ValueError: counts out of range or bad boundaries.
    """
    masses = np.array([list(band_masses(c, n, boundaries).values())])
    return BANDS[int(band_indices(masses)[0])]


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
            raise ValueError(
                f"kept_bands is empty, so the pool would be empty; choose from {list(BANDS)}"
            )
        return tuple(dict.fromkeys(value))
