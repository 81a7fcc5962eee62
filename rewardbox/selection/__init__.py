"""Task selection: probes -> Jeffreys posterior -> difficulty bands -> training pool."""

from rewardbox.selection.bands import (
    BANDS,
    DEFAULT_BOUNDARIES,
    DEFAULT_KEPT_BANDS,
    TIE_TOLERANCE,
    SelectionConfig,
    assign_band,
    band_indices,
    band_mass_matrix,
    band_masses,
)
from rewardbox.selection.difficulty import (
    DIFFICULTY_COLUMNS,
    band_counts,
    task_difficulty,
    teachable,
    training_pool,
)

__all__ = [
    "BANDS",
    "DEFAULT_BOUNDARIES",
    "DEFAULT_KEPT_BANDS",
    "DIFFICULTY_COLUMNS",
    "TIE_TOLERANCE",
    "SelectionConfig",
    "assign_band",
    "band_indices",
    "band_mass_matrix",
    "band_counts",
    "band_masses",
    "task_difficulty",
    "teachable",
    "training_pool",
]
