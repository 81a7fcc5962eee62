"""Validated configuration: one object per concern, grouped into named profiles."""

from rewardbox.config.profile import Profile, load_profile

__all__ = ["Profile", "load_profile"]
