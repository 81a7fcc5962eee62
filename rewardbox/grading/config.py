"""Grading config: the test execution pool and the optional yes/no judge endpoint.

Composed by the profile under ``grading:`` (``rewardbox.config.profile.Profile``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GradingConfig(BaseModel):
    """Test execution pool and the optional yes/no judge endpoint.

    Attributes:
        workers: processes that run task tests.
        timeout_s: limit of one task's tests, seconds (a hung test is a system error).
        judge_base_url, judge_model: an OpenAI-compatible judge; None runs no judge.
        judge_api_key_env: the environment variable holding the judge's key (the key
            itself is never in config).
    """

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(2, ge=1)
    timeout_s: float = Field(30.0, gt=0)
    judge_base_url: str | None = None
    judge_model: str | None = None
    judge_api_key_env: str = "OPENAI_API_KEY"

    def judge_config(self) -> dict | None:
        """The judge's ``{base_url, model, api_key_env}``, or None when no judge is configured."""
        if not self.judge_base_url:
            return None
        return {
            "base_url": self.judge_base_url,
            "model": self.judge_model or "judge",
            "api_key_env": self.judge_api_key_env,
        }
