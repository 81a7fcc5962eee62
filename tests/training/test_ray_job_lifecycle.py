"""The Ray job lifecycle with a scripted job client (issue 24, kind 7): lost contact, stop, start timeout.

The same outcomes against a real local Ray job server: tests/resources/test_ray_job_lifecycle.py.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import requests

from rewardbox.training.verl.backend_config import VerlBackendConfig
from rewardbox.training.verl.job import run_verl_training
from rewardbox.training.verl.ray_client import stop_job
from rewardbox.training.verl.ray_job import LOST_CONTACT, START_TIMED_OUT, watch_job

from .test_verl_job import _launch


class ScriptedJobs:
    """Answers status polls from a script: a status, or ``None`` for "the server does not answer"."""

    def __init__(self, script, after_stop=("STOPPED",)):
        self.script, self.after_stop = list(script), list(after_stop)
        self.stopped, self.submitted, self.status_calls = [], [], 0

    def submit_job(self, *, entrypoint, submission_id=None, runtime_env=None, metadata=None):
        self.submitted.append(submission_id)
        return submission_id

    def get_job_status(self, job_id):
        self.status_calls += 1
        source = self.after_stop if self.stopped else self.script
        answer = source.pop(0) if len(source) > 1 else source[0]
        if answer is None:
            raise requests.ConnectionError("Connection refused")
        return answer

    def get_job_logs(self, job_id):
        return "a line\n"

    def get_job_info(self, job_id):
        return SimpleNamespace(message="")

    def stop_job(self, job_id):
        self.stopped.append(job_id)
        return True


def _clock(step_s=1.0):
    ticks = itertools.count()
    return lambda: next(ticks) * step_s


def test_a_blink_shorter_than_the_contact_timeout_is_waited_out_and_never_stops_the_job():
    # the given value: ~5 s without an answer (one clock tick per call, about 1 s each)
    jobs = ScriptedJobs(["RUNNING", *[None] * 5, "RUNNING", "SUCCEEDED"])
    outcome = watch_job(
        jobs,
        "j",
        lambda line: None,
        timeout_s=1000,
        poll_s=0,
        contact_timeout_s=30,
        clock=_clock(),
        sleep=lambda s: None,
    )
    assert outcome.status == "SUCCEEDED" and jobs.stopped == []


@pytest.mark.parametrize("silent_polls", [5, 40])
def test_contact_lost_past_the_timeout_is_its_own_outcome_and_the_job_is_left_running(silent_polls):
    jobs = ScriptedJobs(["RUNNING", *[None] * silent_polls, "RUNNING"])
    outcome = watch_job(
        jobs,
        "j",
        lambda line: None,
        timeout_s=1000,
        poll_s=0,
        contact_timeout_s=3,
        clock=_clock(),
        sleep=lambda s: None,
    )
    assert (
        outcome.status == LOST_CONTACT and jobs.stopped == []
    )  # never stopped: we only lost contact
    assert "did not answer" in outcome.message and "not stopped" in outcome.message
    # re-attach by id: the same job, followed to its end
    jobs.script = ["RUNNING", "SUCCEEDED"]
    again = watch_job(
        jobs, "j", lambda line: None, timeout_s=1000, poll_s=0, clock=_clock(), sleep=lambda s: None
    )
    assert again.status == "SUCCEEDED" and jobs.stopped == []


def test_a_job_stuck_pending_is_stopped_at_its_start_timeout_naming_the_job():
    jobs = ScriptedJobs(["PENDING"])
    outcome = watch_job(
        jobs,
        "rewardbox-grpo-0123456789ab",
        lambda line: None,
        timeout_s=48 * 3600,
        poll_s=0,
        start_timeout_s=10,
        clock=_clock(),
        sleep=lambda s: None,
    )
    assert outcome.status == START_TIMED_OUT and jobs.stopped == ["rewardbox-grpo-0123456789ab"]
    assert (
        "rewardbox-grpo-0123456789ab was still PENDING after the 10 s start limit"
        in outcome.message
    )
    assert outcome.elapsed_s < 30  # not the 48 h job limit
    running = ScriptedJobs(
        ["RUNNING"] * 20 + ["SUCCEEDED"]
    )  # a started job is not bound by the start limit
    assert (
        watch_job(
            running,
            "j",
            lambda line: None,
            timeout_s=1000,
            poll_s=0,
            start_timeout_s=5,
            clock=_clock(),
            sleep=lambda s: None,
        ).status
        == "SUCCEEDED"
    )


def test_stop_returns_only_on_a_terminal_status_or_says_it_timed_out():
    jobs = ScriptedJobs(["RUNNING"], after_stop=["RUNNING", "RUNNING", "RUNNING", "STOPPED"])
    assert stop_job(jobs, "j", wait_s=60, clock=_clock(), sleep=lambda s: None) == "STOPPED"
    assert jobs.status_calls == 4  # it kept asking until the job had ended
    stuck = ScriptedJobs(["RUNNING"], after_stop=["RUNNING"])
    assert (
        stop_job(stuck, "j", wait_s=5, clock=_clock(), sleep=lambda s: None) == "RUNNING after 5 s"
    )
    deaf = ScriptedJobs(["RUNNING"], after_stop=[None])
    assert (
        stop_job(deaf, "j", wait_s=2, clock=_clock(), sleep=lambda s: None)
        == "UNANSWERED after 2 s"
    )


def test_an_interrupt_waits_for_the_stop_before_it_propagates():
    jobs = ScriptedJobs(["RUNNING"], after_stop=["RUNNING", "RUNNING", "STOPPED"])
    calls = []

    def sleep(s):
        calls.append(s)
        if len(calls) == 1:
            raise KeyboardInterrupt  # a terminated run, while watching

    with pytest.raises(KeyboardInterrupt):
        watch_job(jobs, "j", lambda line: None, timeout_s=60, poll_s=1, clock=_clock(), sleep=sleep)
    assert jobs.stopped == ["j"] and jobs.status_calls == 4  # 1 poll, then 3 until STOPPED


def test_the_backend_names_lost_contact_and_start_timeout_and_re_attaches_by_id(tmp_path):
    launch, cfg = _launch(tmp_path, poll_s=0.01, contact_timeout_s=0.05)
    seen = []
    with pytest.raises(
        Exception, match=f"lost contact with Ray job {launch.submission_id}"
    ) as lost:
        run_verl_training(
            ScriptedJobs(["RUNNING", None]), launch, cfg, lambda line: None, on_submit=seen.append
        )
    assert type(lost.value).__name__ == "JobContactLostError" and seen == [launch.submission_id]
    assert f"verl.attach_job_id: {launch.submission_id}" in str(lost.value)
    pending, cfg = _launch(tmp_path, poll_s=0.01, start_timeout_s=0.05)
    with pytest.raises(Exception, match=f"Ray job {pending.submission_id} never started") as never:
        run_verl_training(ScriptedJobs(["PENDING"]), pending, cfg, lambda line: None)
    assert type(never.value).__name__ == "JobStartTimeoutError"
    attached, cfg = _launch(tmp_path, poll_s=0.01, attach_job_id=launch.submission_id)
    assert (
        attached.submission_id == launch.submission_id
        and attached.checkpoint_dir == launch.checkpoint_dir
    )
    actor = attached.checkpoint_dir / "global_step_1" / "actor"
    actor.mkdir(parents=True)
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"w")
    jobs = ScriptedJobs(["RUNNING", "SUCCEEDED"])
    assert run_verl_training(jobs, attached, cfg, lambda line: None).job_id == launch.submission_id
    assert jobs.submitted == []  # re-attached: nothing submitted
    with pytest.raises(ValueError, match="attach_job_id"):
        VerlBackendConfig(attach_job_id="not-a-job")
