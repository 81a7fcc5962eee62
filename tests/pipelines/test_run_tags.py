"""Every run the jobs, sensors and schedule start carries profile, config hash, code version and
task-set version tags; read back from a real instance after a ``dagster job execute`` run."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.definitions.partitions.context import partition_loading_context

from rewardbox.config.profile import load_profile
from rewardbox.config.provenance import (
    TAG_CODE_VERSION,
    TAG_CONFIG_HASH,
    TAG_GPU_CLUSTER,
    TAG_PROFILE,
    TAG_TASK_SET_VERSION,
    benchmark_version,
    profile_config_hash,
    project_code_version,
    run_tags,
)

ROOT = Path(__file__).resolve().parents[2]
PROVENANCE = {TAG_PROFILE, TAG_CONFIG_HASH, TAG_CODE_VERSION, TAG_TASK_SET_VERSION}


@pytest.mark.slow  # not the model: a CLI run starts a process per step (about 40 s of CPU)
def test_cli_job_run_is_tagged_and_logs_progress(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "REWARDBOX_PROFILE": "test",
        "REWARDBOX_DATA_DIR": str(tmp_path / "data"),
        "PYTHONPATH": str(ROOT),
    }
    dagster = Path(sys.executable).parent / "dagster"
    done = subprocess.run(
        [str(dagster), "job", "execute", "-m", "pipelines.definitions", "-j", "rescreen_job"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    with dg.DagsterInstance.from_config(str(home)) as instance:
        [run] = instance.get_runs()
        profile = load_profile("test")
        assert run.tags[TAG_PROFILE] == "test"
        assert run.tags[TAG_CONFIG_HASH] == profile_config_hash(profile)
        assert run.tags[TAG_CODE_VERSION] == project_code_version()
        assert run.tags[TAG_TASK_SET_VERSION] == benchmark_version(profile)
        assert TAG_GPU_CLUSTER not in run.tags  # re-screening runs scripted policies only
        messages = [e.user_message for e in instance.all_logs(run.run_id) if e.user_message]
        screened = instance.get_latest_materialization_event(dg.AssetKey("screened_candidates"))
    assert any(
        re.match(r"screen \(golden replay\): 10/10 episodes \(100%\)", m) for m in messages
    ), messages
    assert any(re.match(r"screen \(null run\): 5/10 episodes \(50%\)", m) for m in messages), (
        messages
    )
    assert screened.asset_materialization.metadata["config_hash"].value


def test_jobs_sensors_and_schedule_put_the_tags_on_their_runs(tmp_path):
    from pipelines.definitions import defs

    with (
        dg.instance_for_test() as instance
    ):  # entering it also gives Definitions a live state storage
        repo = defs.get_repository_def()
        for job in repo.get_all_jobs():
            if not job.name.startswith("__"):
                assert {TAG_PROFILE, TAG_CONFIG_HASH, TAG_CODE_VERSION} <= set(job.tags), job.name

        # Evaluation contexts are entered with ``with``: one left open enters an instance of its own
        # and closes it when garbage-collected, which puts an earlier test's closed instance back as
        # the current definitions-state storage in whatever test runs then.
        sensor = repo.get_sensor_def("task_source_sensor")
        with dg.build_sensor_context(instance=instance, repository_def=repo) as context:
            [request] = sensor.evaluate_tick(context).run_requests
        assert set(request.tags) >= PROVENANCE

        schedule = repo.get_schedule_def("reprobe_schedule")
        with dg.build_schedule_context(
            instance=instance,
            repository_def=repo,
            scheduled_execution_time=datetime(2026, 1, 5, 3, tzinfo=UTC),
        ) as context:
            [request] = schedule.evaluate_tick(context).run_requests
        assert set(request.tags) >= PROVENANCE

        checkpoint = tmp_path / "incoming" / "ckpt-1"
        checkpoint.mkdir(parents=True)
        (checkpoint / "config.json").write_text("{}")
        from pipelines.partitions import checkpoint_partitions
        from sensors.checkpoints import build_checkpoint_sensor

        tagged = build_checkpoint_sensor(
            partitions_def=checkpoint_partitions,
            watch_dir_fn=lambda: checkpoint.parent,
            task_set_version_fn=lambda: "v1",
            validate_fn=lambda _: None,
            job_name="checkpoint_evaluation_job",
            run_tags_fn=lambda: {TAG_PROFILE: "test", TAG_TASK_SET_VERSION: "stale"},
        )
        instance.add_dynamic_partitions(
            checkpoint_partitions.name, ["ckpt-1"]
        )  # as the daemon would
        with (
            partition_loading_context(dynamic_partitions_store=instance),
            dg.build_sensor_context(instance=instance, repository_def=repo) as context,
        ):
            tick = tagged.evaluate_tick(context)
        [request] = tick.run_requests
        # the sensor's own task-set version wins over a provenance tag computed elsewhere
        assert request.tags[TAG_PROFILE] == "test" and request.tags[TAG_TASK_SET_VERSION] == "v1"


def test_a_run_is_retagged_with_the_profile_it_actually_ran_with(tmp_path):
    """The jobs carry the start-up profile's tags; the resource corrects them when the run starts."""
    from pipelines.definitions import all_assets
    from pipelines.jobs import build_jobs
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    startup = load_profile("demo")  # the profile the code location was loaded with
    jobs = build_jobs(
        lambda samples_policy, trains: run_tags(
            startup, samples_policy=samples_policy, trains=trains
        )
    )
    resources = {
        "rewardbox": RewardboxResource(profile="test", data_dir=str(tmp_path)),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
        "parquet_io_manager": ParquetIOManager(base_dir=str(tmp_path / "assets")),
    }
    defs = dg.Definitions(assets=all_assets, jobs=[jobs["rescreen_job"]], resources=resources)
    with dg.instance_for_test() as instance:
        job = defs.resolve_job_def("rescreen_job")
        assert job.tags[TAG_PROFILE] == "demo"
        result = job.execute_in_process(
            instance=instance, asset_selection=[dg.AssetKey("candidate_tasks")]
        )
        assert result.success
        tags = instance.get_run_by_id(result.run_id).tags
    profile = load_profile("test")
    assert tags[TAG_PROFILE] == "test"
    assert tags[TAG_CONFIG_HASH] == profile_config_hash(profile)
    assert tags[TAG_TASK_SET_VERSION] == benchmark_version(profile)
    assert tags[TAG_CODE_VERSION] == project_code_version()
