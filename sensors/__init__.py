"""Dagster sensors and schedules, built by small factories that ``pipelines/definitions.py`` wires.

Each module's docstring says what its cursor holds and why its run key is what it is.
"""

from sensors.checkpoints import build_checkpoint_sensor, checkpoint_run_key, find_checkpoint_dirs
from sensors.schedules import build_reprobe_schedule, reprobe_run_key
from sensors.task_source import (
    build_task_source_sensor,
    fingerprint_task_source,
    task_source_run_key,
)

__all__ = [
    "build_checkpoint_sensor",
    "build_reprobe_schedule",
    "build_task_source_sensor",
    "checkpoint_run_key",
    "find_checkpoint_dirs",
    "fingerprint_task_source",
    "reprobe_run_key",
    "task_source_run_key",
]
