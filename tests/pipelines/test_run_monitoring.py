"""A SIGKILLed run is marked failed and the queue moves on, with the shipped ``dagster.yaml``.

A real ``dagster job execute`` starts a run over a temporary ``DAGSTER_HOME`` holding the shipped
instance config (one run at a time), and is SIGKILLed mid-run, as a killed ``make demo`` would be:
the run stays "Started". A second run is queued with ``dagster job launch``. A real daemon then
runs: its run monitoring (the shipped ``run_monitoring`` settings, with
``resources.run_launcher.LocalProcessRunLauncher``'s health check) marks the dead run failed, and
the queue launches the queued run, which succeeds. Bounded: the waits give up after 240 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster import DagsterRunStatus, RunsFilter

from resources.run_launcher import LocalProcessRunLauncher

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.timeout(420)


def _wait(what: str, condition, timeout_s: float = 240.0, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")


def _runs(instance: dg.DagsterInstance, job: str):
    return instance.get_runs(filters=RunsFilter(job_name=job))


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")  # the shipped config, unchanged
    (tmp_path / "workspace.yaml").write_text(
        f"load_from:\n  - python_module:\n      module_name: tests.fixtures.monitored_jobs\n"
        f"      working_directory: {REPO}\n"
    )
    return home


def test_the_shipped_instance_config_monitors_runs_with_the_pid_checking_launcher(home):
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert isinstance(instance.run_launcher, LocalProcessRunLauncher)
        assert instance.run_monitoring_enabled and instance.run_monitoring_start_timeout_seconds > 0
        assert (
            instance.run_monitoring_cancel_timeout_seconds > 0
            and instance.run_monitoring_poll_interval_seconds <= 10
        )


def test_a_sigkilled_run_is_marked_failed_and_a_queued_run_launches(home, tmp_path):
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "PYTHONPATH": str(REPO),
        "REWARDBOX_TEST_PID_FILE": str(tmp_path / "pid"),
    }
    workspace = str(tmp_path / "workspace.yaml")
    killed = subprocess.Popen(
        [BIN / "dagster", "job", "execute", "-m", "tests.fixtures.monitored_jobs", "-j", "sleeper"],
        env=env,
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    daemon = None
    try:
        _wait("the sleeper run's op", lambda: (tmp_path / "pid").exists())
        os.killpg(killed.pid, signal.SIGKILL)  # the run process and everything it started
        killed.wait(30)
        with dg.DagsterInstance.from_config(str(home)) as instance:
            (dead,) = _runs(instance, "sleeper")
            assert (
                dead.status == DagsterRunStatus.STARTED
            )  # what a killed run leaves: "Started" for ever
            subprocess.run(
                [BIN / "dagster", "job", "launch", "-w", workspace, "-j", "quick"],
                env=env,
                cwd=REPO,
                check=True,
                capture_output=True,
                timeout=180,
            )
            (queued,) = _runs(instance, "quick")
            assert queued.status == DagsterRunStatus.QUEUED
            daemon = subprocess.Popen(
                [BIN / "dagster-daemon", "run", "-w", workspace],
                env=env,
                cwd=REPO,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            failed = _wait(
                "the dead run marked failed",
                lambda: next(
                    (r for r in _runs(instance, "sleeper") if r.status == DagsterRunStatus.FAILURE),
                    None,
                ),
            )
            done = _wait(
                "the queued run to succeed",
                lambda: next((r for r in _runs(instance, "quick") if r.is_finished), None),
            )
            assert done.status == DagsterRunStatus.SUCCESS
            failure = instance.get_run_record_by_id(failed.run_id)
            launched = instance.get_run_record_by_id(done.run_id)
            assert (
                launched.start_time >= failure.end_time
            )  # the queue moved only once the dead run was failed
            messages = [e.message for e in instance.all_logs(failed.run_id)]
            assert any("is gone" in (m or "") and "Marking run" in (m or "") for m in messages), (
                messages[-3:]
            )
    finally:
        for process in (killed, daemon):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(60)
