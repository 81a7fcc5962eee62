"""Screening verdicts from the servers' own reports (no hashing of ours)."""

from __future__ import annotations

import polars as pl

from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.selection.screening import SCREEN_SCHEMA, expects_write, screen_verdict, ungradable


def _result(
    result_hash: str, golden_hash: str = "g", passed: bool = True, error: str | None = None
) -> EpisodeResult:
    # an external server hashing its own way: our hash of initial_db_state never equals its golden_db_hash
    effects = {
        "srv": {
            "initial_db_state": {"t": [1]},
            "result_db_hash": result_hash,
            "golden_db_hash": golden_hash,
        }
    }
    return EpisodeResult(
        uid="f.py:t", trial=0, effects=effects, passed=None if error else passed, system_error=error
    )


class _Task:
    uid, domain = "f.py:t", "shop"
    available_tools = ["get_order"]
    tags: tuple[str, ...] = ()

    def golden_interactions(self):
        return [("srv", "get_order", {})]


def test_read_only_task_on_a_foreign_hash_is_valid_and_marked():
    golden, null = (
        _result("g"),
        _result("g"),
    )  # the null run leaves the golden state: nothing to write
    assert not expects_write(golden, null)
    row = screen_verdict(_Task(), golden, null)
    assert row["valid"] and row["read_only"] and row["null_passed"] and row["reason"] == ""


def test_write_task_whose_null_run_passes_is_invalid():
    golden, null = _result("g"), _result("start", passed=True)
    assert expects_write(golden, null)
    row = screen_verdict(_Task(), golden, null)
    assert not row["valid"] and row["reason"] == "null run passes although a write is expected"


def test_ungradable_lists_uid_and_cause():
    golden, null = (
        _result("g"),
        _result("g", error="grader: ModuleNotFoundError: No module named 'x'"),
    )
    row = screen_verdict(_Task(), golden, null)
    report = pl.DataFrame([row], schema=SCREEN_SCHEMA)
    assert ungradable(report) == ["f.py:t: grader: ModuleNotFoundError: No module named 'x'"]
