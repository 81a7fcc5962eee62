"""``DecodeResult`` JSONL written as attempts finish, so a campaign never holds its full results.

An evaluation exports every attempt as a ThinkingBox ``DecodeResult``
(``rewardbox.evaluation.interchange``), effects and messages included: hundreds
of KiB per attempt. Keeping every ``EpisodeResult`` until the end made memory
grow with the campaign; the spool writes each row to a scratch file the moment
its attempt finishes and remembers only where it lies. ``finish`` then writes
the final file with the latest row of each (uid, trial), sorted by key (a
repair run's attempt replaces the first one), exactly as
``export_decode_results`` writes the merged results.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.evaluation.interchange import decode_result_row
from rewardbox.tasks.schema import Task


class DecodeResultSpool:
    """Collects ``DecodeResult`` rows on disk while a campaign runs.

    Args:
        tasks: the tasks the attempts belong to (scenario, tags, tools).
        path: the final JSONL file; parent directories are created.

    Use ``write`` as a campaign's ``on_result`` and ``finish`` once at the end
    (or ``close`` to abandon). Memory: two integers per key.
    """

    def __init__(self, tasks: Sequence[Task], path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tasks = {t.uid: t for t in tasks}
        self._where: dict[tuple[str, int], tuple[int, int]] = {}
        self._scratch = tempfile.TemporaryFile(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".spool")

    def write(self, result: EpisodeResult) -> None:
        """Append the attempt's row; a later attempt of the same key replaces it in the final file.

        Raises:
            ValueError: the result's uid is not among the tasks (names the uid).
        """
        task = self._tasks.get(result.uid)
        if task is None:
            raise ValueError(f"DecodeResultSpool: no task for uid {result.uid!r}; pass the tasks the results come from")
        line = json.dumps(decode_result_row(result, task), ensure_ascii=False, default=str).encode("utf-8") + b"\n"
        offset = self._scratch.seek(0, os.SEEK_END)
        self._scratch.write(line)
        self._where[(result.uid, result.trial)] = (offset, len(line))

    def finish(self) -> Path:
        """Write the final file (latest row per key, sorted by key) atomically and drop the scratch file."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("wb") as out:
            for key in sorted(self._where):
                offset, length = self._where[key]
                self._scratch.seek(offset)
                out.write(self._scratch.read(length))
        tmp.replace(self.path)
        self.close()
        return self.path

    def close(self) -> None:
        """Drop the scratch file (idempotent)."""
        self._scratch.close()

    def __enter__(self) -> DecodeResultSpool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
