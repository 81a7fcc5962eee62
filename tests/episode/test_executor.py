"""The local episode executor: one bound on open sandboxes, results keyed by (uid, trial)."""

from __future__ import annotations

import asyncio
import itertools
from contextlib import asynccontextmanager

import pytest

from rewardbox.config.profile import load_profile
from rewardbox.episode.campaign import campaign_keys, repair_keys
from rewardbox.episode.config import ExecutorConfig
from rewardbox.episode.executor import LocalExecutor, build_executor
from rewardbox.episode.run import run_trials
from rewardbox.policy.scripted import GoldenReplayPolicy
from rewardbox.runtime.compose import campaign_parts, episode_runner
from rewardbox.tasks.sources import load_candidates
from rewardbox.training.groups import collect_groups
from tests.fixtures.executor_policies import SlowGoldenPolicy


class OpenCounter:
    """The test's own instrument: wraps the runner's sandbox factory, counts open sandboxes."""

    def __init__(self) -> None:
        self.open = self.peak = self.made = 0

    def wrap(self, factory):
        counter = self

        class Counted:
            def __init__(self, inner):
                self.inner = inner

            async def start(self, *args):
                counter.open += 1
                counter.peak = max(counter.peak, counter.open)
                return await self.inner.start(*args)

            async def close(self):
                await self.inner.close()
                counter.open -= 1

            def __getattr__(self, name):
                return getattr(self.inner, name)

        def make():
            counter.made += 1
            return Counted(factory())

        return make


@pytest.fixture(scope="module")
def profile():
    return load_profile("test")


@pytest.fixture(scope="module")
def tasks(profile):
    return load_candidates(profile.tasks).tasks[:4]


def counted_runner_factory(profile, counter):
    @asynccontextmanager
    async def factory(policy):
        async with episode_runner(profile, policy) as runner:
            runner.sandbox_factory = counter.wrap(runner.sandbox_factory)
            yield runner

    return factory


def test_build_executor_defaults_to_local():
    executor = build_executor(ExecutorConfig(), concurrency=3)
    assert executor.kind == "local" and executor.concurrency == 3
    with pytest.raises(ValueError, match="concurrency"):
        LocalExecutor(0)


def test_campaign_peak_open_sandboxes_never_above_the_bound(profile, tasks):
    counter, executor = OpenCounter(), LocalExecutor(concurrency=2)

    async def main():
        async with executor.session(
            counted_runner_factory(profile, counter), SlowGoldenPolicy(0.01)
        ) as session:
            return await session.run([(t, i) for t in tasks for i in range(3)])

    results = asyncio.run(main())
    assert [(r.uid, r.trial) for r in results] == campaign_keys(tasks, 3)
    assert all(r.reward == 1.0 for r in results)
    assert counter.made == 12 and counter.open == 0
    assert counter.peak == 2 and executor.gauge_peak == 2  # the bound is used, never exceeded


def test_grpo_groups_through_the_executor_respect_the_bound(profile, tasks):
    """All B x G rollouts handed over at once (collect_groups gathers them) still open <= concurrency."""
    counter, executor = OpenCounter(), LocalExecutor(concurrency=3)

    async def main():
        async with executor.session(
            counted_runner_factory(profile, counter), SlowGoldenPolicy(0.01)
        ) as session:
            return await collect_groups(
                itertools.cycle(tasks),
                session.run_one,
                group_size=4,
                groups_wanted=2,
                max_refill_rounds=0,
            )

    groups, stats = asyncio.run(main())
    assert stats.episodes == 8 and stats.drawn == 2
    assert groups == [] and stats.zero_variance == 2  # the golden policy always passes: no variance
    assert 1 <= counter.peak <= 3


def test_rerun_fills_only_missing_and_system_error_keys(profile, tasks):
    rows, _ = run_trials(tasks[:2], 2, GoldenReplayPolicy(), campaign_parts(profile))
    broken = rows.with_columns(
        system_error=(rows["trial"] == 1).map_elements(
            lambda bad: "sandbox: lost" if bad else None, return_dtype=rows["system_error"].dtype
        )
    )
    redo = repair_keys(
        broken.filter(~((broken["uid"] == tasks[0].uid) & (broken["trial"] == 0))),
        campaign_keys(tasks[:2], 2),
    )
    assert sorted(redo) == sorted([(tasks[0].uid, 0), (tasks[0].uid, 1), (tasks[1].uid, 1)])
    executor = LocalExecutor(2)
    repaired, _ = run_trials(
        tasks[:2], 2, GoldenReplayPolicy(), campaign_parts(profile), keys=redo, executor=executor
    )
    assert sorted(repaired.select("uid", "trial").rows()) == sorted(redo)
    assert 1 <= executor.gauge_peak <= 2
