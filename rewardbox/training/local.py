"""Glue for the ``grpo_checkpoint`` stage: local policy + LoRA + episodes + trainer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from rewardbox.config.profile import Profile
from rewardbox.episode.attempt import run_attempt
from rewardbox.evaluation.services import episode_runner
from rewardbox.tasks.schema import Task
from rewardbox.training.checkpoint import attach_lora, save_adapter
from rewardbox.training.groups import task_stream
from rewardbox.training.trainer import StepMetrics, TrainingSummary, train_grpo


def train_local_grpo(
    pool: Sequence[Task],
    base_dir: Path,
    out_dir: Path,
    profile: Profile,
    *,
    log: Callable[[str], None] | None = None,
) -> tuple[Path, TrainingSummary]:
    """Train a LoRA adapter on ``pool`` with GRPO; rollouts use the model being trained.

    Args:
        pool: training tasks (never benchmark tasks; the assets enforce it).
        base_dir: HF checkpoint directory of the base policy.
        out_dir: where the adapter and ``training_metrics.json`` go.
        profile: ``grpo`` sets the method, ``policy``/``episode`` the rollouts.

    Returns:
        (adapter directory, per-step metrics).

    Raises:
        ValueError: empty pool.
    """
    from rewardbox.policy.local import LocalPolicy

    cfg = profile.grpo
    policy = LocalPolicy(base_dir, max_batch_size=profile.policy.max_batch_size, seed=cfg.seed)
    policy.model = attach_lora(policy.model, cfg)
    episode = profile.episode.model_copy(update={"temperature": cfg.temperature})
    profile = profile.model_copy(update={"episode": episode})

    def report(metrics: StepMetrics) -> None:
        if log:
            log(f"step {metrics.step}: mean_reward={metrics.mean_reward:.3f} "
                f"zero_variance={metrics.zero_variance_frac:.2f} loss={metrics.loss} "
                f"samples={metrics.samples} ({metrics.seconds:.0f}s)")

    async def main() -> TrainingSummary:
        try:
            async with episode_runner(profile, policy) as runner:
                return await train_grpo(
                    policy.model, policy.tokenizer.pad_token_id or 0, task_stream(pool, cfg.seed),
                    partial(run_attempt, runner), cfg, on_step=report,
                )
        finally:
            await policy.aclose()

    summary = asyncio.run(main())
    save_adapter(policy.model, out_dir, [m.as_dict() for m in summary.steps])
    return Path(out_dir), summary
