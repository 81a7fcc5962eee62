"""A Ray job watched to its end: submit, stream its log lines, stop it on interrupt, bound every wait.

Built on Ray's Job Submission SDK (``ray.job_submission.JobSubmissionClient``,
which needs ``ray[default]``, the ``cluster`` extra). The SDK's HTTP calls have
no timeout of their own, so :func:`job_client` gives every request one, and the
calls that only read (status, logs) are retried with tenacity on connection
errors and timeouts. A job that outlives ``timeout_s`` is stopped and reported;
nothing here waits without a bound.

Cancellation: when the caller is interrupted while watching (a terminated
Dagster run raises its interrupt in the step; Ctrl-C raises
``KeyboardInterrupt``), :func:`watch_job` stops the Ray job before re-raising,
so a cancelled run leaves no training job behind on the cluster.

Logs are read by polling ``get_job_logs`` (the whole log, of which only the new
part is passed on), not by the SDK's websocket tail: a poll has a timeout and a
retry, the websocket has neither.
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


@dataclass
class JobOutcome:
    """How a watched job ended.

    Attributes:
        job_id: the submission id.
        status: ``SUCCEEDED``, ``FAILED``, ``STOPPED``, or ``TIMED_OUT`` (stopped by us after ``timeout_s``).
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


def watch_job(client: JobClient, job_id: str, on_line: Callable[[str], None], *, timeout_s: float,
              poll_s: float = 2.0, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> JobOutcome:
    """Follow ``job_id`` until it ends, calling ``on_line`` with each new log line as it arrives.

    Args:
        client: a :class:`JobClient` (see :func:`job_client`).
        on_line: called once per log line, in order, without the newline.
        timeout_s: the job's time limit from now; past it the job is stopped (status ``TIMED_OUT``).
        poll_s: seconds between polls of status and logs.

    Returns:
        The :class:`JobOutcome`, whatever the status; the caller decides what a failure means.

    Raises:
        BaseException: whatever interrupted the watch (``KeyboardInterrupt``, Dagster's interrupt),
            after the job was asked to stop.
    """
    follower, start, status = _LogFollower(on_line), clock(), ""
    try:
        while True:
            status = _status_name(retrying(client.get_job_status, job_id))
            follower.feed(retrying(client.get_job_logs, job_id) or "", final=status in TERMINAL_STATUSES)
            if status in TERMINAL_STATUSES:
                info = retrying(client.get_job_info, job_id)
                return JobOutcome(job_id, status, getattr(info, "message", "") or "", "\n".join(follower.tail),
                                  clock() - start)
            if clock() - start > timeout_s:
                stop_job(client, job_id)
                return JobOutcome(job_id, "TIMED_OUT", f"stopped after the {timeout_s:g} s limit",
                                  "\n".join(follower.tail), clock() - start)
            sleep(poll_s)
    except BaseException:
        if status not in TERMINAL_STATUSES:
            stop_job(client, job_id)
        raise


def stop_job(client: JobClient, job_id: str) -> bool:
    """Ask Ray to stop ``job_id`` (SIGTERM, then SIGKILL after Ray's grace period).

    Returns:
        True when the request went through; False when it failed (logged by the caller's
        outcome; never raised, since it runs while another error is on its way up).
    """
    try:
        retrying(client.stop_job, job_id, attempts=3, max_delay_s=20.0)
        return True
    except Exception:  # noqa: BLE001 - best effort while unwinding
        return False


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
