"""A Ray job watched to its end: submit, stream its log lines, stop it on interrupt, bound every wait.

Built on Ray's Job Submission SDK (``ray.job_submission.JobSubmissionClient``,
which needs ``ray[default]``, the ``cluster`` extra). The SDK's HTTP calls have
no timeout of their own, so ``job_client`` gives every request one; it, ``submit_job`` and
``stop_job`` are in :mod:`rewardbox.training.verl.ray_client`.

Outcomes of a watch (:class:`JobOutcome`): Ray's ``SUCCEEDED`` / ``FAILED`` / ``STOPPED``, and
ours: ``TIMED_OUT`` (past ``timeout_s``, stopped), ``START_TIMED_OUT`` (PENDING past
``start_timeout_s``, stopped) and ``LOST_CONTACT``. A poll the job server does not answer is
waited out; only ``contact_timeout_s`` without an answer ends the watch, and then the job is
left as it is (never stopped for it): watching again by job id re-attaches. Nothing here waits
without a bound.

Stopping (:func:`stop_job`) waits for a terminal status (or ``stop_timeout_s``), so the job's
own SIGTERM handling (a checkpoint) is over before the caller goes on, e.g. shuts a local Ray
head down.

Cancellation: when the caller is interrupted while watching (a terminated
Dagster run raises its interrupt in the step; Ctrl-C raises
``KeyboardInterrupt``), :func:`watch_job` stops the Ray job, waits for it to end, then
re-raises, so a cancelled run leaves no training job behind on the cluster.

Logs are read by polling ``get_job_logs`` (the whole log, of which only the new
part is passed on), not by the SDK's websocket tail: a poll has a timeout, the
websocket has none.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rewardbox.training.verl.ray_client import (
    TERMINAL_STATUSES,
    JobClient,
    retrying,
    status_name,
    stop_job,
    transient_errors,
)

LOG_TAIL_LINES = 40


class JobFailedError(RuntimeError):
    """The Ray job ended FAILED or STOPPED, or ran past its time limit; ``outcome`` says how."""

    def __init__(self, message: str, outcome: JobOutcome):
        super().__init__(message)
        self.outcome = outcome


class JobStartTimeoutError(JobFailedError):
    """The Ray job stayed PENDING past its start limit and was stopped; the message names the job id."""


class JobContactLostError(JobFailedError):
    """The job server stopped answering: the job's fate is unknown and it was not stopped.

    Not a failure of the job: re-attach by its id (``outcome.job_id``) once the cluster answers.
    """


@dataclass
class JobOutcome:
    """How a watched job ended.

    Attributes:
        job_id: the submission id.
        status: Ray's ``SUCCEEDED``, ``FAILED``, ``STOPPED``; or ours: ``TIMED_OUT`` (stopped after
            ``timeout_s``), ``START_TIMED_OUT`` (stopped while still PENDING after ``start_timeout_s``),
            ``LOST_CONTACT`` (the job server stopped answering; the job was left running).
        message: Ray's status message (for a failure, usually the exit code).
        log_tail: the last ``LOG_TAIL_LINES`` lines of the job's log.
        elapsed_s: seconds from the start of watching to the end.
    """

    job_id: str
    status: str
    message: str
    log_tail: str
    elapsed_s: float

    def failure_text(self) -> str:
        """One message for a failed job: status, Ray's message (its first line: Ray appends its own
        copy of the log, which the tail below already shows), and the log tail."""
        reason = (
            (self.message or "no message").split("\n", 1)[0].split(", last available logs", 1)[0]
        )
        return (
            f"Ray job {self.job_id} ended {self.status}: {reason}\n"
            f"--- last lines of the job's log ---\n{self.log_tail}"
        )


class _LogFollower:
    """Passes on each new complete line of a log that is re-read whole at every poll."""

    def __init__(self, on_line: Callable[[str], None]):
        self.on_line, self.offset, self.partial = on_line, 0, ""
        self.tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)

    def feed(self, text: str, final: bool = False) -> None:
        if len(text) < self.offset:  # the log was truncated or replaced: start again
            self.offset, self.partial = 0, ""
        chunk, self.offset = self.partial + text[self.offset :], len(text)
        *lines, self.partial = chunk.split("\n")
        if final and self.partial:
            lines, self.partial = [*lines, self.partial], ""
        for line in lines:
            line = line.rstrip("\r")
            self.tail.append(line)
            self.on_line(line)


LOST_CONTACT = "LOST_CONTACT"
"""Outcome of a watch whose job server stopped answering for ``contact_timeout_s``: the job was left running."""
START_TIMED_OUT = "START_TIMED_OUT"
"""Outcome of a job still PENDING after ``start_timeout_s`` (stopped by us)."""
TIMED_OUT = "TIMED_OUT"
"""Outcome of a job that ran past ``timeout_s`` (stopped by us)."""


@dataclass
class WatchLimits:
    """Every bound of :func:`watch_job`, seconds.

    Attributes:
        timeout_s: the job's time limit from the start of watching; past it the job is stopped.
        poll_s: seconds between polls of status and logs.
        contact_timeout_s: how long the job server may go unanswered before the watch ends
            ``LOST_CONTACT``; the job is never stopped for it (re-attach by job id).
        start_timeout_s: how long the job may stay PENDING (no resources free, a runtime_env
            still being built); None: only ``timeout_s`` bounds it.
        stop_timeout_s: how long a stop waits for a terminal status.
    """

    timeout_s: float
    poll_s: float = 2.0
    contact_timeout_s: float = 60.0
    start_timeout_s: float | None = None
    stop_timeout_s: float = 60.0


def watch_job(
    client: JobClient,
    job_id: str,
    on_line: Callable[[str], None],
    *,
    timeout_s: float,
    poll_s: float = 2.0,
    contact_timeout_s: float = 60.0,
    start_timeout_s: float | None = None,
    stop_timeout_s: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobOutcome:
    """Follow ``job_id`` until it ends, calling ``on_line`` with each new log line as it arrives.

    A poll the job server does not answer (connection error, request timeout) is not a
    failure: the next polls try again, and the watch goes on where it was once the server
    answers. Only after ``contact_timeout_s`` without an answer does it end, ``LOST_CONTACT``,
    leaving the job running; calling this again with the same ``job_id`` re-attaches.

    Args:
        client: a :class:`JobClient` (see :func:`job_client`).
        on_line: called once per log line, in order, without the newline.
        timeout_s, poll_s, contact_timeout_s, start_timeout_s, stop_timeout_s: see :class:`WatchLimits`.

    Returns:
        The :class:`JobOutcome`, whatever the status (``SUCCEEDED``, ``FAILED``, ``STOPPED``,
        ``TIMED_OUT``, ``START_TIMED_OUT``, ``LOST_CONTACT``); the caller decides what it means.

    Raises:
        BaseException: whatever interrupted the watch (``KeyboardInterrupt``, Dagster's interrupt),
            after the job was stopped (:func:`stop_job`, which waits for a terminal status).
    """
    limits = WatchLimits(timeout_s, poll_s, contact_timeout_s, start_timeout_s, stop_timeout_s)
    watch = _Watch(client, job_id, _LogFollower(on_line), limits, clock, sleep)
    try:
        return watch.run()
    except BaseException:
        if watch.status not in TERMINAL_STATUSES:
            stop_job(client, job_id, wait_s=limits.stop_timeout_s, clock=clock, sleep=sleep)
        raise


class _Watch:
    """The polling loop of :func:`watch_job`; ``status`` is the last status the job server gave."""

    def __init__(
        self,
        client: JobClient,
        job_id: str,
        follower: _LogFollower,
        limits: WatchLimits,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ):
        self.client, self.job_id, self.follower, self.limits = client, job_id, follower, limits
        self.clock, self.sleep = clock, sleep
        self.start, self.status = clock(), ""

    def outcome(self, final: str, message: str) -> JobOutcome:
        return JobOutcome(
            self.job_id, final, message, "\n".join(self.follower.tail), self.clock() - self.start
        )

    def run(self) -> JobOutcome:
        """Poll until the job ends, a limit stops it, or the job server goes unanswered too long."""
        client, job_id, limits, clock = self.client, self.job_id, self.limits, self.clock
        silent_since = None
        while True:
            polled = _poll(client, job_id, self.follower)
            if polled is None:
                silent_since = clock() if silent_since is None else silent_since
                if clock() - silent_since >= limits.contact_timeout_s:
                    return self.outcome(
                        LOST_CONTACT,
                        f"the job server did not answer for {clock() - silent_since:.1f} s "
                        f"(contact timeout {limits.contact_timeout_s:g} s); the job was "
                        "left as it was, not stopped",
                    )
            else:
                self.status, silent_since = polled, None
                if self.status in TERMINAL_STATUSES:
                    info = _quiet(client.get_job_info, job_id)
                    return self.outcome(self.status, getattr(info, "message", "") or "")
                ended = _past_a_limit(
                    client, job_id, self.status, clock() - self.start, limits, clock, self.sleep
                )
                if ended is not None:
                    return self.outcome(*ended)
            self.sleep(limits.poll_s)


def _poll(client: JobClient, job_id: str, follower: _LogFollower) -> str | None:
    """The job's status after passing on its new log lines; None when the job server did not answer."""
    try:
        status = status_name(client.get_job_status(job_id))
        text = client.get_job_logs(job_id) or ""
    except transient_errors():
        return None
    follower.feed(text, final=status in TERMINAL_STATUSES)
    return status


def _past_a_limit(
    client: JobClient,
    job_id: str,
    status: str,
    elapsed_s: float,
    limits: WatchLimits,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> tuple[str, str] | None:
    """(outcome, message) after stopping a job past its start or run limit; None within both."""
    if (
        status == "PENDING"
        and limits.start_timeout_s is not None
        and elapsed_s > limits.start_timeout_s
    ):
        stopped = stop_job(client, job_id, wait_s=limits.stop_timeout_s, clock=clock, sleep=sleep)
        return START_TIMED_OUT, (
            f"Ray job {job_id} was still PENDING after the {limits.start_timeout_s:g} s start "
            f"limit (no resources free, or its runtime_env never finished); stop: {stopped}"
        )
    if elapsed_s > limits.timeout_s:
        stopped = stop_job(client, job_id, wait_s=limits.stop_timeout_s, clock=clock, sleep=sleep)
        return TIMED_OUT, f"stopped after the {limits.timeout_s:g} s limit; stop: {stopped}"
    return None


def _quiet(call: Callable[..., Any], *args: Any) -> Any:
    """``retrying(call, *args)``, or None when the job server does not answer (the status is known already)."""
    try:
        return retrying(call, *args, attempts=3, max_delay_s=20.0)
    except transient_errors():
        return None
