"""Code versions, data versions and config hashes for the assets: Dagster staleness and audit.

- ``code_version`` (on each ``@asset``): :func:`code_version` hashes the asset's module and the
  engine packages its result depends on (syntax trees without docstrings, see
  ``rewardbox.config.provenance.source_version``). A comment or docstring edit leaves it alone.
- ``data_version`` (on each materialisation): a hash of the output's *content*
  (``rewardbox.tasks.schema.task_set_version``, :func:`frame_version`, :func:`files_version`). An identical
  re-materialisation reports the same data version, so Dagster does not flag the assets below it
  as having new upstream data.
- ``config_hash`` (metadata): the profile sections that produced the output.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import dagster as dg
import polars as pl

from rewardbox.config.provenance import source_version

#: The engine that runs and grades episodes; every stage that runs episodes depends on all of it.
EPISODE_ENGINE = (
    "rewardbox.episode",
    "rewardbox.sandbox",
    "rewardbox.grading",
    "rewardbox.domains",
    "rewardbox.policy",
    "rewardbox.evaluation",
    "rewardbox.config",
    "rewardbox.runtime",
)


def code_version(asset_module: str, *engine: str) -> str:
    """The code version of the assets in ``asset_module`` whose logic lives in ``engine`` packages.

    Args:
        asset_module: the asset's own module (``__name__``).
        engine: the ``rewardbox`` packages or modules the asset's result depends on.

    Returns:
        12 hex characters (see ``rewardbox.config.provenance.source_version``).
    """
    return source_version(asset_module, *engine)


def frame_version(frame: pl.DataFrame) -> str:
    """Data version of a DataFrame: SHA-256 of its uncompressed Arrow IPC stream (schema + values)."""
    buffer = io.BytesIO()
    frame.write_ipc_stream(buffer, compression="uncompressed")
    return hashlib.sha256(buffer.getvalue()).hexdigest()[:16]


def files_version(path: str | Path) -> str:
    """Data version of a file or a directory tree: relative names and bytes of every file.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"cannot version {root}: it does not exist")
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    for file in files:
        digest.update(
            file.relative_to(root if root.is_dir() else root.parent).as_posix().encode() + b"\0"
        )
        with file.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:16]


def record_versions(
    context: dg.AssetExecutionContext, data_version: str, config_hash: str | None = None
) -> None:
    """Report the output's data version to Dagster and put it (and the config hash) in its metadata.

    Args:
        context: the asset's execution context (single-asset ``@asset``).
        data_version: from ``task_set_version``, :func:`frame_version` or :func:`files_version`.
        config_hash: ``profile.section_hash(...)`` of the sections that produced the output; give it
            where the asset's own metadata does not already carry ``config_hash``.
    """
    context.set_data_version(context.asset_key, dg.DataVersion(data_version))
    metadata: dict[str, str] = {"content_hash": data_version}
    if config_hash is not None:
        metadata["config_hash"] = config_hash
    context.add_output_metadata(metadata)
