"""Partitions of the project (defined in ``assets.partitions``; nothing imports ``pipelines``)."""

from assets.partitions import CHECKPOINT_PARTITIONS_NAME, checkpoint_partitions

__all__ = ["CHECKPOINT_PARTITIONS_NAME", "checkpoint_partitions"]
