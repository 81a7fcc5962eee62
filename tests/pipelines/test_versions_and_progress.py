"""Dagster staleness follows content (code and data versions), and long stages log progress lines.

Real materialisations of ``candidate_tasks -> screened_candidates`` with the small ``test`` profile
(screening runs the golden and null policies through the real loop and grader; no model).
"""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.definitions.assets.graph.asset_graph import AssetGraph
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.loader import LoadingContextForTest

from assets import tasks as task_assets
from rewardbox.config.profile import PROFILE_DIR

ASSETS = [task_assets.candidate_tasks, task_assets.screened_candidates]
SCREENED = dg.AssetKey("screened_candidates")


def _resources(tmp_path: Path, profile: str = "test") -> dict:
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    return {
        "rewardbox": RewardboxResource(profile=profile, data_dir=str(tmp_path)),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
    }


def _materialize(*args, **kwargs) -> dg.ExecuteInProcessResult:
    """``dg.materialize`` inside a live instance context: building the job reads the current
    instance's definitions-state storage, which an earlier test may have left pointing at a closed
    instance."""
    with dg.instance_for_test():
        return dg.materialize(*args, **kwargs)


def _status(instance: dg.DagsterInstance) -> StaleStatus:
    resolver = CachingStaleStatusResolver(
        instance, AssetGraph.from_assets(ASSETS), LoadingContextForTest(instance)
    )
    return resolver.get_status(SCREENED)


def _latest_data_version(instance: dg.DagsterInstance, name: str) -> str:
    event = instance.get_latest_materialization_event(dg.AssetKey(name))
    return event.asset_materialization.tags["dagster/data_version"]


@pytest.fixture(scope="module")
def screened(tmp_path_factory):
    """One instance on which candidates and screened candidates were materialised once."""
    tmp_path = tmp_path_factory.mktemp("versions")
    instance = dg.DagsterInstance.ephemeral()
    result = _materialize(ASSETS, resources=_resources(tmp_path), instance=instance)
    assert result.success
    return tmp_path, instance, result


def test_every_asset_declares_a_code_version():
    from pipelines.definitions import defs

    with dg.instance_for_test():  # a live instance context for loading the Definitions
        graph = defs.get_repository_def().asset_graph
    missing = [
        k.to_user_string() for k in graph.get_all_asset_keys() if not graph.get(k).code_version
    ]
    assert missing == []


def test_identical_rematerialisation_leaves_downstream_fresh_and_a_change_makes_it_stale(screened):
    tmp_path, instance, _ = screened
    assert _status(instance) == StaleStatus.FRESH
    before = _latest_data_version(instance, "candidate_tasks")

    again = _materialize(
        ASSETS,
        selection=[task_assets.candidate_tasks],
        resources=_resources(tmp_path),
        instance=instance,
    )
    assert again.success
    assert (
        _latest_data_version(instance, "candidate_tasks") == before
    )  # same content, same data version
    assert _status(instance) == StaleStatus.FRESH

    # one candidate fewer (a different task source): new data upstream, the screen is stale
    profile = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    profile["tasks"]["candidates"][0]["limit"] -= 1
    changed = tmp_path / "changed" / "test.yaml"
    changed.parent.mkdir()
    changed.write_text(yaml.safe_dump(profile))
    edited = _materialize(
        ASSETS,
        selection=[task_assets.candidate_tasks],
        resources=_resources(tmp_path, str(changed)),
        instance=instance,
    )
    assert edited.success
    assert _latest_data_version(instance, "candidate_tasks") != before
    assert _status(instance) == StaleStatus.STALE


def test_screening_logs_progress_lines_with_done_and_total(screened):
    _, instance, result = screened
    messages = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message]
    lines = [m for m in messages if m.startswith("screen (")]
    assert "screen (golden replay): 10 episodes to run" in lines
    final = [
        m
        for m in lines
        if re.match(
            r"screen \(golden replay\): 10/10 episodes \(100%\), pass rate 1\.000 "
            r"\(10/10\), system errors 0, \d+s elapsed$",
            m,
        )
    ]
    assert final, lines
    null = [m for m in lines if m.startswith("screen (null run): 10/10 episodes (100%)")]
    assert null, lines


def test_screened_candidates_carry_config_hash_and_content_hash(screened):
    _, instance, _ = screened
    metadata = instance.get_latest_materialization_event(SCREENED).asset_materialization.metadata
    assert re.fullmatch(r"[0-9a-f]{16}", metadata["config_hash"].value)
    assert metadata["content_hash"].value == _latest_data_version(instance, "screened_candidates")


def test_audit_traces_the_exact_upstream_materialisation_read(screened):
    from pipelines.audit import render, trace

    _, instance, result = screened
    [first_candidates] = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey("candidate_tasks")
    ]
    node = trace(instance, "screened_candidates")
    [parent] = node.inputs
    assert parent.asset == "candidate_tasks" and parent.run_id == result.run_id
    # the version that was read, even after later re-materialisations of candidate_tasks
    assert parent.data_version == first_candidates.materialization.tags["dagster/data_version"]
    assert (
        node.config_hash and node.run_tags["rewardbox/profile"] == "test"
    )  # tagged by the resource
    text = "\n".join(render(node))
    assert f"candidate_tasks  data_version={parent.data_version}" in text
