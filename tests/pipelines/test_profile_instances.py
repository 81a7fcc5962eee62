"""Two profiles interleaved never share an asset's history: one Dagster instance per profile.

Two copies of the ``test`` profile (``alpha``, ``beta``, with different candidate sets) materialise
``candidate_tasks`` and then ``screened_candidates``, interleaved, each on its own instance under one
``.dagster_home/`` (the Makefile's layout: ``.dagster_home/<profile>/``), with the resources laid out
as ``pipelines.definitions`` lays them (artifacts under ``data/<profile>/``). The audit of each
profile's ``screened_candidates`` names that profile's inputs only. A run of one profile on the
other's instance (the mistake of the issue: two profiles on "one" instance) fails before it writes
anything, naming both profiles.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import dagster as dg
import pytest
import yaml

from rewardbox.config.profile import PROFILE_DIR

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


def _profile(tmp_path: Path, name: str, retail: int) -> str:
    profile = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    profile["tasks"]["candidates"][0]["limit"] = retail  # the two profiles' candidate sets differ
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(profile))
    return str(path)


def _resources(profile: str, data: Path) -> dict:
    """As ``pipelines.definitions`` builds them: every artifact under ``<data>/<profile name>/``."""
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource

    rewardbox = RewardboxResource(profile=profile, data_dir=str(data))
    artifacts = rewardbox.artifacts_dir()
    return {
        "rewardbox": rewardbox,
        "ray_cluster": RayClusterResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=str(artifacts / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(artifacts / "objects")),
    }


def _instance(root: Path, name: str) -> dg.DagsterInstance:
    home = root / name
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")  # as `make dev PROFILE=<name>` does
    return dg.DagsterInstance.from_config(str(home))


def _materialise(instance: dg.DagsterInstance, profile: str, data: Path, asset: str):
    from assets.tasks import candidate_tasks, screened_candidates

    return dg.materialize(
        [candidate_tasks, screened_candidates],
        selection=[asset],
        instance=instance,
        resources=_resources(profile, data),
        raise_on_error=False,
    )


def test_the_makefile_gives_each_profile_its_own_instance():
    out = subprocess.run(
        ["make", "-s", "dagster-home", "PROFILE=alpha"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == str(REPO / ".dagster_home" / "alpha")


def test_interleaved_profiles_each_audit_their_own_inputs(tmp_path):
    from pipelines.audit import render, trace
    from resources.instance_profile import instance_profile

    data, homes = tmp_path / "data", tmp_path / ".dagster_home"
    profiles = {"alpha": _profile(tmp_path, "alpha", 6), "beta": _profile(tmp_path, "beta", 3)}
    instances = {name: _instance(homes, name) for name in profiles}
    try:
        for asset in ("candidate_tasks", "screened_candidates"):  # alpha, beta, alpha, beta
            for name, profile in profiles.items():
                assert _materialise(instances[name], profile, data, asset).success, (name, asset)

        # the mistake: beta's run on alpha's instance is refused at its first step, nothing recorded
        wrong = _materialise(instances["alpha"], profiles["beta"], data, "screened_candidates")
        assert not wrong.success and not wrong.get_asset_materialization_events()
        failure = "\n".join(
            data.error.to_string()
            for data in (e.event_specific_data for e in wrong.all_events)
            if getattr(data, "error", None) is not None
        )  # the resource's set-up failed
        assert "profile beta at" in failure and "refuses the Dagster instance" in failure
        assert "it serves profile alpha at" in failure

        for name, other in (("alpha", "beta"), ("beta", "alpha")):
            instance = instances[name]
            assert instance_profile(instance).startswith(f"{name} at ")
            node = trace(instance, "screened_candidates")
            assert node.run_tags["rewardbox/profile"] == name
            assert node.path.startswith(str(data / name / "objects"))
            (parent,) = node.inputs
            assert (
                parent.asset == "candidate_tasks" and parent.run_tags["rewardbox/profile"] == name
            )
            assert parent.path.startswith(str(data / name / "objects"))
            lines = "\n".join(render(node))
            assert (
                f"data/{name}/" in lines
                and f"data/{other}/" not in lines
                and f"profile={other}" not in lines
            )
            records = instance.fetch_materializations(
                dg.AssetKey("screened_candidates"), limit=10
            ).records
            assert len(records) == 1  # the refused run added nothing to alpha's history
    finally:
        for instance in instances.values():
            instance.dispose()


def test_an_ephemeral_instance_is_never_claimed_and_a_persistent_one_is(tmp_path):
    # in-process materialisations (tests, `dg.materialize`) run on an ephemeral instance that keeps no history
    # beyond its process: two profiles may share it; a persistent instance refuses the second profile
    from resources.instance_profile import ProfileInstanceError, claim_instance, instance_profile
    from rewardbox.config.profile import load_profile

    alpha = load_profile(_profile(tmp_path, "alpha", 2), data_dir=tmp_path / "data")
    beta = load_profile(_profile(tmp_path, "beta", 3), data_dir=tmp_path / "data")
    with dg.DagsterInstance.ephemeral() as instance:
        claim_instance(instance, alpha)
        claim_instance(instance, beta)
        assert instance_profile(instance) is None
    home = tmp_path / "home"
    home.mkdir()
    with dg.DagsterInstance.local_temp(str(home)) as instance:
        claim_instance(instance, alpha)
        with pytest.raises(ProfileInstanceError, match="serves profile alpha"):
            claim_instance(instance, beta)
