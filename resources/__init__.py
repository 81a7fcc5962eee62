"""Dagster resources: thin adapters around the engine's config and storage."""

from resources.io import ParquetIOManager
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource
from resources.vllm_server import VllmServerResource

__all__ = ["ParquetIOManager", "RayClusterResource", "RewardboxResource", "VllmServerResource"]
