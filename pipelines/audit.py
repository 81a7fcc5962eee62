"""Which data, config and code produced an asset: its materialisation and every one upstream of it.

``python -m pipelines.audit merged_checkpoint`` (with ``DAGSTER_HOME`` set, as for ``dagster``)
prints, for the latest materialisation of the asset and, recursively, for the exact upstream
materialisations it read: the run id, the run's tags (profile, config hash, code version, git
commit, task-set version), the asset's code version, data version and config hash, and its path.
The upstream materialisation is the one Dagster recorded as read (the ``dagster/input_event_pointer``
tag), not merely the latest one. The first line names the profile the instance serves (one
instance per profile: ``resources.instance_profile``). See ``docs/audit.md``.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg

from resources.instance_profile import instance_profile

INPUT_POINTER = "dagster/input_event_pointer/"


@dataclass
class Provenance:
    """One materialisation and what it was made from.

    Attributes:
        asset: the asset key as a string.
        partition: the partition key, if any.
        run_id: the run that materialised it.
        materialised_at: UTC time of the materialisation.
        code_version, data_version: Dagster's versions recorded on the materialisation.
        config_hash: from the asset's metadata (``None`` when it has none).
        location: what the asset made on disk (a checkpoint directory, the report file), from its
            ``location`` metadata; ``None`` for assets whose value is their output.
        path: where the IO manager stored the output (its ``path`` metadata: a pickle holding the
            location, or the Parquet file).
        run_tags: the run's ``rewardbox/*`` tags.
        inputs: the upstream materialisations it read, in the same form.
    """

    asset: str
    partition: str | None
    run_id: str
    materialised_at: datetime
    code_version: str | None
    data_version: str | None
    config_hash: str | None
    location: str | None
    path: str | None
    run_tags: dict[str, str]
    inputs: list[Provenance] = field(default_factory=list)


def _materialisation(
    instance: dg.DagsterInstance, key: dg.AssetKey, storage_id: int | None, partition: str | None
) -> dg.EventLogRecord | None:
    filters = dg.AssetRecordsFilter(
        asset_key=key,
        storage_ids=[storage_id] if storage_id else None,
        asset_partitions=[partition] if partition else None,
    )
    records = instance.fetch_materializations(filters, limit=1).records
    return records[0] if records else None


def trace(
    instance: dg.DagsterInstance,
    asset: str,
    *,
    partition: str | None = None,
    storage_id: int | None = None,
    max_depth: int = 20,
) -> Provenance | None:
    """The provenance of an asset's latest materialisation (or of the one with ``storage_id``).

    Returns:
        ``None`` when the asset was never materialised on this instance.
    """
    key = dg.AssetKey.from_user_string(asset)
    record = _materialisation(instance, key, storage_id, partition)
    if record is None:
        return None
    event = record.asset_materialization
    tags = event.tags or {}
    run = instance.get_run_by_id(record.run_id)
    meta = event.metadata
    node = Provenance(
        asset=asset,
        partition=event.partition,
        run_id=record.run_id,
        materialised_at=datetime.fromtimestamp(record.timestamp, tz=UTC),
        code_version=tags.get("dagster/code_version"),
        data_version=tags.get("dagster/data_version"),
        config_hash=meta["config_hash"].value if "config_hash" in meta else None,
        location=str(meta["location"].value) if "location" in meta else None,
        path=str(meta["path"].value) if "path" in meta else None,
        run_tags={k: v for k, v in (run.tags if run else {}).items() if k.startswith("rewardbox/")},
    )
    if max_depth > 0:
        for tag, value in sorted(tags.items()):
            if tag.startswith(INPUT_POINTER) and value.isdigit():
                parent = trace(
                    instance,
                    tag[len(INPUT_POINTER) :],
                    storage_id=int(value),
                    max_depth=max_depth - 1,
                )
                if parent is not None:
                    node.inputs.append(parent)
    return node


def render(node: Provenance, depth: int = 0, seen: set | None = None) -> Iterator[str]:
    """Indented text lines, one block per materialisation, inputs under their consumer; a
    materialisation already shown (``base_checkpoint`` is an input at several levels) is one line
    that says so."""
    seen = set() if seen is None else seen
    pad = "  " * depth
    name = f"{node.asset}[{node.partition}]" if node.partition else node.asset
    identity = (node.asset, node.partition, node.run_id, node.materialised_at)
    if identity in seen:
        yield f"{pad}{name}  data_version={node.data_version}  (shown above)"
        return
    seen.add(identity)
    yield (
        f"{pad}{name}  data_version={node.data_version}  code_version={node.code_version}  "
        f"config_hash={node.config_hash}"
    )
    yield f"{pad}  run {node.run_id} at {node.materialised_at:%Y-%m-%d %H:%M:%S}Z"
    if node.location:
        yield f"{pad}  location {node.location}"
    if node.path:
        yield f"{pad}  stored {node.path}"
    if node.run_tags:
        yield f"{pad}  tags " + " ".join(
            f"{k.removeprefix('rewardbox/')}={v}" for k, v in sorted(node.run_tags.items())
        )
    for parent in node.inputs:
        yield from render(parent, depth + 1, seen)


def not_found(asset: str, known: list[str], home: str) -> str:
    """The error for an asset with no materialisation: a likely misspelling is named, else the
    assets this instance has materialised."""
    close = difflib.get_close_matches(asset, known, n=3, cutoff=0.75)
    if close:
        return f"no asset {asset!r} on this instance ({home}); did you mean {', '.join(close)}?"
    listed = ", ".join(known) if known else "none yet"
    return f"{asset} has no materialisation on this instance ({home}); materialised: {listed}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("asset", help="asset key, e.g. merged_checkpoint")
    parser.add_argument("--partition", help="partition key (checkpoint_evaluation_results)")
    args = parser.parse_args(argv)
    with dg.DagsterInstance.get() as instance:
        node = trace(instance, args.asset, partition=args.partition)
        serves, home = instance_profile(instance), instance.root_directory
        known = sorted(key.to_user_string() for key in instance.get_asset_keys())
    if node is None:
        raise SystemExit(not_found(args.asset, known, home))
    print(f"instance {home}: profile {serves or 'unclaimed (no run of this version yet)'}")
    print("\n".join(render(node)))


if __name__ == "__main__":
    main()
