"""``run_with_repair``: one repair pass re-runs exactly the keys that are missing or system errors."""

from __future__ import annotations

import polars as pl
import pytest

from rewardbox.config.profile import load_profile
from rewardbox.errors import EndpointError
from rewardbox.evaluation.repair import run_with_repair
from rewardbox.policy.base import ChatRequest, Completion
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.runtime.compose import campaign_parts
from rewardbox.tasks.sources import load_benchmark


class DownForTask(GoldenReplayPolicy):
    """The golden replay, except that every completion for one task is an endpoint outage."""

    def __init__(self, uid: str) -> None:
        self.uid = uid

    async def complete(self, request: ChatRequest) -> Completion:
        if getattr(request.task, "uid", "") == self.uid:
            raise EndpointError("503 from the test endpoint")
        return await super().complete(request)


@pytest.fixture(scope="module")
def setup():
    profile = load_profile("test")
    profile.episode.max_system_error_retries = 0  # every outage becomes a system-error row at once
    return profile, load_benchmark(profile.tasks).tasks[:2]


def test_system_error_keys_are_rerun_once_and_replaced(setup):
    profile, tasks = setup
    policies = iter(
        [DownForTask(tasks[0].uid), GoldenReplayPolicy()]
    )  # the outage ends before the repair pass
    rows, repaired = run_with_repair(tasks, 2, lambda: next(policies), campaign_parts(profile))
    assert repaired == 2  # task 0's two trials, and only those
    assert sorted(rows.select("uid", "trial").rows()) == sorted(
        (t.uid, i) for t in tasks for i in range(2)
    )
    assert rows["system_error"].null_count() == rows.height and rows["passed"].all()


def test_a_clean_campaign_runs_once_and_a_lasting_outage_keeps_its_rows(setup):
    profile, tasks = setup
    built = []

    def make_policy():
        built.append(GoldenReplayPolicy())
        return built[-1]

    rows, repaired = run_with_repair(tasks, 2, make_policy, campaign_parts(profile))
    assert repaired == 0 and len(built) == 1 and rows.height == 4
    rows, repaired = run_with_repair(
        tasks, 1, lambda: DownForTask(tasks[1].uid), campaign_parts(profile)
    )
    failed = rows.filter(pl.col("system_error").is_not_null())
    assert repaired == 1 and failed["uid"].to_list() == [
        tasks[1].uid
    ]  # still failing: the coverage gate sees it
