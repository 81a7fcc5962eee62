"""The evaluation campaign engine: trials into a journal with their DecodeResult, one repair pass, coverage."""

from __future__ import annotations

import json

import polars as pl
import pytest

from rewardbox.config.profile import load_profile
from rewardbox.domains import registry
from rewardbox.episode.journal import CampaignJournal
from rewardbox.evaluation.benchmark import EVALUATION_JOURNAL_SCHEMA, check_coverage, run_evaluation
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.runtime.compose import campaign_parts
from rewardbox.tasks.thinkingbox import load_dataset


@pytest.fixture(scope="module")
def tasks():
    return sorted(load_dataset(registry.dataset_dir("retail")).tasks, key=lambda t: t.uid)[:2]


def test_every_key_once_with_its_decode_result_and_the_journal_resumes(tasks, tmp_path):
    profile = load_profile("test")
    journal = CampaignJournal.open(tmp_path / "eval", EVALUATION_JOURNAL_SCHEMA)
    made: list[GoldenReplayPolicy] = []

    def make_policy() -> GoldenReplayPolicy:
        made.append(GoldenReplayPolicy())
        return made[-1]

    run = run_evaluation(tasks, 2, make_policy, campaign_parts(profile), journal)
    assert run.rows.columns == [c for c in EVALUATION_JOURNAL_SCHEMA if c != "decode_result"]
    assert run.rows.select("uid", "trial").rows() == [(t.uid, i) for t in tasks for i in range(2)]
    assert run.rows["passed"].to_list() == [True] * 4 and run.repaired_keys == 0 and len(made) == 1
    decoded = [json.loads(line) for line in run.decode_lines]
    assert [(d["uid"], d["metadata"]["repetition"]) for d in decoded] == run.rows.select(
        "uid", "trial"
    ).rows()
    assert check_coverage(run.rows, tasks, 2) == []
    again = run_evaluation(
        tasks, 2, make_policy, campaign_parts(profile), journal
    )  # every key already clean: nothing re-runs
    assert again.rows.equals(run.rows) and again.repaired_keys == 0


def test_coverage_names_missing_duplicate_and_unexpected_keys(tasks):
    uid = tasks[0].uid
    rows = pl.DataFrame({"uid": [uid, uid, "elsewhere"], "trial": [0, 0, 0]})
    assert check_coverage(rows, tasks[:1], 2) == [
        f"missing ({uid!r}, 1)",
        f"duplicate ({uid!r}, 0) x2",
        "unexpected ('elsewhere', 0)",
    ]
