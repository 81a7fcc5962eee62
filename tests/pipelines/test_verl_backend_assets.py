"""``grpo.backend: verl`` in the training assets without a cluster: the dry run, and the merge's guard."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest
import yaml

from rewardbox.config.profile import load_profile
from rewardbox.training.verl import job as verl_job
from tests.resources.verl_job_support import (
    grpo_assets,
    minimal_rows,
    no_agent_loop,
    resources,
    verl_profile,
)


@pytest.fixture(autouse=True)
def _hooks(monkeypatch):
    monkeypatch.setattr(verl_job, "pool_rows", minimal_rows)
    monkeypatch.setattr(verl_job, "agent_loop_overrides", no_agent_loop)


def _dry_run_profile(tmp_path, verl_python: str) -> Path:
    path = verl_profile(tmp_path, mode=None, preflight=True)
    data = yaml.safe_load(path.read_text())
    data["verl"] |= {"dry_run": True, "merge_python": verl_python, "python": "python3"}
    path.write_text(yaml.safe_dump(data))
    return path


def _grpo_metadata(tmp_path, profile):
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:  # a storage of its own
        result = dg.materialize(
            grpo_assets(profile),
            resources=resources(profile, tmp_path, job_address=None),
            instance=instance,
        )
    [event] = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey("grpo_checkpoint")
    ]
    return result, event.materialization.metadata


def test_dry_run_writes_the_launch_into_metadata_and_submits_nothing(tmp_path):
    import ray

    profile = _dry_run_profile(tmp_path, str(tmp_path / "no-verl-here" / "python"))
    result, metadata = _grpo_metadata(tmp_path, profile)
    assert metadata["dry_run"].value is True and metadata["trained"].value is False
    assert (
        metadata["validated"].value is False and "no verl environment" in metadata["problem"].value
    )
    assert "python3 -m verl.trainer.main_ppo" in metadata["command"].value
    assert (
        "rewardbox preflight" in metadata["command"].value
    )  # the job's entrypoint, preflight included
    assert "save_freq: 2" in metadata["overrides"].value and metadata["rows"].value == 2
    out = Path(result.output_for_node("grpo_checkpoint"))
    assert (out / "launch.sh").read_text().count("verl.trainer.main_ppo") == 1
    assert not ray.is_initialized()  # no cluster for a dry run


def _verl_env() -> str | None:
    found = os.environ.get("REWARDBOX_VERL_PYTHON") or str(
        Path(__file__).resolve().parents[2] / ".venv-verl/bin/python"
    )
    return found if Path(found).exists() else None


@pytest.mark.skipif(
    _verl_env() is None,
    reason="verl's environment is absent (make verl-env or REWARDBOX_VERL_PYTHON)",
)
def test_dry_run_is_validated_by_verls_schema_when_its_environment_exists(tmp_path):
    _, metadata = _grpo_metadata(tmp_path, _dry_run_profile(tmp_path, _verl_env()))
    assert metadata["validated"].value is True, metadata["problem"].value
    assert Path(metadata["resolved_config"].value).read_text().count("save_freq: 2") == 1


def _merge(tmp_path, profile: Path, grpo_checkpoint: str):
    """``merged_checkpoint`` materialised alone on ``profile``, its inputs stood in for."""
    from assets.training import merged_checkpoint

    @dg.asset(name="base_checkpoint")
    def base_checkpoint():
        return "/models/base"

    @dg.asset(name="grpo_checkpoint")
    def trained():
        return grpo_checkpoint

    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        return dg.materialize(
            [base_checkpoint, trained, merged_checkpoint],
            instance=instance,
            resources=resources(profile, tmp_path, job_address=None),
            raise_on_error=False,
        )


def _failure(result) -> str:
    [event] = [
        e
        for e in result.all_events
        if e.event_type_value == "STEP_FAILURE" and e.step_key == "merged_checkpoint"
    ]
    return str(event.event_specific_data.error)


def test_merge_refuses_a_dry_run_with_a_clear_message(tmp_path):
    result = _merge(
        tmp_path, _dry_run_profile(tmp_path, "/nowhere/python"), str(tmp_path / "dry_run")
    )
    assert not result.success and "verl.dry_run is true" in _failure(result)
    assert "Failure" in _failure(
        result
    )  # a dg.Failure: the asset turned the engine's MergeError into one


def test_merge_of_a_missing_verl_environment_is_a_dagster_failure(tmp_path):
    path = _dry_run_profile(tmp_path, str(tmp_path / "no-python"))
    data = yaml.safe_load(path.read_text())
    data["verl"]["dry_run"] = False
    path.write_text(yaml.safe_dump(data))
    actor = tmp_path / "global_step_2" / "actor"
    actor.mkdir(parents=True)
    result = _merge(tmp_path, path, str(actor))
    assert (
        not result.success and "make verl-env" in _failure(result) and "Failure" in _failure(result)
    )


def test_local_stays_the_default_backend():
    assert (
        load_profile("test").grpo.backend == "local"
        and load_profile("demo").grpo.backend == "local"
    )
