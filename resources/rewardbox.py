"""The one resource that picks the profile (embedded defaults or real endpoints) and its paths."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from resources.instance_profile import claim_instance
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
from rewardbox.policy.config import PolicyConfig

PROVENANCE_TAGS = (TAG_PROFILE, TAG_CONFIG_HASH, TAG_CODE_VERSION, TAG_GIT_COMMIT)
INCOMING_CHECKPOINTS = ("checkpoints", "incoming")
"""Where checkpoints to evaluate are dropped, under ``<data_dir>/<profile>/`` (one partition each)."""


_BENCHMARK_VERSIONS: dict[str, str] = {}  # config hash -> version, once per process


def _benchmark_version_or_error(profile: Profile) -> str:
    key = profile_config_hash(profile)
    if key not in _BENCHMARK_VERSIONS:
        try:
            _BENCHMARK_VERSIONS[key] = benchmark_version(profile)
        except (
            OSError,
            ValueError,
        ) as exc:  # a broken task file: benchmark_tasks fails with the details
            return f"unavailable ({type(exc).__name__})"
    return _BENCHMARK_VERSIONS[key]


class RewardboxResource(dg.ConfigurableResource):
    """Profile selection, artifact paths and the endpoint secrets.

    The profile file is read once per process while it is unchanged
    (``rewardbox.config.profile.load_profile`` caches it by path and modification time).

    Attributes:
        profile: a profile name (``demo``, ``test``) or a YAML path. ``pipelines.definitions``
            sets it from ``REWARDBOX_PROFILE``.
        data_dir: overrides the profile's ``data_dir`` (tests use ``tmp_path``; ``pipelines.definitions``
            sets it from ``REWARDBOX_DATA_DIR``).
        policy_api_key: the endpoint policy's API key, given as ``dg.EnvVar(<policy.api_key_env>)``
            so that Dagster shows the variable's name and never its value; None reads
            ``policy.api_key_env`` from the environment when the client is made.
    """

    profile: str = "demo"
    data_dir: str | None = None
    policy_api_key: str | None = None

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Tag the run with the profile, config hash, code version and task-set version it runs with.

        Runs started by the jobs carry the tags of the profile read at start-up; ad hoc
        materialisations (``dagster asset materialize``, the UI's Materialize button) carry none.
        Here, at run start, the values the run actually uses are written (only those that differ),
        so every run that uses this resource can be audited from its tags. A benchmark that cannot
        be loaded does not fail the run here (its asset reports that): the tag then says so.

        Raises:
            ProfileInstanceError: the instance serves another profile (``resources.instance_profile``):
                one instance per profile, so that histories never mix.
        """
        run, instance = context.dagster_run, context.instance
        if run is None or instance is None:
            return
        profile = self.load()
        claim_instance(instance, profile)
        wanted = {
            k: v for k, v in run_tags(profile, samples_policy=False).items() if k in PROVENANCE_TAGS
        }
        if TAG_TASK_SET_VERSION not in run.tags:
            wanted[TAG_TASK_SET_VERSION] = _benchmark_version_or_error(profile)
        changed = {k: v for k, v in wanted.items() if run.tags.get(k) != v}
        if changed:
            instance.add_run_tags(run.run_id, changed)

    def load(self) -> Profile:
        """The profile (a fresh copy; the file is parsed once while it is unchanged).

        Raises:
            FileNotFoundError, ValueError: as ``load_profile``.
        """
        return load_profile(self.profile, data_dir=self.data_dir)

    def artifacts_dir(self) -> Path:
        """``<data_dir>/<profile name>/``: every artifact of the profile lives under it."""
        return self.load().artifacts_path

    def path(self, *parts: str) -> Path:
        """A path under ``<data_dir>/<profile name>/``; parents are created."""
        out = self.artifacts_dir() / Path(*parts)
        out.parent.mkdir(parents=True, exist_ok=True)
        return out

    def incoming_checkpoint(self, name: str = "") -> Path:
        """The drop directory of checkpoints to evaluate, or the checkpoint ``name`` in it."""
        return (
            self.path(*INCOMING_CHECKPOINTS, name)
            if name
            else self.artifacts_dir().joinpath(*INCOMING_CHECKPOINTS)
        )

    def policy(
        self, checkpoint_dir: Path | str | None, config: PolicyConfig | None = None
    ) -> Policy:
        """The policy ``config`` names (default: the profile's), loaded from ``checkpoint_dir`` when local."""
        from rewardbox.policy import build_policy

        return build_policy(
            config or self.load().policy,
            checkpoint_dir=checkpoint_dir or None,
            api_key=self.policy_api_key,
        )
