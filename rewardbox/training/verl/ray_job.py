"""A Ray job watched to its end: submit, stream its log lines, stop it on interrupt, bound every wait.

Built on Ray's Job Submission SDK (``ray.job_submission.JobSubmissionClient``,
which needs ``ray[default]``, the ``cluster`` extra). The SDK's HTTP calls have
no timeout of their own, so :func:`job_client` gives every request one.

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
from typing import Any, Protocol

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
LOG_TAIL_LINES = 40


class JobClient(Protocol):
    """The part of Ray's ``JobSubmissionClient`` that is used (a fake implements it in unit tests)."""

    def submit_job(self, *, entrypoint: str, submission_id: str | None = None,
                   runtime_env: dict[str, Any] | None = None, metadata: dict[str, str] | None = None) -> str: ...
    def get_job_status(self, job_id: str) -> Any: ...
    def get_job_info(self, job_id: str) -> Any: ...
    def get_job_logs(self, job_id: str) -> str: ...
    def stop_job(self, job_id: str) -> bool: ...


class JobFailedError(RuntimeError):
    """The Ray job ended FAILED or STOPPED, or ran past its time limit; ``outcome`` says how."""

    def __init__(self, message: str, outcome: "JobOutcome"):
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
        reason = (self.message or "no message").split("\n", 1)[0].split(", last available logs", 1)[0]
        return (f"Ray job {self.job_id} ended {self.status}: {reason}\n"
                f"--- last lines of the job's log ---\n{self.log_tail}")


def _transient_errors() -> tuple[type[BaseException], ...]:
    import requests

    return (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)


def retrying(call: Callable[..., Any], *args: Any, attempts: int | None = 4, max_delay_s: float = 60.0) -> Any:
    """``call(*args)`` retried on connection errors and timeouts (exponential wait, bounded in count and time).

    Raises:
        the last transient error after the attempts, or any other error at once (an HTTP
        error answer such as "no such job" is not retried).
    """
    stop = stop_after_delay(max_delay_s) if attempts is None else stop_after_attempt(attempts) | stop_after_delay(max_delay_s)
    for attempt in Retrying(stop=stop,
                            wait=wait_exponential(multiplier=0.5, max=8.0),
                            retry=retry_if_exception_type(_transient_errors()), reraise=True):
        with attempt:
            return call(*args)
    raise AssertionError("unreachable")  # pragma: no cover


def job_client(address: str, request_timeout_s: float = 30.0, connect_timeout_s: float = 60.0) -> JobClient:
    """A ``JobSubmissionClient`` for ``address`` whose every HTTP request times out after ``request_timeout_s``.

    Args:
        address: the cluster's dashboard (job server), e.g. ``http://head:8265``.
        request_timeout_s: limit of one HTTP request, seconds.
        connect_timeout_s: how long to retry the first connection (a head that is still starting).

    Raises:
        ConnectionError: the job server did not answer within ``connect_timeout_s``.
        RuntimeError: ``ray[default]`` is not installed.
    """
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:  # pragma: no cover - ray is in the cluster extra
        raise RuntimeError("Ray job submission needs ray[default]: pip install -e '.[cluster]'") from exc

    class _TimedClient(JobSubmissionClient):
        def _do_request(self, method, endpoint, **kwargs):  # the SDK's one HTTP entry point
            kwargs.setdefault("timeout", request_timeout_s)
            return super()._do_request(method, endpoint, **kwargs)

    return retrying(_TimedClient, address, attempts=None, max_delay_s=connect_timeout_s)


def _status_name(status: Any) -> str:
    return str(getattr(status, "value", status))


class _LogFollower:
    """Passes on each new complete line of a log that is re-read whole at every poll."""

    def __init__(self, on_line: Callable[[str], None]):
        self.on_line, self.offset, self.partial = on_line, 0, ""
        self.tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)

    def feed(self, text: str, final: bool = False) -> None:
        if len(text) < self.offset:  # the log was truncated or replaced: start again
            self.offset, self.partial = 0, ""
        chunk, self.offset = self.partial + text[self.offset:], len(text)
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


def watch_job(client: JobClient, job_id: str, on_line: Callable[[str], None], *, timeout_s: float,
              poll_s: float = 2.0, contact_timeout_s: float = 60.0, start_timeout_s: float | None = None,
              stop_timeout_s: float = 60.0, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> JobOutcome:
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
    follower, start, status, silent_since = _LogFollower(on_line), clock(), "", None

    def outcome(final: str, message: str) -> JobOutcome:
        return JobOutcome(job_id, final, message, "\n".join(follower.tail), clock() - start)

    try:
        while True:
            polled = _poll(client, job_id, follower)
            if polled is None:
                silent_since = clock() if silent_since is None else silent_since
                if clock() - silent_since >= limits.contact_timeout_s:
                    return outcome(LOST_CONTACT, f"the job server did not answer for {clock() - silent_since:.1f} s "
                                                 f"(contact timeout {limits.contact_timeout_s:g} s); the job was "
                                                 "left as it was, not stopped")
            else:
                status, silent_since = polled, None
                if status in TERMINAL_STATUSES:
                    info = _quiet(client.get_job_info, job_id)
                    return outcome(status, getattr(info, "message", "") or "")
                ended = _past_a_limit(client, job_id, status, clock() - start, limits, clock, sleep)
                if ended is not None:
                    return outcome(*ended)
            sleep(limits.poll_s)
    except BaseException:
        if status not in TERMINAL_STATUSES:
            stop_job(client, job_id, wait_s=limits.stop_timeout_s, clock=clock, sleep=sleep)
        raise


def _poll(client: JobClient, job_id: str, follower: _LogFollower) -> str | None:
    """The job's status after passing on its new log lines; None when the job server did not answer."""
    try:
        status = _status_name(client.get_job_status(job_id))
        text = client.get_job_logs(job_id) or ""
    except _transient_errors():
        return None
    follower.feed(text, final=status in TERMINAL_STATUSES)
    return status


def _past_a_limit(client: JobClient, job_id: str, status: str, elapsed_s: float, limits: WatchLimits,
                  clock: Callable[[], float], sleep: Callable[[float], None]) -> tuple[str, str] | None:
    """(outcome, message) after stopping a job past its start or run limit; None within both."""
    if status == "PENDING" and limits.start_timeout_s is not None and elapsed_s > limits.start_timeout_s:
        stopped = stop_job(client, job_id, wait_s=limits.stop_timeout_s, clock=clock, sleep=sleep)
        return START_TIMED_OUT, (f"Ray job {job_id} was still PENDING after the {limits.start_timeout_s:g} s start "
                                 f"limit (no resources free, or its runtime_env never finished); stop: {stopped}")
    if elapsed_s > limits.timeout_s:
        stopped = stop_job(client, job_id, wait_s=limits.stop_timeout_s, clock=clock, sleep=sleep)
        return TIMED_OUT, f"stopped after the {limits.timeout_s:g} s limit; stop: {stopped}"
    return None


def _quiet(call: Callable[..., Any], *args: Any) -> Any:
    """``retrying(call, *args)``, or None when the job server does not answer (the status is known already)."""
    try:
        return retrying(call, *args, attempts=3, max_delay_s=20.0)
    except _transient_errors():
        return None


def stop_job(client: JobClient, job_id: str, *, wait_s: float = 60.0, poll_s: float = 0.5,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """Ask Ray to stop ``job_id`` (SIGTERM, then SIGKILL after Ray's grace period) and wait for it to end.

    Returns only when the job has a terminal status, or after ``wait_s``: a job that saves a
    checkpoint on SIGTERM gets to finish it before the caller goes on (and, on a local head,
    shuts Ray down).

    Returns:
        The job's terminal status (``STOPPED``, or ``SUCCEEDED`` / ``FAILED`` if it ended first);
        else ``"<status> after <wait_s> s"`` (no terminal status within ``wait_s``; ``UNANSWERED``
        when the job server did not answer), or ``"stop request failed: <error>"``. Never raises,
        since it runs while another error is on its way up.
    """
    try:
        retrying(client.stop_job, job_id, attempts=3, max_delay_s=20.0)
    except Exception as exc:  # noqa: BLE001 - best effort while unwinding
        return f"stop request failed: {type(exc).__name__}: {exc}"
    deadline = clock() + wait_s
    while True:
        try:
            status = _status_name(client.get_job_status(job_id))
        except Exception:  # noqa: BLE001 - a status we cannot read is reported, not raised
            status = "UNANSWERED"
        if status in TERMINAL_STATUSES:
            return status
        if clock() >= deadline:
            return f"{status} after {wait_s:g} s"
        sleep(poll_s)


class _AgentNotReady(ConnectionError):
    """The job server is up but its node's agent is not yet (a head that just started)."""


def submit_job(client: JobClient, entrypoint: str, *, submission_id: str, runtime_env: dict[str, Any] | None = None,
               metadata: dict[str, str] | None = None, ready_timeout_s: float = 60.0) -> str:
    """Submit ``entrypoint`` (a shell command run on the head node) as a Ray job; returns its id.

    Submission is idempotent by ``submission_id``: it is retried on connection errors, timeouts
    and Ray's "No available agent to submit job" (a head whose agent is still starting), for at
    most ``ready_timeout_s``; a retry that finds the job already created (the first attempt got
    through but its answer was lost) returns the id instead of starting the job twice.

    Raises:
        RuntimeError: Ray refused the job (bad runtime_env, ...), or the last transient error.
    """
    attempts = [0]

    def attempt() -> str:
        attempts[0] += 1
        try:
            return client.submit_job(entrypoint=entrypoint, submission_id=submission_id,
                                     runtime_env=runtime_env or None, metadata=metadata)
        except RuntimeError as exc:
            if attempts[0] > 1 and "already exists" in str(exc):
                return submission_id
            if "No available agent" in str(exc):
                raise _AgentNotReady(str(exc)) from exc
            raise

    return retrying(attempt, attempts=None, max_delay_s=ready_timeout_s)
