"""Dagster wiring: the one Definitions object (``pipelines.definitions.defs``), jobs, partitions."""
