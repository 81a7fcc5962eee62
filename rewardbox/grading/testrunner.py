"""Run task test code against an episode's context (docs/thinkingbox.md, "Test code").

The test code (the task's Python with ``__tb_test_fn`` bound) is executed in
a pool of long-lived worker **processes**, so that thousands of gradings do
not each pay a Python start-up, and a crashing or hanging test cannot take the
caller down. Each worker is recycled after ``max_tasks_per_worker`` tests; a
worker that runs past ``timeout_s`` is killed and replaced. Every test runs in
a fresh namespace, but tests that share a worker share its imported modules
(upstream ThinkingBox starts one process per test, about 0.35 s each; here a
test with ~110 KB of effects costs about 1 ms once its worker is up).

Outcomes (``TestOutcome``), as ThinkingBox's ``TestResult``:

=====================================  ==============================================
test function                          outcome
=====================================  ==============================================
returns None                           ``result=True, reward=1.0``
returns a number in [0, 1]             ``result=True, reward=<number>``
returns anything else (1.7, "x")       system error
raises ``AssertionError``              ``result=False, reward=0`` (policy failure)
raises anything else (``KeyError``,    ``is_system_error=True`` (never a reward of 0
``JudgeException``), times out, or     for the policy; the caller retries/refills)
its worker dies
raises ``ImportError`` / ``SyntaxError``  system error with ``permanent=True``: not
or a ``permanent`` error (the judge    retried (a retry cannot fix it), reported
with no endpoint configured)           at once
=====================================  ==============================================

``tb``, ``lineno`` and ``line_content`` come from the deepest frame in the test
code; everything the test prints is in ``prints``; what it writes to
``x.metadata`` and the judge's decisions are in ``metadata``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
import threading
from typing import Any, Protocol

from rewardbox import threads
from rewardbox.grading.context import TestContext, install_thinkingbox_shim
from rewardbox.grading.execute import evaluate_test_code, system_error
from rewardbox.grading.judge import JudgeConfig
from rewardbox.grading.outcome import TestOutcome

WORKER_START_TIMEOUT_S = 120.0


class GradedTask(Protocol):
    """What grading reads of a task (``rewardbox.tasks.schema.Task`` has it): its test code and fixtures."""

    uid: str
    test_code: str
    fixtures: dict[str, dict[str, Any]]


def _worker_main(conn: Any) -> None:
    """Worker process loop: ``None`` stops it, any other message is a request."""
    install_thinkingbox_shim()
    conn.send("ready")
    while True:
        try:
            request = conn.recv()
        except EOFError:  # the parent went away
            break
        if request is None:
            break
        outcome = evaluate_test_code(**request)
        outcome.metadata["worker_pid"] = os.getpid()
        conn.send(outcome)
    conn.close()


# The worker's bootstrap: read the parent's sys.path first (the repository may
# not be installed), then import the worker loop. Launched with subprocess, not
# multiprocessing's "spawn", which would re-run the caller's __main__ module.
_BOOTSTRAP = (
    "import sys; from multiprocessing.connection import Connection; "
    "conn = Connection(int(sys.argv[1])); sys.path[:] = conn.recv(); "
    "from rewardbox.grading.testrunner import _worker_main; _worker_main(conn)"
)


class _Worker:
    """One worker process and the parent's end of its socket pair."""

    def __init__(self) -> None:
        self.conn, child = multiprocessing.Pipe()
        self.proc = subprocess.Popen(  # 1 thread, passive waits (rewardbox.threads)
            [sys.executable, "-c", _BOOTSTRAP, str(child.fileno())],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            env=threads.single_thread_env(),
        )
        child.close()
        self.conn.send(list(sys.path))
        self.tests_run = 0
        self.ready = False

    def call(self, request: dict[str, Any], timeout_s: float) -> tuple[TestOutcome, bool]:
        """Send one request; returns ``(outcome, worker still usable)``."""
        try:
            if not self.ready:
                if not self.conn.poll(WORKER_START_TIMEOUT_S) or self.conn.recv() != "ready":
                    raise EOFError("did not start")
                self.ready = True
            self.conn.send(request)
            if not self.conn.poll(timeout_s):
                self.stop(kill=True)
                return system_error(
                    f"test timed out after {timeout_s:g} s; its worker was killed", "grader_timeout"
                ), False
            outcome = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.stop(kill=True)
            return system_error(
                f"grading worker died ({exc or type(exc).__name__}, exit code {self.proc.returncode})",
                "grader_crash",
            ), False
        self.tests_run += 1
        return outcome, True

    def stop(self, kill: bool = False) -> None:
        """Ask the worker to exit (or kill it); always reaps the process."""
        if not kill and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.conn.send(None)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.conn.close()


class TestRunner:
    """A pool of long-lived grading worker processes.

    Thread-safe; ``run`` is the asyncio entry point, ``run_sync`` the blocking
    one. Workers start lazily (at most ``max_workers``), each serves tests one
    at a time, and is replaced after ``max_tasks_per_worker`` tests, a timeout
    or a crash. Use as a context manager or call :meth:`close`.

    Args:
        max_workers: concurrent tests (worker processes), >= 1.
        timeout_s: wall-clock limit per test, not counting worker start-up.
        judge_config: the judge endpoint (JudgeConfig or its dict), or None.
        max_tasks_per_worker: recycle a worker after this many tests.
    """

    __test__ = False  # not a pytest class

    def __init__(
        self,
        max_workers: int = 2,
        timeout_s: float = 30.0,
        judge_config: JudgeConfig | dict[str, Any] | None = None,
        *,
        max_tasks_per_worker: int = 1000,
    ):
        if max_workers < 1 or timeout_s <= 0 or max_tasks_per_worker < 1:
            raise ValueError(
                "TestRunner needs max_workers >= 1, timeout_s > 0 and max_tasks_per_worker >= 1"
            )
        self.max_workers = max_workers
        self.timeout_s = float(timeout_s)
        self.max_tasks_per_worker = max_tasks_per_worker
        judge = JudgeConfig.from_value(judge_config)
        self._judge_config = judge.to_dict() if judge else None
        self._slots = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        from concurrent.futures import (
            ThreadPoolExecutor,  # parent-only; keeps worker start-up light
        )

        self._threads = ThreadPoolExecutor(max_workers, thread_name_prefix="rewardbox-testrunner")
        self._closed = False
        self.workers_started = 0

    def run_sync(self, task: GradedTask, context: dict[str, Any] | TestContext) -> TestOutcome:
        """Grade one episode of ``task`` (blocking). Never raises for test faults."""
        return self.run_code_sync(task.test_code, context, fixtures=task.fixtures, uid=task.uid)

    async def run(self, task: GradedTask, context: dict[str, Any] | TestContext) -> TestOutcome:
        """Grade one episode of ``task`` without blocking the event loop."""
        import asyncio  # parent-only; keeps worker start-up light

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self.run_sync, task, context)

    def run_code_sync(
        self,
        code: str,
        context: dict[str, Any] | TestContext,
        *,
        fixtures: dict[str, dict[str, Any]] | None = None,
        uid: str = "",
    ) -> TestOutcome:
        """Run test ``code`` in a worker (see the module docstring for outcomes).

        Raises:
            RuntimeError: the runner is closed (a caller bug, not a test outcome).
        """
        payload = context.to_dict() if isinstance(context, TestContext) else context
        request = {
            "code": code,
            "context": payload,
            "judge_config": self._judge_config,
            "fixtures": fixtures or {},
            "uid": uid,
        }
        with self._slots:
            worker = self._checkout()
            try:
                outcome, healthy = worker.call(request, self.timeout_s)
            except Exception as exc:  # e.g. a payload that cannot be pickled
                worker.stop(kill=True)
                outcome, healthy = (
                    system_error(
                        f"could not send the test to a worker: {type(exc).__name__}: {exc}"
                    ),
                    False,
                )
            self._checkin(worker, healthy)
        return outcome

    def _checkout(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise RuntimeError("TestRunner is closed")
            if self._idle:
                return self._idle.pop()
            self.workers_started += 1
        return _Worker()

    def _checkin(self, worker: _Worker, healthy: bool) -> None:
        if not healthy:
            return  # already stopped
        with self._lock:
            if not self._closed and worker.tests_run < self.max_tasks_per_worker:
                self._idle.append(worker)
                return
        worker.stop()

    def close(self) -> None:
        """Stop every idle worker; busy ones stop when their test ends. Idempotent."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()
        self._threads.shutdown(wait=False)

    def __enter__(self) -> TestRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
