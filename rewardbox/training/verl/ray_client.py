"""The Ray Job Submission client side of a watched job: a client whose every request times out,
retries of transient errors, idempotent submission and a stop that waits for the job to end.

Built on Ray's Job Submission SDK (``ray.job_submission.JobSubmissionClient``, which needs
``ray[default]``, the ``cluster`` extra); :mod:`rewardbox.training.verl.ray_job` watches a job with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential,
)

TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


class JobClient(Protocol):
    """The part of Ray's ``JobSubmissionClient`` that is used (a fake implements it in unit tests)."""

    def submit_job(
        self,
        *,
        entrypoint: str,
        submission_id: str | None = None,
        runtime_env: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> str: ...
    def get_job_status(self, job_id: str) -> Any: ...
    def get_job_info(self, job_id: str) -> Any: ...
    def get_job_logs(self, job_id: str) -> str: ...
    def stop_job(self, job_id: str) -> bool: ...


def transient_errors() -> tuple[type[BaseException], ...]:
    import requests

    return (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)


def retrying(
    call: Callable[..., Any], *args: Any, attempts: int | None = 4, max_delay_s: float = 60.0
) -> Any:
    """``call(*args)`` retried on connection errors and timeouts (exponential wait, bounded in count and time).

    Raises:
        the last transient error after the attempts, or any other error at once (an HTTP
        error answer such as "no such job" is not retried).
    """
    stop = (
        stop_after_delay(max_delay_s)
        if attempts is None
        else stop_after_attempt(attempts) | stop_after_delay(max_delay_s)
    )
    for attempt in Retrying(
        stop=stop,
        wait=wait_exponential(multiplier=0.5, max=8.0),
        retry=retry_if_exception_type(transient_errors()),
        reraise=True,
    ):
        with attempt:
            return call(*args)
    raise AssertionError("unreachable")  # pragma: no cover


def job_client(
    address: str, request_timeout_s: float = 30.0, connect_timeout_s: float = 60.0
) -> JobClient:
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
        raise RuntimeError(
            "Ray job submission needs ray[default]: pip install -e '.[cluster]'"
        ) from exc

    class _TimedClient(JobSubmissionClient):
        def _do_request(self, method, endpoint, **kwargs):  # the SDK's one HTTP entry point
            kwargs.setdefault("timeout", request_timeout_s)
            return super()._do_request(method, endpoint, **kwargs)

    return retrying(_TimedClient, address, attempts=None, max_delay_s=connect_timeout_s)


def status_name(status: Any) -> str:
    return str(getattr(status, "value", status))


def stop_job(
    client: JobClient,
    job_id: str,
    *,
    wait_s: float = 60.0,
    poll_s: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
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
            status = status_name(client.get_job_status(job_id))
        except Exception:  # noqa: BLE001 - a status we cannot read is reported, not raised
            status = "UNANSWERED"
        if status in TERMINAL_STATUSES:
            return status
        if clock() >= deadline:
            return f"{status} after {wait_s:g} s"
        sleep(poll_s)


class _AgentNotReady(ConnectionError):
    """The job server is up but its node's agent is not yet (a head that just started)."""


def submit_job(
    client: JobClient,
    entrypoint: str,
    *,
    submission_id: str,
    runtime_env: dict[str, Any] | None = None,
    metadata: dict[str, str] | None = None,
    ready_timeout_s: float = 60.0,
) -> str:
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
            return client.submit_job(
                entrypoint=entrypoint,
                submission_id=submission_id,
                runtime_env=runtime_env or None,
                metadata=metadata,
            )
        except RuntimeError as exc:
            if attempts[0] > 1 and "already exists" in str(exc):
                return submission_id
            if "No available agent" in str(exc):
                raise _AgentNotReady(str(exc)) from exc
            raise

    return retrying(attempt, attempts=None, max_delay_s=ready_timeout_s)
