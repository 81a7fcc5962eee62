"""A campaign SIGKILLed at 20 random moments and resumed loses no row and duplicates none (issue #12).

Each campaign process runs the golden replay policy on embedded benchmark tasks with a journal and
is killed with SIGKILL after a random delay; the next process resumes from the journal. Processes
come from a ``forkserver`` that imported the engine once (forking the test process itself is unsafe:
its polars thread pool may hold a lock), so a restart costs a fork, not an interpreter start-up.
Grading runs in the campaign process (``InlineGrader``): a kill leaves no grading worker behind.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
import time
from pathlib import Path

import polars as pl
import pytest

from rewardbox.config.profile import load_profile
from rewardbox.episode.campaign import ROW_SCHEMA, campaign_keys, coverage_problems
from rewardbox.episode.journal import CampaignJournal
from rewardbox.episode.run import run_trials_async
from rewardbox.grading.execute import evaluate_test_code
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.runtime.compose import campaign_parts
from rewardbox.tasks.sources import load_benchmark

TRIALS = 12
KILLS = 20
COMPARED = [
    "uid",
    "domain",
    "trial",
    "reward",
    "passed",
    "system_error",
    "termination_reason",
    "turns",
]


class InlineGrader:
    """Grades in the calling process (the real grading function, without a worker pool)."""

    async def run(self, task, context):
        return evaluate_test_code(task.test_code, context, fixtures=task.fixtures, uid=task.uid)


def _campaign(journal_dir: str, tasks, profile, started: str) -> None:
    """One campaign process: announces its start (with the time), then runs or resumes the campaign."""
    journal = CampaignJournal.open(journal_dir, ROW_SCHEMA)
    Path(started).write_text(str(time.perf_counter()))
    asyncio.run(
        run_trials_async(
            tasks,
            TRIALS,
            GoldenReplayPolicy(),
            campaign_parts(profile),
            journal=journal,
            grader=InlineGrader(),
        )
    )
    Path(started).with_suffix(".done").write_text(str(time.perf_counter()))
    os._exit(0)


_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(
    [
        "polars",
        "mcp.client.session",
        "mcp.server.mcpserver",
        "rewardbox.episode.run",
        "rewardbox.grading.testrunner",
        "rewardbox.policy.scripted",
        "rewardbox.episode.journal",
        "rewardbox.sandbox.inprocess",
        "rewardbox.domains.server",
        "rewardbox.domains.retail.domain",
        "rewardbox.domains.hotel.domain",
        "rewardbox.domains.helpdesk.domain",
    ]
)


def _start(journal_dir: Path, tasks, profile) -> tuple[multiprocessing.Process, Path]:
    """Start a campaign process; return once it has opened its journal and begun the campaign."""
    started = journal_dir.parent / f"started-{time.perf_counter_ns()}.txt"
    process = _CONTEXT.Process(
        target=_campaign, args=(str(journal_dir), tasks, profile, str(started))
    )
    process.start()
    while not started.exists() and process.is_alive():
        time.sleep(0.005)
    return process, started


@pytest.fixture(scope="module")
def campaign():
    profile = load_profile("test")
    return load_benchmark(profile.tasks).tasks[:3], profile


def test_sigkill_at_20_random_moments_then_resume_matches_an_uninterrupted_run(tmp_path, campaign):
    tasks, profile = campaign
    expected = campaign_keys(tasks, TRIALS)
    baseline, started = _start(tmp_path / "baseline", tasks, profile)
    baseline.join()
    full_s = float(started.with_suffix(".done").read_text()) - float(started.read_text())
    reference = CampaignJournal(tmp_path / "baseline", ROW_SCHEMA).rows(expected)
    assert baseline.exitcode == 0 and coverage_problems(reference, expected) == []

    journal_dir = tmp_path / "killed"
    rng = random.Random(20261201)
    # Kill points spread over the whole campaign: after a random number of durable rows (distinct,
    # increasing), plus a random fraction of the mean time per row, so a kill may hit an episode,
    # a grading, a shard write or the start-up, and the last kill still comes before the end.
    targets = sorted(rng.sample(range(len(expected) - 4), KILLS))
    row_s = full_s / len(expected)
    killed_mid_run, durable = 0, []
    for target in targets:
        process, _ = _start(journal_dir, tasks, profile)
        while len(list(journal_dir.glob("shard-*.parquet"))) < target and process.is_alive():
            time.sleep(0.002)
        time.sleep(rng.uniform(0.0, row_s))
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join()
        killed_mid_run += process.exitcode == -signal.SIGKILL
        durable.append(CampaignJournal(journal_dir, ROW_SCHEMA).all_rows().height)
    (journal_dir / "shard-99999999999999999999-0-000000.parquet.tmp").write_bytes(
        b"PAR1 torn write"
    )
    final, _ = _start(journal_dir, tasks, profile)
    final.join()

    journal = CampaignJournal(journal_dir, ROW_SCHEMA)
    every_row = journal.all_rows()
    rows = journal.rows(expected)
    duplicates = every_row.height - every_row.select("uid", "trial").n_unique()
    print(
        f"\ncampaign {len(expected)} keys, uninterrupted {full_s:.2f} s; {killed_mid_run}/{KILLS} kills landed "
        f"mid-run; durable rows after each kill {durable}; rows lost "
        f"{len(coverage_problems(rows, expected))}; duplicates {duplicates}"
    )
    assert final.exitcode == 0 and killed_mid_run == KILLS
    assert coverage_problems(rows, expected) == [] and duplicates == 0
    assert durable == sorted(durable)  # a kill never removes a durable row
    assert rows.select(COMPARED).equals(reference.select(COMPARED))  # same coverage and outcomes
    assert not list(journal_dir.glob("*.tmp"))  # the torn write was discarded on open, never read


def test_resume_reruns_only_missing_and_system_error_keys(tmp_path):
    journal = CampaignJournal.open(tmp_path, ROW_SCHEMA)
    base = {"domain": "d", "reward": 1.0, "passed": True, "retried_system_error_kinds": []}
    journal.append({**base, "uid": "a", "trial": 0})
    journal.append(
        {
            **base,
            "uid": "a",
            "trial": 1,
            "reward": None,
            "passed": None,
            "system_error": "sandbox: died",
            "system_error_kind": "sandbox_crash",
        }
    )
    keys = [("a", 0), ("a", 1), ("b", 0)]
    assert journal.todo(keys) == [("a", 1), ("b", 0)]
    journal.append({**base, "uid": "a", "trial": 1})  # the repaired attempt
    rows = journal.rows(keys)
    assert rows.select("uid", "trial").rows() == [("a", 0), ("a", 1)]
    assert (
        rows["system_error"].null_count() == 2
    )  # the clean row wins over the earlier system error
    with pytest.raises(ValueError, match="not in the schema"):
        journal.append({**base, "uid": "c", "trial": 0, "api_key": "x"})
    assert pl.read_parquet(next(tmp_path.glob("shard-*.parquet"))).height == 1
