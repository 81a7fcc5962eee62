"""Evaluation config: how many trials of each benchmark task.

Composed by the profile under ``evaluation:`` (``rewardbox.config.profile.Profile``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EvaluationConfig(BaseModel):
    """Benchmark evaluation: every task x k trials.

    Attributes:
        trials: k, trials per benchmark task (the largest k of pass@k and pass^k).
    """

    model_config = ConfigDict(extra="forbid")

    trials: int = Field(20, ge=1)
