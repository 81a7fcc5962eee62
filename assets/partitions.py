"""Partition definitions used by assets (re-exported by ``pipelines.partitions``).

They live here because assets need them and nothing may import ``pipelines``.
Partition coarsely (docs/method.md, "Conventions"): one partition per checkpoint, never per task or trial.
"""

from __future__ import annotations

from dagster import DynamicPartitionsDefinition

CHECKPOINT_PARTITIONS_NAME = "checkpoints"

#: One partition per checkpoint directory name; the new-checkpoint sensor adds keys at run time
#: through a dynamic partitions request in the same tick that requests the evaluation run.
checkpoint_partitions = DynamicPartitionsDefinition(name=CHECKPOINT_PARTITIONS_NAME)
