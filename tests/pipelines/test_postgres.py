"""The Postgres instance (dagster.postgres.yaml) against a real local PostgreSQL.

``scripts/postgres.sh start`` installs Debian's postgresql when it is missing (as root), inits a
throw-away cluster and starts it; the test runs a small job on that instance, reads the run, its
tags and its materialisation back from Postgres, and asks the run queue's daemon logic which
queued runs it would launch under the tag concurrency limits. Skipped, with the script's reason,
only when PostgreSQL cannot be installed or started.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import warnings
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.remote_origin import (
    RegisteredCodeLocationOrigin,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus, make_new_run_id
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from rewardbox.config.profile import load_profile
from rewardbox.config.provenance import (
    TAG_CONFIG_HASH,
    TAG_GPU_CLUSTER,
    TAG_PROFILE,
    profile_config_hash,
    run_tags,
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "postgres.sh"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_env():
    """A running throw-away cluster; yields the REWARDBOX_PG_* variables; stops and removes it after."""
    data = tempfile.mkdtemp(prefix="rewardbox-pg-")  # under /tmp: reachable by the postgres user
    env = {
        **os.environ,
        "REWARDBOX_PG_DATA": data,
        "REWARDBOX_PG_PORT": str(_free_port()),
        "REWARDBOX_PG_PASSWORD": "test-only-password",
    }
    started = subprocess.run(
        ["bash", str(SCRIPT), "start"], env=env, capture_output=True, text=True, timeout=900
    )
    if started.returncode != 0:
        shutil.rmtree(data, ignore_errors=True)
        pytest.skip(
            f"PostgreSQL could not be installed or started: {started.stderr.strip()[-800:]}"
        )
    names = (
        "REWARDBOX_PG_HOST",
        "REWARDBOX_PG_PORT",
        "REWARDBOX_PG_DB",
        "REWARDBOX_PG_USER",
        "REWARDBOX_PG_PASSWORD",
    )
    pg = {name: env.get(name, "") for name in names} | {"REWARDBOX_PG_HOST": "127.0.0.1"}
    pg["REWARDBOX_PG_DB"] = pg["REWARDBOX_PG_DB"] or "rewardbox"
    pg["REWARDBOX_PG_USER"] = pg["REWARDBOX_PG_USER"] or "rewardbox"
    try:
        yield pg
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def postgres_instance(postgres_env, tmp_path, monkeypatch):
    import dagster_postgres  # noqa: F401 - the `postgres` extra; a missing install fails here, loudly

    for name, value in postgres_env.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.postgres.yaml", home / "dagster.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter(
            "ignore", UserWarning
        )  # dagster-postgres one patch release behind dagster
        with dg.DagsterInstance.from_config(str(home)) as instance:
            yield instance, home


def _small_job_defs(tmp_path: Path) -> dg.Definitions:
    from pipelines.definitions import all_assets
    from pipelines.jobs import build_jobs
    from resources.io import ParquetIOManager
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource
    from resources.vllm_server import VllmServerResource

    profile = load_profile("test")
    jobs = build_jobs(
        lambda samples_policy, trains: run_tags(
            profile, samples_policy=samples_policy, trains=trains
        )
    )
    resources = {
        "rewardbox": RewardboxResource(profile="test", data_dir=str(tmp_path)),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
        "parquet_io_manager": ParquetIOManager(base_dir=str(tmp_path / "assets")),
    }
    return dg.Definitions(assets=all_assets, jobs=[jobs["rescreen_job"]], resources=resources)


def test_a_job_runs_on_postgres_storage_and_is_read_back(postgres_instance, tmp_path):
    instance, home = postgres_instance
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
    assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"

    job = _small_job_defs(tmp_path).resolve_job_def("rescreen_job")
    result = job.execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey("candidate_tasks")]
    )
    assert result.success

    with dg.DagsterInstance.from_config(
        str(home)
    ) as reader:  # a second connection reads what was written
        run = reader.get_run_by_id(result.run_id)
        assert run.status == DagsterRunStatus.SUCCESS
        assert run.tags[TAG_PROFILE] == "test"
        assert run.tags[TAG_CONFIG_HASH] == profile_config_hash(load_profile("test"))
        event = reader.get_latest_materialization_event(dg.AssetKey("candidate_tasks"))
        assert event.run_id == result.run_id
        assert event.asset_materialization.tags["dagster/data_version"]


def test_the_run_queue_holds_runs_over_a_resource_limit(postgres_instance):
    """One GPU-cluster run in progress: a second waits, a run without the tag goes; an endpoint
    allows two runs at once."""
    instance, _ = postgres_instance
    test = load_profile("test")
    endpoint = test.model_copy(
        update={
            "policy": test.policy.model_copy(
                update={"kind": "endpoint", "base_url": "http://llm.internal:8000/v1", "model": "m"}
            )
        }
    )
    train = run_tags(test, trains=True)
    screen = run_tags(test, samples_policy=False)
    call = run_tags(endpoint)
    assert (
        TAG_GPU_CLUSTER in train
        and TAG_GPU_CLUSTER not in screen
        and call["rewardbox/policy_endpoint"]
    )

    location = RegisteredCodeLocationOrigin(location_name="pipelines.definitions")

    def add(name: str, tags: dict, status: DagsterRunStatus) -> str:
        origin = RemoteJobOrigin(
            repository_origin=RemoteRepositoryOrigin(location, "__repository__"), job_name=name
        )
        run = DagsterRun(
            job_name=name,
            run_id=make_new_run_id(),
            tags=tags,
            status=status,
            remote_job_origin=origin,
        )
        return instance.add_run(run).run_id

    add("main_job", train, DagsterRunStatus.STARTED)
    add("checkpoint_evaluation_job", call, DagsterRunStatus.STARTED)
    waiting_gpu = add("main_job", train, DagsterRunStatus.QUEUED)
    free = add("rescreen_job", screen, DagsterRunStatus.QUEUED)
    second_call = add("checkpoint_evaluation_job", call, DagsterRunStatus.QUEUED)
    third_call = add("checkpoint_evaluation_job", call, DagsterRunStatus.QUEUED)

    daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
    launched = {
        run.run_id
        for run in daemon._get_runs_to_dequeue(instance, instance.get_concurrency_config(), None)
    }
    assert free in launched and second_call in launched
    assert waiting_gpu not in launched and third_call not in launched
