"""The one ``Definitions`` object (``defs``): assets, checks, jobs, sensors, resources.

The profile is picked in one place: the ``REWARDBOX_PROFILE`` environment
variable (default ``demo``); ``REWARDBOX_DATA_DIR`` moves every artifact.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import dagster as dg

from assets import evaluation, model, report, selection, tasks, training
from pipelines.jobs import JOB_WORKLOADS, build_jobs
from pipelines.partitions import checkpoint_partitions
from resources.io import ParquetIOManager
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from rewardbox.config.profile import load_profile
from rewardbox.config.provenance import benchmark_version, run_tags
from rewardbox.tasks.sources import load_candidates, resolve_dataset
from sensors.checkpoints import build_checkpoint_sensor
from sensors.schedules import build_reprobe_schedule
from sensors.task_source import build_task_source_sensor, fingerprint_task_source

PROFILE = os.environ.get("REWARDBOX_PROFILE", "demo")


def _profile():
    return load_profile(PROFILE)


def _incoming_dir() -> Path:
    return _ARTIFACTS / "checkpoints" / "incoming"


def _benchmark_version() -> str:
    """Version of the benchmark task set: hash of its uids and content hashes.

    Raises TaskSetLoadError when the benchmark does not load (the sensor then launches nothing).
    """
    return benchmark_version(_profile())


def _tick_tags(job_name: str):
    """The run tags a sensor or schedule puts on a run of ``job_name``, computed at tick time."""
    samples_policy, trains = JOB_WORKLOADS[job_name]
    return lambda: run_tags(_profile(), task_set_version=_benchmark_version(), samples_policy=samples_policy,
                            trains=trains)


def _validate_checkpoint(path: Path) -> None:
    from transformers import AutoConfig

    AutoConfig.from_pretrained(path)  # raises for a malformed checkpoint directory
    if not any(path.glob("*.safetensors")):
        raise ValueError(f"{path} has no *.safetensors weights")


def _candidate_fingerprint() -> str:
    parts = [fingerprint_task_source(resolve_dataset(s.dataset)) for s in _profile().tasks.candidates]
    return hashlib.sha256("".join(parts).encode()).hexdigest()[:16]


_STARTUP_PROFILE = _profile()  # read once at start-up
_ARTIFACTS = _STARTUP_PROFILE.data_path / _STARTUP_PROFILE.name

# Jobs carry the start-up profile's tags (visible while queued, for the run queue's limits); the
# resource refreshes them and adds the task-set version when a run starts (resources/rewardbox.py).
JOBS = build_jobs(lambda samples_policy, trains: run_tags(_STARTUP_PROFILE, samples_policy=samples_policy,
                                                          trains=trains))

all_assets = dg.load_assets_from_modules([tasks, model, selection, training, evaluation, report])
all_checks = dg.load_asset_checks_from_modules([tasks, model, selection, training, evaluation, report])

defs = dg.Definitions(
    assets=all_assets,
    asset_checks=all_checks,
    jobs=list(JOBS.values()),
    sensors=[
        build_checkpoint_sensor(partitions_def=checkpoint_partitions, watch_dir_fn=_incoming_dir,
                                task_set_version_fn=_benchmark_version, validate_fn=_validate_checkpoint,
                                job=JOBS["checkpoint_evaluation_job"], run_tags_fn=_tick_tags("checkpoint_evaluation_job")),
        build_task_source_sensor(source_fingerprint_fn=_candidate_fingerprint, job=JOBS["rescreen_job"],
                                 task_set_check_fn=lambda: load_candidates(_profile().tasks),
                                 run_tags_fn=_tick_tags("rescreen_job")),
    ],
    schedules=[build_reprobe_schedule(JOBS["reprobe_job"], run_tags_fn=_tick_tags("reprobe_job"))],
    resources={
        "rewardbox": RewardboxResource(profile=PROFILE, data_dir=os.environ.get("REWARDBOX_DATA_DIR")),
        # embedded Ray when the profile says executor.kind: ray; REWARDBOX_RAY_ADDRESS points at a real cluster;
        # REWARDBOX_RAY_JOB_ADDRESS is its job server (grpo.backend: verl), else a local head is started
        "ray_cluster": RayClusterResource(address=os.environ.get("REWARDBOX_RAY_ADDRESS"),
                                          job_address=os.environ.get("REWARDBOX_RAY_JOB_ADDRESS")),
        "parquet_io_manager": ParquetIOManager(base_dir=str(_ARTIFACTS / "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=str(_ARTIFACTS / "objects")),
    },
    executor=dg.multiprocess_executor.configured({"max_concurrent": 1}),
)
