"""GRPO configuration (one config object for this concern)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

LORA_LEARNING_RATE = 1e-4
"""Default AdamW learning rate with LoRA: QLoRA (Dettmers et al. 2023, arXiv 2305.14314) trains
adapters at 2e-4 (models up to 13B) and 1e-4 (33B and up); "LoRA Without Regret" (Schulman and
Thinking Machines Lab, 2025) measures LoRA's best learning rate at about 10x full fine-tuning's,
independent of rank. With Adam an adapter moves about one learning rate per step, so the reference
run's full fine-tune 1e-6 leaves a LoRA adapter (B = 0 at start) near zero after 50 steps."""

FULL_LEARNING_RATE = 1e-6
"""Default learning rate for a full fine-tune: the reference run's (AdamW, weight decay 0)."""

LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Every linear layer of a Llama block, the MLP projections included: QLoRA (arXiv 2305.14314) found
all-linear adapters needed to match full fine-tuning, and "LoRA Without Regret" (2025) that
attention-only LoRA underperforms even at matched parameter count."""


class GRPOConfig(BaseModel):
    """Local GRPO settings.

    Reference run (docs/method.md, "GRPO", after thinkingbox-training): B = 18 tasks per step, G = 8
    rollouts per task, 50 steps, a full fine-tune with AdamW lr 1e-6, weight decay
    0, no KL, token-mean loss aggregation (DAPO, arXiv 2503.14476), clip 0.2. The
    default here trains LoRA adapters (Hu et al., arXiv 2106.09685), whose
    learning rate, rank and target modules follow the sources quoted on
    ``LORA_LEARNING_RATE`` and ``LORA_TARGET_MODULES``.

    Attributes:
        backend: ``"local"`` trains here with the local trainer (``training.local``);
            ``"verl"`` submits verl's trainer as a Ray job to the cluster resource
            (``training.verl.job``; its settings are the profile's ``verl`` section).
        group_size: G, rollouts per task (= TRL ``num_generations`` = verl ``rollout.n``).
        tasks_per_step: B, groups per optimisation step.
        steps: optimisation steps.
        finetune: ``"lora"`` (adapters; the base stays frozen) or ``"full"`` (every weight).
        learning_rate: AdamW; None picks ``LORA_LEARNING_RATE`` or ``FULL_LEARNING_RATE``.
        weight_decay: AdamW.
        clip_eps: PPO clip range of the surrogate.
        ppo_epochs: optimiser steps per sampled batch (TRL ``num_iterations``, verl
            ``ppo_epochs``); the "old" log-probs (``old_logprobs``) are fixed for the
            step, so the clipped ratio bounds how far later epochs move.
        old_logprobs: whose log-probs the PPO ratio divides by. ``"sampler"``: the sampler's,
            recorded with each token (exact when sampler and trainer compute alike: fp32,
            gap < 1e-3). ``"trainer"``: the trainer's own at the step's start (its first
            epoch, detached; what TRL does for ``num_iterations`` 1 and verl's recomputed
            ``old_log_prob``), so the first epoch's ratio is exactly 1, and the sampler's
            log-probs give a truncated importance weight per token
            (``sampler_is_cap``). ``"auto"``: ``"sampler"`` on fp32 weights, else ``"trainer"``
            (in bf16 the two differed by up to 0.24-0.51 per token on the real weights, which a
            ratio clipped at 1 ± 0.2 would read as a policy change; docs/performance.md,
            "Precision").
        sampler_is_cap: with trainer log-probs as the old ones, each token's loss is weighted by
            ``min(exp(trainer - sampler), cap)``, the truncated importance sampling
            correction for a sampler that computes differently from the trainer (Yao et al.
            2025, "Your efficient RL framework secretly brings you off-policy RL training";
            TRL ``vllm_importance_sampling_mode="token_truncate"``, verl ``tis_imp_ratio_cap``);
            None: no correction.
        advantage_estimator, loss_aggregation: names registered in
            ``rewardbox.training.advantages`` / ``rewardbox.training.losses``.
        max_refill_rounds: extra rounds of fresh groups drawn per step to replace
            zero-variance (or, with ``system_error_refill="replace"``, failed) groups
            (DAPO dynamic sampling).
        system_error_refill: ``"rerun"`` re-runs only a group's system-error rollouts
            (same task, fresh trials, at most ``max_system_error_reruns`` rounds) and
            masks those still failing (advantages over the clean ones); ``"replace"``
            drops the whole group and draws a new task, as the reference run does.
            Default ``"rerun"``: on a CPU every rollout is expensive, and a system
            error is an infrastructure fault independent of the policy's tokens, so
            the clean rollouts are a fair sample of the policy on that task.
        max_system_error_reruns: rounds of re-runs per group (``"rerun"`` only).
        mask_truncated: only for budgets that do NOT hold every golden call (no token
            check, e.g. an endpoint policy): drop from the loss every rollout with a
            completion cut by the token budget (``finish_reason == "length"``); its reward
            measures the budget, not the policy (DAPO overlong filtering, arXiv 2503.14476),
            and still counts in the group's advantage statistics. When the budget check
            passed (every local policy), a cut completion is a policy failure: reward 0 in
            the loss, never masked (``groups.training_rewards``), whatever this says.
        task_sampling: ``"posterior_variance"`` draws tasks by the variance of a
            running Jeffreys posterior fed by the GRPO groups and drops tasks that
            become too_easy (``curriculum.PosteriorTaskSampler``); ``"uniform"``
            shuffles the pool in passes.
        lora_r, lora_alpha, lora_dropout, lora_target_modules: the LoRA adapter.
        micro_batch_sequences: most sequences per forward/backward pass.
        sample_merged: on-policy LoRA: rollouts sample from weights with the adapter merged in
            (merged after each update, unmerged before the next; ``training.merged_sampling``:
            fp32 weights subtract ``B A`` again, bf16/fp16 ones restore a saved copy), cheaper
            per decode step than the unmerged adapter (docs/performance.md).
        micro_batch_memory_mib: activations one micro-batch may keep for backward, MiB (an
            estimate per token, ``shared_prefix.activation_bytes_per_token``): micro-batches of
            long samples get fewer rows; None sizes by ``micro_batch_sequences`` alone.
        max_response_tokens: L_max of the ``"seq-mean-token-sum-norm"`` loss (Dr. GRPO's
            constant normaliser), tokens per sample (one agent turn); None: the episode's
            token budget for a local policy (``training.local``), else the step's longest
            completion (never one micro-batch's padded width).
        max_grad_norm: gradient clipping.
        temperature: rollout sampling temperature; the trainer scores at the same one.
        seed: task sampling and torch seed.
    """

    model_config = ConfigDict(extra="forbid")

    backend: Literal["local", "verl"] = "local"
    group_size: int = Field(8, ge=2)
    tasks_per_step: int = Field(18, ge=1)
    steps: int = Field(50, ge=0)
    finetune: Literal["lora", "full"] = "lora"
    learning_rate: float | None = Field(None, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    clip_eps: float = Field(0.2, gt=0, lt=1)
    ppo_epochs: int = Field(1, ge=1)
    old_logprobs: Literal["auto", "sampler", "trainer"] = "auto"
    sampler_is_cap: float | None = Field(2.0, gt=0)
    advantage_estimator: str = "grpo"
    loss_aggregation: str = "token-mean"
    max_refill_rounds: int = Field(2, ge=0)
    system_error_refill: Literal["rerun", "replace"] = "rerun"
    max_system_error_reruns: int = Field(2, ge=0)
    mask_truncated: bool = True
    task_sampling: Literal["posterior_variance", "uniform"] = "posterior_variance"
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    lora_target_modules: list[str] = list(LORA_TARGET_MODULES)
    micro_batch_sequences: int = Field(4, ge=1)
    micro_batch_memory_mib: int | None = Field(1024, ge=1)
    sample_merged: bool = True
    max_response_tokens: int | None = Field(None, ge=1)
    max_grad_norm: float = Field(1.0, gt=0)
    temperature: float = Field(1.0, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _known_names(self) -> GRPOConfig:
        from rewardbox.training.advantages import ADVANTAGE_ESTIMATORS
        from rewardbox.training.losses import LOSS_AGGREGATIONS

        if self.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            raise ValueError(
                f"advantage_estimator {self.advantage_estimator!r} unknown; "
                f"use one of {sorted(ADVANTAGE_ESTIMATORS)}"
            )
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(
                f"loss_aggregation {self.loss_aggregation!r} unknown; "
                f"use one of {sorted(LOSS_AGGREGATIONS)}"
            )
        if self.learning_rate is None:
            self.learning_rate = (
                LORA_LEARNING_RATE if self.finetune == "lora" else FULL_LEARNING_RATE
            )
        return self
