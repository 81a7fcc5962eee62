"""A small code location for the browser test: the real selection, evaluation and report assets on the ``test``
profile with scripted policies (no model weights), stand-ins for the two checkpoints.

``REWARDBOX_UI_DATA`` names the data directory. The browser test materialises these assets into a temporary
Dagster instance, then serves this module with ``dagster-webserver -f``.
"""

from __future__ import annotations

import os

import dagster as dg

from assets import evaluation, report, selection, tasks
from resources.io import ParquetIOManager
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from resources.vllm_server import VllmServerResource

UI_ASSETS = {
    "candidate_tasks",
    "benchmark_tasks",
    "screened_candidates",
    "probe_results",
    "reference_probe_results",
    "task_difficulty",
    "base_evaluation_results",
    "evaluation_results",
    "reliability_report",
}


@dg.asset(name="base_checkpoint")
def base_checkpoint() -> str:
    """Scripted policies need no weights."""
    return ""


@dg.asset(name="merged_checkpoint")
def merged_checkpoint() -> str:
    """Scripted policies need no weights."""
    return ""


def ui_assets() -> list:
    real = [
        a
        for a in dg.load_assets_from_modules([tasks, selection, evaluation, report])
        if any(k.to_user_string() in UI_ASSETS for k in a.keys)
    ]
    return [*real, base_checkpoint, merged_checkpoint]


def ui_resources(data_dir: str) -> dict:
    return {
        "rewardbox": RewardboxResource(profile="test", data_dir=data_dir),
        "ray_cluster": RayClusterResource(),
        "vllm_server": VllmServerResource(),
        "parquet_io_manager": ParquetIOManager(base_dir=os.path.join(data_dir, "assets")),
        "io_manager": dg.FilesystemIOManager(base_dir=os.path.join(data_dir, "objects")),
    }


defs = dg.Definitions(
    assets=ui_assets(), resources=ui_resources(os.environ.get("REWARDBOX_UI_DATA", "data"))
)
