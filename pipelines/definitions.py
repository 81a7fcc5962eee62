"""The one ``Definitions`` object (``defs``): assets, checks, jobs, sensors, resources.

The profile is picked in one place: ``REWARDBOX_PROFILE`` (default ``demo``), read with
``REWARDBOX_DATA_DIR`` (moves every artifact) by ``rewardbox.config.profile``. Paths come from
the resource (``RewardboxResource.artifacts_dir``), the same one the assets use; secrets are
``dg.EnvVar`` values of the resource, never config values that get logged.
"""

from __future__ import annotations

import os

import dagster as dg

from pipelines.graph import asset_definitions
from pipelines.jobs import JOB_WORKLOADS, build_jobs
from pipelines.partitions import checkpoint_partitions
from resources.instance_profile import refuse_foreign_instance
from resources.io import ParquetIOManager
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from resources.vllm_server import VllmServerResource
from rewardbox.config.profile import data_dir_from_env, load_profile, profile_name_from_env
from rewardbox.config.provenance import benchmark_version, run_tags
from rewardbox.policy.checkpoint import validate_checkpoint_dir
from rewardbox.tasks.sources import load_candidates, source_dir
from sensors.checkpoints import build_checkpoint_sensor
from sensors.schedules import build_reprobe_schedule
from sensors.task_source import build_task_source_sensor, fingerprint_task_sources


def _secrets(policy_key_env: str) -> dict[str, dg.EnvVar]:
    """The resource's secret fields as ``dg.EnvVar``: the policy's key when its variable is set
    (an unset one keeps today's placeholder key, e.g. a local server without auth)."""
    return {"policy_api_key": dg.EnvVar(policy_key_env)} if policy_key_env in os.environ else {}


STEP_EXECUTOR = {
    "max_concurrent": 1,
    "start_method": {"forkserver": {"preload_modules": ["pipelines.definitions"]}},
}
"""The jobs' executor config: steps one at a time, each forked from a server process that imported
``pipelines.definitions`` (torch, transformers, scipy, Dagster) once. Named explicitly: Dagster's default
preload is the job's module only when its code pointer names one, which ``dagster job execute -m`` and
``dagster asset materialize -m`` runs do not (their forkserver preloaded Dagster alone)."""

_STARTUP_PROFILE = load_profile(
    profile_name_from_env(), data_dir=data_dir_from_env()
)  # read once at start-up
# one instance per profile: never serve this profile's graph over another profile's history (docs/audit.md)
refuse_foreign_instance(_STARTUP_PROFILE, os.environ.get("DAGSTER_HOME"))
REWARDBOX = RewardboxResource(
    profile=profile_name_from_env(),
    data_dir=data_dir_from_env(),
    **_secrets(_STARTUP_PROFILE.policy.api_key_env),
)
_ARTIFACTS = REWARDBOX.artifacts_dir()


def _benchmark_version() -> str:
    """Version of the benchmark task set: hash of its uids and content hashes.

    Raises TaskSetLoadError when the benchmark does not load (the sensor then launches nothing).
    """
    return benchmark_version(REWARDBOX.load())


def _tick_tags(job_name: str):
    """The run tags a sensor or schedule puts on a run of ``job_name``, computed at tick time."""
    samples_policy, trains = JOB_WORKLOADS[job_name]
    return lambda: run_tags(
        REWARDBOX.load(),
        task_set_version=_benchmark_version(),
        samples_policy=samples_policy,
        trains=trains,
    )


def _candidate_fingerprint() -> str:
    return fingerprint_task_sources([source_dir(s) for s in REWARDBOX.load().tasks.candidates])


# Jobs carry the start-up profile's tags (visible while queued, for the run queue's limits); the
# resource refreshes them and adds the task-set version when a run starts (resources/rewardbox.py).
JOBS = build_jobs(
    lambda samples_policy, trains: run_tags(
        _STARTUP_PROFILE, samples_policy=samples_policy, trains=trains
    )
)

# the warm start's assets only when the profile enables it (pipelines.graph, docs/warm_start.md)
all_assets, all_checks = asset_definitions(_STARTUP_PROFILE.rft.enabled)

defs = dg.Definitions(
    assets=all_assets,
    asset_checks=all_checks,
    jobs=list(JOBS.values()),
    sensors=[
        build_checkpoint_sensor(
            partitions_def=checkpoint_partitions,
            watch_dir_fn=REWARDBOX.incoming_checkpoint,
            task_set_version_fn=_benchmark_version,
            validate_fn=validate_checkpoint_dir,
            job=JOBS["checkpoint_evaluation_job"],
            run_tags_fn=_tick_tags("checkpoint_evaluation_job"),
        ),
        build_task_source_sensor(
            source_fingerprint_fn=_candidate_fingerprint,
            job=JOBS["rescreen_job"],
            task_set_check_fn=lambda: load_candidates(REWARDBOX.load().tasks),
            run_tags_fn=_tick_tags("rescreen_job"),
        ),
    ],
    schedules=[build_reprobe_schedule(JOBS["reprobe_job"], run_tags_fn=_tick_tags("reprobe_job"))],
    resources={
        "rewardbox": REWARDBOX,
        # embedded Ray when the profile says executor.kind: ray; REWARDBOX_RAY_ADDRESS points at a real cluster;
        # REWARDBOX_RAY_JOB_ADDRESS is its job server (grpo.backend: verl), else a local head is started
        "ray_cluster": RayClusterResource(
            address=os.environ.get("REWARDBOX_RAY_ADDRESS"),
            job_address=os.environ.get("REWARDBOX_RAY_JOB_ADDRESS"),
        ),
        # serving.kind: vllm in the profile serves each evaluated checkpoint with vllm serve (skipped on CPU)
        "vllm_server": VllmServerResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=str(_ARTIFACTS / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(_ARTIFACTS / "objects")),
    },
    # one step at a time; each step process is forked from a server that imported this module once
    # (docs/performance.md, "Step start-up"), not a fresh interpreter importing torch, scipy and
    # Dagster again (20-27 s a step on 2 loaded cores)
    executor=dg.multiprocess_executor.configured(STEP_EXECUTOR),
)
