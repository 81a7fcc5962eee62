"""``thinkingbox.common.config_types``: the config types test code touches.

Only ``RubricConfig`` (one rubric criterion for :mod:`.rubrics_judge`),
``ToolDef`` and the name the test function is bound to are mirrored; the
dataset file schemas live in :mod:`rewardbox.tasks.tb_config`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from rewardbox.grading.outcome import TEST_FN_BINDING
from rewardbox.grading.tb_common.chat_types import ToolDef

TEST_CASE_FN_NAME = TEST_FN_BINDING


class RubricConfig(BaseModel):
    """One rubric criterion.

    Attributes:
        criterion: what the response should do (or, for a penalty, must not do).
        weight: points (>= 0); for a multiplicative penalty a fraction in [0, 1].
        is_penalty: the criterion describes a violation.
        penalty_type: ``deduction`` (subtract points) or ``multiplicative`` (scale the reward).
    """

    criterion: str
    weight: float = Field(ge=0)
    is_penalty: bool = False
    penalty_type: Literal["deduction", "multiplicative"] = "deduction"

    @model_validator(mode="after")
    def _multiplicative_weight(self) -> RubricConfig:
        if self.is_penalty and self.penalty_type == "multiplicative" and self.weight > 1:
            raise ValueError("a multiplicative penalty's weight must be in [0, 1]")
        return self


__all__ = ["RubricConfig", "TEST_CASE_FN_NAME", "ToolDef"]
