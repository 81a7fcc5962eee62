"""Shared set-up of the tests that run ``grpo.backend: verl`` on a real local Ray cluster."""

from __future__ import annotations

import sys
from pathlib import Path

import dagster as dg
import yaml

from rewardbox.config.profile import PROFILE_DIR, load_profile
from rewardbox.tasks.sources import load_candidates

FAKE_VERL = Path(__file__).resolve().parents[1] / "fixtures" / "fake_verl"


def minimal_rows(tasks):
    """verl dataset rows, minimal (the agent loop's ``pool_to_verl_rows`` is not under test here)."""
    return [
        {
            "data_source": "rewardbox",
            "agent_name": "rewardbox",
            "prompt": [{"role": "user", "content": t.uid}],
            "extra_info": {"uid": t.uid},
        }
        for t in tasks
    ]


def no_agent_loop(out_dir):
    """No agent-loop overrides (the fake verl ignores them; the agent loop is tested on its own)."""
    return {}


def patch_verl_hooks(module) -> None:
    """Point ``verl_job``'s hydration and agent-loop hooks at the minimal test ones."""
    module.pool_rows, module.agent_loop_overrides = minimal_rows, no_agent_loop


def verl_profile(tmp_path, *, mode: str | None, preflight: bool, steps: int = 2) -> Path:
    """The test profile with ``grpo.backend: verl``; ``mode`` runs the fake verl, None the job's real command
    with the default Python (``verl.python: null``)."""
    data = yaml.safe_load((PROFILE_DIR / "test.yaml").read_text())
    data["grpo"] = {**data["grpo"], "backend": "verl", "steps": steps}
    verl = {
        "python": sys.executable if mode else None,
        "preflight_gpus": preflight,
        "poll_s": 0.5,
        "job_timeout_s": 120,
        "launch": {"n_gpus_per_node": 1},
    }
    if mode is not None:
        verl["runtime_env"] = {
            "env_vars": {
                "PYTHONPATH": str(FAKE_VERL),
                "FAKE_VERL_MODE": mode,
                "FAKE_VERL_PID_FILE": str(tmp_path / "fake_verl.pid"),
            }
        }
    data["verl"] = verl
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def grpo_assets(profile_path: Path):
    """``grpo_checkpoint`` with its inputs stood in for: the test profile's candidates, a base path, no probe rows."""
    from assets.training import grpo_checkpoint

    tasks = load_candidates(load_profile(profile_path).tasks).tasks[:2]

    @dg.asset(name="training_pool")
    def training_pool():
        return tasks

    @dg.asset(name="base_checkpoint")
    def base_checkpoint():
        return "/models/base"  # verl (faked) never reads it

    @dg.asset(name="probe_results")
    def probe_results():
        import polars as pl

        return pl.DataFrame(
            schema={
                "uid": pl.Utf8,
                "trial": pl.Int64,
                "passed": pl.Boolean,
                "system_error": pl.Utf8,
            }
        )

    return [training_pool, base_checkpoint, probe_results, grpo_checkpoint]


def resources(profile_path: Path, tmp_path: Path, job_address: str | None):
    from resources.ray_cluster import RayClusterResource
    from resources.rewardbox import RewardboxResource

    return {
        "rewardbox": RewardboxResource(profile=str(profile_path), data_dir=str(tmp_path)),
        "ray_cluster": RayClusterResource(job_address=job_address),
        "io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path / "objects")),
    }


def run_messages(instance, run_id: str) -> str:
    """Every log message and error text of a run's event log, one string."""
    texts = []
    for record in instance.all_logs(run_id):
        texts.append(record.user_message or "")
        event = record.dagster_event
        data = getattr(event, "event_specific_data", None) if event else None
        error = getattr(data, "error", None)
        if error is not None:
            texts.append(error.to_string())
        failure = getattr(data, "user_failure_data", None)
        if failure is not None:
            texts.append(failure.description or "")
    return "\n".join(texts)
