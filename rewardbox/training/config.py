"""GRPO configuration (one config object for this concern)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class GRPOConfig(BaseModel):
    """Local GRPO settings.

    Reference run (docs/method.md, "GRPO", after thinkingbox-training): B = 18 tasks per
    step, G = 8 rollouts per task, 50 steps, AdamW lr 1e-6, weight decay 0, no KL,
    token-mean loss aggregation (DAPO, arXiv 2503.14476), clip 0.2. The embedded
    demo trains LoRA adapters (Hu et al., arXiv 2106.09685) on a 135M model, so
    its learning rate is larger.

    Attributes:
        group_size: G, rollouts per task (= TRL ``num_generations`` = verl ``rollout.n``).
        tasks_per_step: B, groups per optimisation step.
        steps: optimisation steps.
        learning_rate, weight_decay: AdamW.
        clip_eps: PPO clip range of the surrogate (one update per batch keeps the ratio at 1).
        advantage_estimator, loss_aggregation: names registered in
            ``rewardbox.training.advantages`` / ``rewardbox.training.losses``.
        max_refill_rounds: extra rounds of fresh groups drawn per step to replace
            zero-variance or system-error groups (DAPO dynamic sampling).
        lora_r, lora_alpha, lora_dropout, lora_target_modules: the LoRA adapter.
        micro_batch_sequences: sequences per forward/backward pass (memory).
        max_grad_norm: gradient clipping.
        seed: task sampling and torch seed.
    """

    model_config = ConfigDict(extra="forbid")

    group_size: int = Field(8, ge=2)
    tasks_per_step: int = Field(18, ge=1)
    steps: int = Field(50, ge=0)
    learning_rate: float = Field(1e-6, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    clip_eps: float = Field(0.2, gt=0)
    advantage_estimator: str = "grpo"
    loss_aggregation: str = "token-mean"
    max_refill_rounds: int = Field(2, ge=0)
    lora_r: int = Field(8, ge=1)
    lora_alpha: int = Field(16, ge=1)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    lora_target_modules: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj"]
    micro_batch_sequences: int = Field(4, ge=1)
    max_grad_norm: float = Field(1.0, gt=0)
    temperature: float = Field(1.0, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _known_names(self) -> "GRPOConfig":
        from rewardbox.training.advantages import ADVANTAGE_ESTIMATORS
        from rewardbox.training.losses import LOSS_AGGREGATIONS

        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage_estimator {self.advantage_estimator!r} unknown; "
                             f"use one of {sorted(ADVANTAGE_ESTIMATORS)}")
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(f"loss_aggregation {self.loss_aggregation!r} unknown; "
                             f"use one of {sorted(LOSS_AGGREGATIONS)}")
        return self
