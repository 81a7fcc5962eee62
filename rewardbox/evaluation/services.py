"""Kept for users of the old path: episodes now run from the episode layer.

The profile -> sandbox / user simulator / grader / policy wiring lives in
``rewardbox.episode.compose`` (the composition root) and ``run_trials`` in
``rewardbox.episode.run``.
"""

from rewardbox.episode.compose import (
    build_sandbox,
    build_user_simulator,
    check_policy_budget,
    episode_runner,
    profile_servers_config,
)
from rewardbox.episode.run import run_trials, run_trials_async

__all__ = ["build_sandbox", "build_user_simulator", "check_policy_budget", "episode_runner",
           "profile_servers_config", "run_trials", "run_trials_async"]
