"""``probe.family_screening`` through the Dagster assets: ``probe_results`` probes some candidates, says so
in its metadata, and ``task_difficulty`` and ``training_pool`` run on the rows it has (one per probed task).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from rewardbox.config.profile import PROFILE_DIR
from tests.fixtures.dagster_resources import test_resources

pytestmark = pytest.mark.timeout(600)
WANTED = {
    "candidate_tasks",
    "screened_candidates",
    "probe_results",
    "reference_probe_results",
    "task_difficulty",
    "training_pool",
}


@dg.asset(name="base_checkpoint", group_name="model")
def no_checkpoint() -> str:
    """The scripted policy needs no checkpoint."""
    return ""


def _materialise(profile: dict, tmp_path: Path):
    from assets import selection, tasks

    path = tmp_path / "screening.yaml"
    path.write_text(yaml.safe_dump(profile))
    assets = [
        a
        for a in dg.load_assets_from_modules([tasks, selection])
        if {k.to_user_string() for k in a.keys} <= WANTED
    ]
    return dg.materialize(
        [*assets, no_checkpoint],
        resources=test_resources(str(path), tmp_path / "data"),
        instance=dg.DagsterInstance.ephemeral(),
    )


def _metadata(result, key: str) -> dict:
    (event,) = [
        e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == key
    ]
    return {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}


def test_family_screening_runs_in_the_probe_asset_and_the_assets_below_see_only_probed_tasks(
    tmp_path,
):
    profile = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    # two families of three candidates: cancel_explicit and cancel_lookup
    profile["tasks"]["candidates"] = [
        {"dataset": "embedded:retail", "test_list": "testlists/candidates.yaml", "limit": 6}
    ]
    profile["probe"] = {"trials": 4, "family_screening": {"first": 1, "more": 1}}
    result = _materialise(profile, tmp_path)
    assert result.success
    probe = _metadata(result, "probe_results")
    screening = probe["family_screening"]
    assert screening["families"] == 2 and screening["tasks_probed_round_1"] == 2
    # the scripted mix's outcomes are a function of (uid, seed): here both families come out mixed
    assert 1 <= screening["tasks_probed_round_2"] == screening["families_mixed"] <= 2
    probed = screening["tasks_probed_round_1"] + screening["tasks_probed_round_2"]
    assert screening["candidates"] == 6 and screening["candidates_unprobed"] == 6 - probed >= 2
    assert probe["tasks"] == probed and probe["episodes"] == 4 * probed
    rows = result.output_for_node("probe_results")
    assert rows["uid"].n_unique() == probed and rows.height == 4 * probed
    difficulty = result.output_for_node("task_difficulty")
    assert sorted(difficulty["uid"]) == sorted(set(rows["uid"]))
    pool = result.output_for_node("training_pool")
    assert {t.uid for t in pool} <= set(rows["uid"])
