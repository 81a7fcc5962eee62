"""Tasks: the schema, the loaders (ThinkingBox Python and YAML test files, our declarative YAML),
task sources and test lists, and the benchmark exclusion that keeps evaluation tasks out of training."""

from rewardbox.tasks.exclusion import exclude_overlap
from rewardbox.tasks.thinkingbox import load_dataset

__all__ = ["exclude_overlap", "load_dataset"]
