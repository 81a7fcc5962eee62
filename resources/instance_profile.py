"""One Dagster instance per profile: the instance records the profile it serves and refuses any other.

Every profile materialises the same asset keys (``probe_results``, ``merged_checkpoint``...). Two
profiles on one instance would share each key's history: the audit's "what was read" pointers,
staleness and the UI would mix the runs of both (the latest materialisation of whichever profile ran
last). So a profile is part of an asset's identity through its instance: ``make demo``/``make dev``
use ``.dagster_home/<profile>/`` (``DAGSTER_HOME`` per profile, set by the Makefile), and the first
run on an instance claims it for its profile in the instance's own key-value store (the run storage,
so SQLite and Postgres alike). A run of another profile on a claimed instance fails at its first
step, before anything is written, naming both profiles and the instance. docs/audit.md,
"One instance per profile".
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import dagster as dg

from rewardbox.config.profile import Profile

PROFILE_KEY = "rewardbox/profile"
"""The instance's key-value entry that names the profile it serves."""


class ProfileInstanceError(RuntimeError):
    """A run of one profile on an instance that another profile's runs use (a setup error; nothing is written)."""


def profile_identity(profile: Profile) -> str:
    """``<name> at <artifacts dir>``: the profile and where its artifacts live (both shape the history)."""
    return f"{profile.name} at {profile.artifacts_path.resolve()}"


def instance_profile(instance: dg.DagsterInstance) -> str | None:
    """The identity of the profile the instance serves, or None when no run has claimed it yet."""
    return instance.run_storage.get_cursor_values({PROFILE_KEY}).get(PROFILE_KEY)


def claim_instance(instance: dg.DagsterInstance, profile: Profile) -> None:
    """Claim ``instance`` for ``profile`` on its first run; later runs check the claim.

    An ephemeral instance (in-process ``materialize``, tests) holds no history beyond its process, so
    it is never claimed: only a persistent instance (``DAGSTER_HOME``) has a history to keep apart.

    Raises:
        ProfileInstanceError: the instance serves another profile (or the same name with another data
            directory); the message names both and the ``DAGSTER_HOME`` to use instead.
    """
    if not instance.is_persistent:
        return
    wanted, claimed = profile_identity(profile), instance_profile(instance)
    if claimed is None:
        instance.run_storage.set_cursor_values({PROFILE_KEY: wanted})
    elif claimed != wanted:
        raise _refusal(profile, instance.root_directory, claimed)


def _refusal(profile: Profile, where: str, claimed: str) -> ProfileInstanceError:
    return ProfileInstanceError(
        f"profile {profile_identity(profile)} refuses the Dagster instance {where}: it serves profile {claimed}. "
        f"Each profile has its own instance, so that audits, lineage and the UI never mix profiles: use "
        f"DAGSTER_HOME=.dagster_home/{profile.name} (`make dev PROFILE={profile.name}` sets it)"
    )


def refuse_foreign_instance(profile: Profile, home: str | os.PathLike | None) -> None:
    """At definitions load (``pipelines.definitions``): refuse to serve ``profile`` over the instance at
    ``home`` (``DAGSTER_HOME``) when another profile claimed it, so the UI never shows one profile's
    graph over another's history. No instance there, or one that cannot be opened here: nothing to
    check (the claim is checked again when a run starts).

    Raises:
        ProfileInstanceError: the instance serves another profile.
    """
    if not home or not (Path(home) / "dagster.yaml").is_file():
        return
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            claimed = instance_profile(instance)
    except Exception as exc:  # noqa: BLE001 - advisory at load time; every run start checks again
        warnings.warn(
            f"could not read the profile claim of the Dagster instance {home}: {exc}", stacklevel=2
        )
        return
    if claimed is not None and claimed != profile_identity(profile):
        raise _refusal(profile, str(home), claimed)
