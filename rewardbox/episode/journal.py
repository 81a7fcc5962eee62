"""A crash-safe campaign journal: finished trials as append-only Parquet shards.

A campaign that is killed (SIGKILL, OOM, a lost machine) must resume without
losing a finished trial or counting one twice. Each flush writes the rows
finished since the last one to a new shard ``shard-<time>-<pid>-<n>.parquet``
in the journal directory: first to a ``.tmp`` file, flushed and fsynced, then
renamed into place with ``os.replace`` (atomic on POSIX), and the directory is
fsynced. A reader lists only ``shard-*.parquet``, so a process killed mid-write
leaves at most a ``.tmp`` file that nobody reads (and :meth:`CampaignJournal.open`
deletes). A shard is therefore either whole or absent.

Resume is keyed by ``(uid, trial)``: :meth:`CampaignJournal.todo` returns the
expected keys that have no clean row (missing or system error); the campaign
runs only those. :meth:`CampaignJournal.rows` returns one row per key: the
latest clean row, else the latest system-error row. Trials that were in
flight when the process died have no row and are simply run again.

One journal serves one campaign at a time (one writer process); two processes
appending to the same directory would each see the other's keys as done.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from rewardbox.episode.campaign import upgrade_rows

SHARD_GLOB = "shard-*.parquet"


class CampaignJournal:
    """Finished trials of one campaign, durable across crashes.

    Args:
        directory: the journal directory (created); one per campaign (asset,
            partition and config hash), so a changed config starts afresh.
        schema: polars schema of a row; extra keys of a row are an error.
        flush_every: rows buffered before a shard is written; 1 (default)
            makes every finished trial durable at once, larger values write
            fewer files and re-run at most ``flush_every - 1`` trials after a crash.
    """

    def __init__(
        self, directory: str | os.PathLike, schema: Mapping[str, Any], flush_every: int = 1
    ):
        if flush_every < 1:
            raise ValueError(f"CampaignJournal: flush_every must be >= 1, got {flush_every}")
        self.directory = Path(directory)
        self.schema = dict(schema)
        self.flush_every = flush_every
        self._buffer: list[dict[str, Any]] = []
        self._seq = itertools.count()

    @classmethod
    def open(
        cls, directory: str | os.PathLike, schema: Mapping[str, Any], flush_every: int = 1
    ) -> CampaignJournal:
        """Create the directory and delete ``.tmp`` leftovers of a killed writer."""
        journal = cls(directory, schema, flush_every)
        journal.directory.mkdir(parents=True, exist_ok=True)
        for leftover in journal.directory.glob("*.tmp"):
            leftover.unlink(missing_ok=True)
        return journal

    # -- writing -------------------------------------------------------------------------------

    def append(self, row: Mapping[str, Any]) -> None:
        """Buffer one finished trial; write a shard when ``flush_every`` rows are buffered."""
        unknown = set(row) - set(self.schema)
        if unknown:
            raise ValueError(
                f"CampaignJournal: row has columns {sorted(unknown)} not in the schema"
            )
        self._buffer.append(dict(row))
        if len(self._buffer) >= self.flush_every:
            self.flush()

    def flush(self) -> Path | None:
        """Write buffered rows as one shard (tmp + fsync + atomic rename). Returns its path or None."""
        if not self._buffer:
            return None
        frame = pl.DataFrame(self._buffer, schema=self.schema)
        name = f"shard-{time.time_ns():020d}-{os.getpid()}-{next(self._seq):06d}.parquet"
        final = self.directory / name
        tmp = final.with_name(name + ".tmp")
        with tmp.open("wb") as f:
            frame.write_parquet(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
        _fsync_dir(self.directory)
        self._buffer.clear()
        return final

    # -- reading -------------------------------------------------------------------------------

    def all_rows(self) -> pl.DataFrame:
        """Every durable row, in write order (several rows per key after repairs).

        Shards written under old column names (``campaign.LEGACY_COLUMNS``) are renamed on read.
        """
        shards = sorted(self.directory.glob(SHARD_GLOB)) if self.directory.is_dir() else []
        if not shards:
            return pl.DataFrame(schema=self.schema)
        return pl.concat(
            [upgrade_rows(pl.read_parquet(p)) for p in shards], how="vertical_relaxed"
        ).select(list(self.schema))

    def rows(self, expected: Iterable[tuple[str, int]] | None = None) -> pl.DataFrame:
        """One row per ``(uid, trial)``: the latest clean row, else the latest system-error row.

        Args:
            expected: keep only these keys (None keeps every key in the journal).

        Returns:
            Rows sorted by ``(uid, trial)``, in the journal's schema.
        """
        frame = self.all_rows().with_row_index("_order")
        if expected is not None:
            keys = pl.DataFrame(
                list(expected), schema={"uid": pl.Utf8, "trial": pl.Int64}, orient="row"
            )
            frame = frame.join(keys, on=["uid", "trial"], how="semi")
        clean_first = frame.sort(["uid", "trial", pl.col("system_error").is_null(), "_order"])
        return clean_first.unique(["uid", "trial"], keep="last", maintain_order=True).drop("_order")

    def discard(self) -> None:
        """Delete the journal (after its rows were stored elsewhere); a later campaign starts afresh."""
        self._buffer.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    def todo(self, expected: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """Expected keys without a clean row (missing, or a system error), in ``expected`` order."""
        frame = self.all_rows().filter(pl.col("system_error").is_null())
        done = set(zip(frame["uid"].to_list(), frame["trial"].to_list()))
        return [key for key in expected if key not in done]


def campaign_journal(
    root: str | os.PathLike, name: str, identity: Sequence[str], schema: Mapping[str, Any]
) -> CampaignJournal:
    """The journal of one campaign: ``<root>/<name>-<hash of identity>``, opened.

    Args:
        root: the directory holding campaign journals.
        name: the campaign's name (asset and partition).
        identity: what makes two runs the same campaign (config hash, input
            hash, checkpoint); a change starts a new journal instead of resuming.
        schema: the row schema.
    """
    digest = hashlib.sha256("\n".join(identity).encode()).hexdigest()[:16]
    return CampaignJournal.open(Path(root) / f"{name}-{digest}", schema)


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
