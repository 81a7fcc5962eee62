"""The one resource that picks the profile (embedded defaults or real endpoints)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from rewardbox.config.profile import Profile, load_profile
from rewardbox.policy.base import Policy


class RewardboxResource(dg.ConfigurableResource):
    """Profile selection and artifact paths.

    Attributes:
        profile: a profile name (``demo``, ``test``) or a YAML path. Set from the
            ``REWARDBOX_PROFILE`` environment variable in ``pipelines.definitions``.
        data_dir: overrides the profile's ``data_dir`` (tests use ``tmp_path``).
    """

    profile: str = "demo"
    data_dir: str | None = None

    def load(self) -> Profile:
        profile = load_profile(self.profile)
        if self.data_dir:
            profile = profile.model_copy(update={"data_dir": self.data_dir})
        return profile

    def path(self, *parts: str) -> Path:
        """A path under ``<data_dir>/<profile name>/``; parents are created."""
        profile = self.load()
        out = profile.data_path / profile.name / Path(*parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        return out

    def policy(self, checkpoint_dir: Path | None) -> Policy:
        """The policy the profile names, loaded from ``checkpoint_dir`` when local."""
        from rewardbox.policy import build_policy

        return build_policy(self.load().policy, checkpoint_dir=checkpoint_dir)
