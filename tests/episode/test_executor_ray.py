"""The Ray episode executor on an embedded Ray (2 CPUs): same rows as local, bounded, cancellable."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from functools import partial

import pytest

ray = pytest.importorskip("ray")

import tests.fixtures.executor_policies as executor_policies  # noqa: E402
from rewardbox.config.profile import load_profile  # noqa: E402
from rewardbox.episode.campaign import campaign_keys, coverage_problems, repair_keys  # noqa: E402
from rewardbox.episode.config import ExecutorConfig  # noqa: E402
from rewardbox.episode.executor import LocalExecutor  # noqa: E402
from rewardbox.episode.executor_ray import RayExecutor, check_shippable  # noqa: E402
from rewardbox.episode.run import run_trials  # noqa: E402
from rewardbox.policy.scripted import GoldenReplayPolicy  # noqa: E402
from rewardbox.runtime.compose import (
    campaign_parts,
    episode_runner,  # noqa: E402
)
from rewardbox.tasks.sources import load_candidates  # noqa: E402

pytestmark = pytest.mark.timeout(300)
CONFIG = ExecutorConfig(kind="ray", num_cpus=2, workers=2, worker_num_cpus=0.5)
KEY = ["uid", "trial", "reward", "passed", "termination_reason"]


@pytest.fixture(scope="module")
def embedded_ray():
    """One embedded Ray for the module (starting one costs seconds); shut down after."""
    ray.cloudpickle.register_pickle_by_value(executor_policies)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def profile():
    return load_profile("test")


@pytest.fixture(scope="module")
def tasks(profile):
    return load_candidates(profile.tasks).tasks[:4]


def test_ray_rows_equal_local_rows_and_open_sandboxes_stay_bounded(embedded_ray, profile, tasks):
    local_rows, _ = run_trials(
        tasks, 3, GoldenReplayPolicy(), campaign_parts(profile), executor=LocalExecutor(3)
    )
    executor = RayExecutor(CONFIG, concurrency=3)
    try:
        ray_rows, results = run_trials(
            tasks, 3, GoldenReplayPolicy(), campaign_parts(profile), executor=executor
        )
        peak = executor.gauge_peak
    finally:
        executor.close()
    assert ray.is_initialized()  # the executor did not start Ray, so it leaves it running
    assert ray_rows.select(KEY).equals(local_rows.select(KEY))
    assert coverage_problems(ray_rows, campaign_keys(tasks, 3)) == []
    assert ray_rows["reward"].to_list() == [1.0] * 12 and len(results[0].messages) > 2
    assert 1 <= peak <= 3


def test_rerun_on_ray_fills_only_the_repair_keys(embedded_ray, profile, tasks):
    rows, _ = run_trials(
        tasks[:2], 2, GoldenReplayPolicy(), campaign_parts(profile), executor=LocalExecutor(2)
    )
    redo = repair_keys(rows.filter(rows["trial"] == 0), campaign_keys(tasks[:2], 2))
    executor = RayExecutor(CONFIG.model_copy(update={"workers": 1}), concurrency=2)
    try:
        repaired, _ = run_trials(
            tasks[:2],
            2,
            GoldenReplayPolicy(),
            campaign_parts(profile),
            keys=redo,
            executor=executor,
        )
    finally:
        executor.close()
    assert (
        sorted(repaired.select("uid", "trial").rows())
        == sorted(redo)
        == [(t.uid, 1) for t in tasks[:2]]
    )


def test_a_dead_worker_is_a_system_error_never_a_reward(embedded_ray, profile, tasks):
    executor = RayExecutor(CONFIG.model_copy(update={"workers": 1}), concurrency=1)
    try:
        rows, _ = run_trials(
            tasks[:1],
            1,
            executor_policies.WorkerKillingPolicy(),
            campaign_parts(profile),
            executor=executor,
        )
    finally:
        executor.close()
    assert rows["reward"].to_list() == [None]
    assert rows["system_error"][0].startswith("ray_worker:")
    assert repair_keys(rows, campaign_keys(tasks[:1], 1)) == [(tasks[0].uid, 0)]


def test_a_terminated_dagster_step_cancels_outstanding_ray_calls(embedded_ray, profile, tasks):
    """Dagster terminates a run by SIGINT to the step, raised as DagsterExecutionInterruptedError."""
    from dagster._core.errors import DagsterExecutionInterruptedError, raise_execution_interrupts

    executor = RayExecutor(CONFIG, concurrency=2)

    async def main():
        async with executor.session(
            partial(episode_runner, profile), executor_policies.SlowGoldenPolicy(60)
        ) as s:
            await s.run([(t, 0) for t in tasks])

    timer = threading.Timer(20, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(DagsterExecutionInterruptedError), raise_execution_interrupts():
            asyncio.run(main())
    finally:
        timer.cancel()
        executor.close()
    # each worker (share 1) held one running key and one prefetched behind it: all 4 calls cancelled,
    # and no more than the bound of 2 sandboxes was ever open
    assert executor.cancelled == 4
    assert 1 <= executor.gauge_peak <= 2


def test_the_local_model_policy_is_refused_with_a_clear_error():
    from rewardbox.policy.local import LocalPolicy

    with pytest.raises(ValueError, match="executor.kind 'local'.*endpoint"):
        check_shippable(LocalPolicy.__new__(LocalPolicy))
    check_shippable(GoldenReplayPolicy())  # scripted policies travel
    unpicklable = GoldenReplayPolicy()
    unpicklable.lock = threading.Lock()
    with pytest.raises(ValueError, match="GoldenReplayPolicy cannot be sent to Ray workers.*lock"):
        check_shippable(unpicklable)


def test_an_endpoint_policy_travels_without_its_key_and_gives_the_local_rows(
    embedded_ray, profile, tasks, fake_openai, monkeypatch
):
    """The scale path: Ray workers calling an OpenAI-compatible server (here a fake one on loopback)."""
    from rewardbox.policy.endpoint import EndpointPolicy
    from tests.fixtures.fake_openai import chat_response

    monkeypatch.setenv("REWARDBOX_TEST_KEY", "sk-test-secret")
    fake_openai.default = (200, chat_response("I cannot help with that. <DONE>"), {})
    policy = EndpointPolicy(fake_openai.base_url, "fake-model", api_key_env="REWARDBOX_TEST_KEY")
    assert b"sk-test-secret" not in ray.cloudpickle.dumps(policy)
    local_rows, _ = run_trials(
        tasks[:2], 2, policy, campaign_parts(profile), executor=LocalExecutor(2)
    )
    executor = RayExecutor(CONFIG, concurrency=2)
    try:
        ray_rows, _ = run_trials(tasks[:2], 2, policy, campaign_parts(profile), executor=executor)
    finally:
        executor.close()
    assert ray_rows["system_error"].null_count() == 4 and ray_rows["reward"].to_list() == [0.0] * 4
    assert ray_rows.select(KEY).equals(local_rows.select(KEY))
    assert len(fake_openai.requests) == 8  # one completion per episode, 4 local + 4 on Ray
