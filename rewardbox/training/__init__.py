"""GRPO training: advantage estimators, policy losses, trainers."""

from rewardbox.training.advantages import group_advantages

__all__ = ["group_advantages"]
