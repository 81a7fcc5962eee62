"""Dagster resources: thin adapters around the engine's config and storage."""

from resources.io import ParquetIOManager
from resources.ray_cluster import RayClusterResource
from resources.rewardbox import RewardboxResource

__all__ = ["ParquetIOManager", "RayClusterResource", "RewardboxResource"]
