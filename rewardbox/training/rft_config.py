"""The optional warm start's configuration: rejection-sampling fine-tuning (RFT) before GRPO."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class RFTConfig(BaseModel):
    """Rejection-sampling fine-tuning on the base policy's own successful probe trajectories of the
    training pool (docs/warm_start.md). Off by default: no shipped profile turns it on.

    Attributes:
        enabled: define the warm-start assets (``rft_checkpoint``, ``rft_merged_checkpoint``,
            ``rft_evaluation_results``), start GRPO from the warm-start adapter and report three arms.
            Needs ``grpo.backend: local`` and ``grpo.finetune: lora`` (the profile checks it).
        epochs: passes over the warm-start samples (one sample per agent turn of a kept trajectory).
        learning_rate: AdamW's rate for the warm start (LoRA; the GRPO default, ``LORA_LEARNING_RATE``).
        max_samples_per_task: most successful probe trajectories replayed per pool task (lowest
            trials first), so a task the base policy solves often does not dominate the data.
        batch_samples: agent-turn samples per optimiser step (token-mean NLL over the batch).
        seed: the order of the samples in each epoch.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    epochs: int = Field(2, ge=1)
    learning_rate: float = Field(1e-4, gt=0)
    max_samples_per_task: int = Field(2, ge=1)
    batch_samples: int = Field(16, ge=1)
    seed: int = 0
