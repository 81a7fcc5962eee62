"""The one resource that picks the profile (embedded defaults or real endpoints)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from rewardbox.config.profile import Profile, load_profile
from rewardbox.config.provenance import (
    TAG_CODE_VERSION,
    TAG_CONFIG_HASH,
    TAG_GIT_COMMIT,
    TAG_PROFILE,
    TAG_TASK_SET_VERSION,
    benchmark_version,
    profile_config_hash,
    run_tags,
)
from rewardbox.policy.base import Policy

PROVENANCE_TAGS = (TAG_PROFILE, TAG_CONFIG_HASH, TAG_CODE_VERSION, TAG_GIT_COMMIT)


_BENCHMARK_VERSIONS: dict[str, str] = {}  # config hash -> version, once per process


def _benchmark_version_or_error(profile: Profile) -> str:
    key = profile_config_hash(profile)
    if key not in _BENCHMARK_VERSIONS:
        try:
            _BENCHMARK_VERSIONS[key] = benchmark_version(profile)
        except (OSError, ValueError) as exc:  # a broken task file: benchmark_tasks fails with the details
            return f"unavailable ({type(exc).__name__})"
    return _BENCHMARK_VERSIONS[key]


class RewardboxResource(dg.ConfigurableResource):
    """Profile selection and artifact paths.

    Attributes:
        profile: a profile name (``demo``, ``test``) or a YAML path. Set from the
            ``REWARDBOX_PROFILE`` environment variable in ``pipelines.definitions``.
        data_dir: overrides the profile's ``data_dir`` (tests use ``tmp_path``).
    """

    profile: str = "demo"
    data_dir: str | None = None

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Tag the run with the profile, config hash, code version and task-set version it runs with.

        Runs started by the jobs carry the tags of the profile read at start-up; ad hoc
        materialisations (``dagster asset materialize``, the UI's Materialize button) carry none.
        Here, at run start, the values the run actually uses are written (only those that differ),
        so every run that uses this resource can be audited from its tags. A benchmark that cannot
        be loaded does not fail the run here (its asset reports that): the tag then says so.
        """
        run, instance = context.dagster_run, context.instance
        if run is None or instance is None:
            return
        profile = self.load()
        wanted = {k: v for k, v in run_tags(profile, samples_policy=False).items() if k in PROVENANCE_TAGS}
        if TAG_TASK_SET_VERSION not in run.tags:
            wanted[TAG_TASK_SET_VERSION] = _benchmark_version_or_error(profile)
        changed = {k: v for k, v in wanted.items() if run.tags.get(k) != v}
        if changed:
            instance.add_run_tags(run.run_id, changed)

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
