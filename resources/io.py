"""Parquet IO manager: polars DataFrames stored as real Parquet files."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from rewardbox.episode.campaign import upgrade_rows


class ParquetIOManager(dg.ConfigurableIOManager):
    """Stores each asset's DataFrame at ``<base_dir>/<asset key path>.parquet``.

    Partitioned assets get one file per partition: ``<key>/<partition>.parquet``.
    """

    base_dir: str

    def _path(self, key: dg.AssetKey, partition: str | None) -> Path:
        path = Path(self.base_dir).joinpath(*key.path)
        if partition is not None:
            path = path / partition
        return path.with_suffix(".parquet")

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame) -> None:
        path = self._path(
            context.asset_key, context.partition_key if context.has_partition_key else None
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        obj.write_parquet(path)
        context.add_output_metadata({"path": dg.MetadataValue.path(str(path)), "rows": obj.height})

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        """The stored frame; trial rows written under old column names are renamed (``upgrade_rows``)."""
        partition = context.asset_partition_key if context.has_asset_partitions else None
        return upgrade_rows(pl.read_parquet(self._path(context.asset_key, partition)))
