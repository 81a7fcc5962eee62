"""``grpo.backend: verl`` on a real local Ray cluster (CPU only), with a fake verl trainer.

One Ray head (dashboard = job server on a free port) serves every test here. The fake
``verl.trainer.main_ppo`` (tests/fixtures/fake_verl) reaches the job through the job's
runtime_env, prints verl-like step lines and fails, succeeds or hangs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import dagster as dg
import pytest

ray = pytest.importorskip("ray")

from rewardbox.training.verl import job as verl_job  # noqa: E402
from tests.resources.verl_job_support import (  # noqa: E402
    grpo_assets,
    minimal_rows,
    no_agent_loop,
    resources,
    run_messages,
    verl_profile,
)

pytestmark = pytest.mark.timeout(300)  # each test < 20 s on an idle machine (Ray start included)


@pytest.fixture(scope="module")
def job_address():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context = ray.init(
        num_cpus=2, include_dashboard=True, dashboard_host="127.0.0.1", dashboard_port=port
    )
    yield f"http://{context.dashboard_url}"
    ray.shutdown()


@pytest.fixture(autouse=True)
def _rows(monkeypatch):
    monkeypatch.setattr(verl_job, "pool_rows", minimal_rows)
    monkeypatch.setattr(verl_job, "agent_loop_overrides", no_agent_loop)


def _materialize(tmp_path, profile, job_address):
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        start = time.monotonic()
        result = dg.materialize(
            grpo_assets(profile),
            resources=resources(profile, tmp_path, job_address),
            instance=instance,
            raise_on_error=False,
        )
        result.observations = [
            record.dagster_event.event_specific_data.asset_observation
            for record in instance.all_logs(result.run_id)
            if record.dagster_event is not None and record.dagster_event.is_asset_observation
        ]
        return result, run_messages(instance, result.run_id), time.monotonic() - start


def test_a_failing_job_fails_the_materialisation_with_its_log_tail(tmp_path, job_address):
    result, messages, elapsed_s = _materialize(
        tmp_path, verl_profile(tmp_path, mode="no_gpu", preflight=False), job_address
    )
    assert not result.success
    assert (
        "no GPU: torch.cuda.is_available() is False" in messages
    )  # the job's own error, in the failure
    assert "ended FAILED" in messages
    assert "step:1 - critic/score/mean:0.250" in messages  # the job's log lines reached Dagster
    # the job id was in the asset's record at submission, before the job failed (issue 24, kind 7)
    [observed] = result.observations
    assert observed.metadata["status"].value == "SUBMITTED"
    assert observed.metadata["job_id"].value.startswith("rewardbox-grpo-")
    assert f"Ray job {observed.metadata['job_id'].value} ended FAILED" in messages
    assert (
        "verl step 2: mean_reward=0.500 zero_variance_frac=0.500" in messages
    )  # and were parsed per step
    assert elapsed_s < 120


def test_a_successful_job_gives_the_latest_checkpoint_and_step_metadata(tmp_path, job_address):
    result, messages, _ = _materialize(
        tmp_path, verl_profile(tmp_path, mode="succeed", preflight=False, steps=3), job_address
    )
    assert result.success, messages[-3000:]
    [event] = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey("grpo_checkpoint")
    ]
    metadata = event.materialization.metadata
    assert metadata["global_step"].value == 3 and metadata["steps"].value == 3
    assert metadata["last_mean_reward"].value == pytest.approx(0.75)
    assert metadata["last_throughput_tokens_per_s"].value == pytest.approx(300.0)
    path = result.output_for_node("grpo_checkpoint")
    assert path.endswith(
        f"checkpoints/verl/rewardbox-grpo/{metadata['job_id'].value}/global_step_3/actor"
    )


CANCELLED_RUN = textwrap.dedent("""
    import sys
    from pathlib import Path
    import dagster as dg
    from dagster._utils.interrupts import setup_interrupt_handlers
    from rewardbox.training.verl import job as verl_job
    from tests.resources.verl_job_support import grpo_assets, patch_verl_hooks, resources

    setup_interrupt_handlers()  # SIGTERM interrupts the step, as in a Dagster run worker being terminated
    patch_verl_hooks(verl_job)
    profile, tmp, address = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    with dg.instance_for_test(temp_dir=str(tmp / "home")) as instance:
        result = dg.materialize(grpo_assets(profile), resources=resources(profile, tmp, address),
                                instance=instance, raise_on_error=False)
    print("success:", result.success)
""")


def test_terminating_the_run_stops_the_ray_job(tmp_path, job_address):
    from ray.job_submission import JobSubmissionClient

    (tmp_path / "home").mkdir()
    profile = verl_profile(tmp_path, mode="hang", preflight=False)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    run = subprocess.Popen(
        [sys.executable, "-c", CANCELLED_RUN, str(profile), str(tmp_path), job_address],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    client, pid_file = JobSubmissionClient(job_address), tmp_path / "fake_verl.pid"
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.5)
        assert pid_file.exists(), (
            run.communicate(timeout=30)[0][-3000:] if run.poll() is not None else "no job"
        )
        [job] = [
            j
            for j in client.list_jobs()
            if (j.submission_id or "").startswith("rewardbox-grpo-") and str(j.status) == "RUNNING"
        ]
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
    assert "success: False" in output, output[-3000:]
    deadline = time.monotonic() + 60
    while (
        str(client.get_job_status(job.submission_id)) != "STOPPED" and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert str(client.get_job_status(job.submission_id)) == "STOPPED"
    with pytest.raises(ProcessLookupError):  # the fake trainer is gone too, not orphaned
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            os.kill(int(pid_file.read_text()), 0)
            time.sleep(0.5)
