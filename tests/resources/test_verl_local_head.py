"""The CPU-machine default of ``grpo.backend: verl``: the resource starts a local Ray head, the job's
GPU preflight fails, and the materialisation fails in bounded time saying "no GPU" (never a hang)."""

from __future__ import annotations

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


def test_local_head_and_the_jobs_gpu_preflight_fail_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(verl_job, "pool_rows", minimal_rows)
    monkeypatch.setattr(verl_job, "agent_loop_overrides", no_agent_loop)
    monkeypatch.delenv(
        "REWARDBOX_VERL_PYTHON", raising=False
    )  # verl.python: null picks this Python (it has Ray)
    monkeypatch.setattr(verl_job, "verl_python", lambda cfg: "/no/verl/environment/python")
    assert not ray.is_initialized()
    profile = verl_profile(
        tmp_path, mode=None, preflight=True
    )  # the real entrypoint: preflight && verl
    (tmp_path / "home").mkdir()
    start = time.monotonic()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        result = dg.materialize(
            grpo_assets(profile),
            resources=resources(profile, tmp_path, job_address=None),
            instance=instance,
            raise_on_error=False,
        )
        messages = run_messages(instance, result.run_id)
    assert not result.success
    assert (
        "rewardbox preflight: the Ray cluster has 0 GPUs, verl needs 1" in messages
    )  # streamed from the job
    assert "no GPU: verl needs 1 GPUs" in messages and "exit code 3" in messages  # in the failure
    assert (
        "No module named 'verl'" not in messages
    )  # verl's command (absent from this Python) never ran
    assert time.monotonic() - start < 200
    assert not ray.is_initialized()  # the resource shut its local head down


CANCELLED_ON_LOCAL_HEAD = """
import sys
from pathlib import Path
import dagster as dg
from dagster._utils.interrupts import setup_interrupt_handlers
from rewardbox.training.verl import job as verl_job
from tests.resources.verl_job_support import grpo_assets, patch_verl_hooks, resources

setup_interrupt_handlers()  # SIGTERM interrupts the step, as in a Dagster run worker being terminated
patch_verl_hooks(verl_job)
profile, tmp = Path(sys.argv[1]), Path(sys.argv[2])
with dg.instance_for_test(temp_dir=str(tmp / "home")) as instance:
    result = dg.materialize(grpo_assets(profile), resources=resources(profile, tmp, None), instance=instance,
                            raise_on_error=False)
print("success:", result.success)
"""


@pytest.mark.slow  # a local Ray head started in a subprocess, a job, a stop: about a minute on a loaded machine
def test_terminating_a_run_on_the_local_head_lets_the_job_save_before_the_head_goes_down(tmp_path):
    """Issue 24, kind 7: the stop waits for the job's SIGTERM checkpoint (4 s, beyond Ray's default 3 s
    grace) before the resource's cleanup shuts the local head down."""
    import os
    import signal
    import subprocess
    import sys

    import yaml

    profile = verl_profile(tmp_path, mode="hang", preflight=False)
    data = yaml.safe_load(profile.read_text())
    saved = tmp_path / "saved_on_sigterm"
    data["verl"]["runtime_env"]["env_vars"]["FAKE_VERL_SAVE_ON_SIGTERM"] = str(saved)
    profile.write_text(yaml.safe_dump(data))
    (tmp_path / "home").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": os.getcwd()}
    run = subprocess.Popen(
        [sys.executable, "-c", CANCELLED_ON_LOCAL_HEAD, str(profile), str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    pid_file = tmp_path / "fake_verl.pid"
    try:
        deadline = time.monotonic() + 240
        while not pid_file.exists() and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.5)
        assert pid_file.exists(), (
            run.communicate(timeout=30)[0][-3000:] if run.poll() is not None else "no job"
        )
        run.send_signal(signal.SIGTERM)
        output, _ = run.communicate(timeout=180)
    finally:
        if run.poll() is None:
            run.kill()
    assert "success: False" in output, output[-3000:]
    assert saved.read_text() == "saved", output[
        -3000:
    ]  # before: ray.shutdown() followed the stop at once
