"""The CPU-machine default of ``grpo.backend: verl``: the resource starts a local Ray head, the job's
GPU preflight fails, and the materialisation fails in bounded time saying "no GPU" (never a hang)."""

from __future__ import annotations

import time

import dagster as dg
import pytest

ray = pytest.importorskip("ray")

from rewardbox.training import verl_job  # noqa: E402
from tests.resources.verl_job_support import grpo_assets, minimal_rows, no_agent_loop, resources, run_messages, verl_profile  # noqa: E402

pytestmark = pytest.mark.timeout(300)  # each test < 20 s on an idle machine (Ray start included)


def test_local_head_and_the_jobs_gpu_preflight_fail_clearly(tmp_path, monkeypatch):
    monkeypatch.setattr(verl_job, "pool_rows", minimal_rows)
    monkeypatch.setattr(verl_job, "agent_loop_overrides", no_agent_loop)
    monkeypatch.delenv("REWARDBOX_VERL_PYTHON", raising=False)  # verl.python: null picks this Python (it has Ray)
    monkeypatch.setattr(verl_job, "verl_python", lambda cfg: "/no/verl/environment/python")
    assert not ray.is_initialized()
    profile = verl_profile(tmp_path, mode=None, preflight=True)  # the real entrypoint: preflight && verl
    (tmp_path / "home").mkdir()
    start = time.monotonic()
    with dg.instance_for_test(temp_dir=str(tmp_path / "home")) as instance:
        result = dg.materialize(grpo_assets(profile), resources=resources(profile, tmp_path, job_address=None),
                                instance=instance, raise_on_error=False)
        messages = run_messages(instance, result.run_id)
    assert not result.success
    assert "rewardbox preflight: the Ray cluster has 0 GPUs, verl needs 1" in messages  # streamed from the job
    assert "no GPU: verl needs 1 GPUs" in messages and "exit code 3" in messages        # in the failure
    assert "No module named 'verl'" not in messages  # verl's command (absent from this Python) never ran
    assert time.monotonic() - start < 200
    assert not ray.is_initialized()  # the resource shut its local head down
