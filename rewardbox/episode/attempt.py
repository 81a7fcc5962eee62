"""Kept for users of the old path: a trial's run is ``rewardbox.episode.trial.run_trial``."""

from rewardbox.episode.trial import run_trial

run_attempt = run_trial
"""The old name of :func:`rewardbox.episode.trial.run_trial`."""

__all__ = ["run_attempt", "run_trial"]
