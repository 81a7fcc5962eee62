"""Trial rows written under the old column names read as today's (one rename on read)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from rewardbox.episode.campaign import LEGACY_COLUMNS, ROW_SCHEMA, upgrade_rows
from rewardbox.episode.journal import CampaignJournal
from rewardbox.episode.trajectory import EpisodeResult, TestOutcome
from rewardbox.tasks.schema import Task
from rewardbox.tasks.thinkingbox import load_dataset
from rewardbox.thinkingbox.interchange import export_decode_results, import_infer_results

OLD_NAME = {new: old for old, new in LEGACY_COLUMNS.items()}
OLD_SCHEMA = {OLD_NAME.get(name, name): dtype for name, dtype in ROW_SCHEMA.items()}
TB_DATASET = Path(__file__).resolve().parents[1] / "fixtures" / "tb_dataset"
REFUND = "fake_shop_orders.py:test_refund_ok"


def _old_row(uid: str, trial: int, reason: str, system_error: str | None = None) -> dict:
    """A row as campaigns wrote it before the renames: finish_reason, seconds, attempts."""
    clean = system_error is None
    return {
        "uid": uid,
        "domain": "retail",
        "trial": trial,
        "reward": 1.0 if clean else None,
        "passed": True if clean else None,
        "system_error": system_error,
        "system_error_kind": None if clean else "sandbox_timeout",
        "retried_system_error_kinds": [],
        "finish_reason": reason,
        "turns": 3,
        "input_tokens": 100,
        "cached_input_tokens": 0,
        "output_tokens": 20,
        "seconds": 2.5,
        "attempts": 2,
        "truncated_turns": 0,
    }


def test_old_parquet_reads_with_todays_columns_and_unchanged_values(tmp_path):
    path = tmp_path / "probe_results.parquet"
    pl.DataFrame(
        [_old_row("t1", 0, "done"), _old_row("t1", 1, "context_limit")], schema=OLD_SCHEMA
    ).write_parquet(path)
    rows = upgrade_rows(pl.read_parquet(path))
    assert rows.columns == list(ROW_SCHEMA)  # same order, new names
    assert rows["termination_reason"].to_list() == ["done", "context_limit"]
    assert (rows["duration_s"].to_list(), rows["tries"].to_list()) == ([2.5, 2.5], [2, 2])


def test_todays_rows_and_other_frames_pass_unchanged():
    difficulty = pl.DataFrame({"uid": ["t1"], "n": [4], "c": [1], "band": ["hard"]})
    assert upgrade_rows(difficulty).equals(difficulty)
    both = pl.DataFrame(
        {"uid": ["t1"], "finish_reason": ["done"], "termination_reason": ["user_done"]}
    )
    assert upgrade_rows(both).to_dicts() == [
        {"uid": "t1", "termination_reason": "user_done"}
    ]  # the new column wins


def test_journal_resumes_from_a_shard_written_under_old_names(tmp_path):
    directory = tmp_path / "probe_results-abc"
    directory.mkdir()
    old = pl.DataFrame(
        [_old_row("t1", 0, "done"), _old_row("t1", 1, "system_error", "sandbox: timeout")],
        schema=OLD_SCHEMA,
    )
    old.write_parquet(directory / "shard-00000000000000000001-1-000000.parquet")
    journal = CampaignJournal.open(directory, ROW_SCHEMA)
    assert journal.todo([("t1", 0), ("t1", 1), ("t1", 2)]) == [("t1", 1), ("t1", 2)]
    assert journal.rows()["termination_reason"].to_list() == ["done", "system_error"]


@pytest.fixture(scope="module")
def task() -> Task:
    return next(t for t in load_dataset(TB_DATASET).tasks if t.uid == REFUND)


def test_decode_results_of_old_exports_keep_our_reason_and_tries(tmp_path, task):
    result = EpisodeResult(
        uid=REFUND,
        trial=0,
        termination_reason="context_limit",
        reward=0.0,
        passed=False,
        test_outcome=TestOutcome(False, 0.0),
        duration_s=1.0,
        tries=3,
    )
    path = export_decode_results([result], [task], tmp_path / "new.jsonl")
    line = json.loads(path.read_text())
    assert line["finish_reason"] == "agent_limit"  # ThinkingBox's own field and value set
    meta = line["metadata"]
    meta["rewardbox_finish_reason"], meta["rewardbox_attempts"] = (
        meta.pop("rewardbox_termination_reason"),
        meta.pop("rewardbox_tries"),
    )
    (tmp_path / "old.jsonl").write_text(json.dumps(line) + "\n")
    for name in ("new.jsonl", "old.jsonl"):
        row = import_infer_results(tmp_path / name).row(0, named=True)
        assert (row["termination_reason"], row["tries"], row["duration_s"]) == (
            "context_limit",
            3,
            1.0,
        ), name
