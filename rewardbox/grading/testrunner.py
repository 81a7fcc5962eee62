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
import importlib
import inspect
import io
import json
import linecache
import math
import multiprocessing
import numbers
import os
import subprocess
import sys
import threading
import traceback
from typing import Any, Protocol

from rewardbox import strict_json, threads
from rewardbox.errors import InfrastructureError
from rewardbox.grading.context import TestContext, install_thinkingbox_shim
from rewardbox.grading.judge import Judge, JudgeConfig
from rewardbox.grading.outcome import TEST_FN_BINDING, TestOutcome

WORKER_START_TIMEOUT_S = 120.0


class GradedTask(Protocol):
    """What grading reads of a task (``rewardbox.tasks.schema.Task`` has it): its test code and fixtures."""

    uid: str
    test_code: str
    fixtures: dict[str, dict[str, Any]]


PERMANENT_EXCEPTIONS = (ImportError, SyntaxError)
"""Test-code faults that a retry cannot fix (besides any exception with ``permanent = True``)."""


def system_error(message: str, kind: str = "grader_error", **fields: Any) -> TestOutcome:
    """A test system error outcome (not scored; the caller retries or refills unless ``permanent``).

    ``kind`` is the system error kind (``grader_crash``, ``grader_timeout``,
    ``judge_timeout``...; see :class:`rewardbox.errors.InfrastructureError`).
    """
    return TestOutcome(result=False, reward=0.0, is_system_error=True, message=message, system_error_kind=kind,
                       **fields)


def is_permanent(exc: BaseException) -> bool:
    """True for a fault a retry cannot fix: an import or syntax error in the test code,
    or an error marked ``permanent`` (e.g. the judge called with no endpoint configured)."""
    return isinstance(exc, PERMANENT_EXCEPTIONS) or bool(getattr(exc, "permanent", False))


def _import_dotted(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    if not module:
        raise ImportError(f"fixture type {path!r} must be a dotted path 'package.module.attr'")
    return getattr(importlib.import_module(module), attr)


def _required_params(fn: Any) -> list[inspect.Parameter]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: no injection
        return []
    return [p for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


class _Fixtures:
    """Builds fixtures on demand by name (``x``, ``judge``, then configured ones).

    A configured fixture is ``{type: "pkg.mod.attr", **kwargs}``; its required
    parameters that are not in kwargs are injected by name, recursively. A
    context manager is entered and closed after the test.
    """

    def __init__(self, specs: dict[str, dict[str, Any]], runtime: dict[str, Any], stack: contextlib.ExitStack):
        self.specs, self.built, self.stack = specs, dict(runtime), stack
        self.building: set[str] = set()

    def get(self, name: str) -> Any:
        if name in self.built:
            return self.built[name]
        if name not in self.specs:
            raise LookupError(f"test parameter {name!r} is not x, judge or a configured fixture")
        if name in self.building:
            raise RuntimeError(f"fixture dependency cycle at {name!r}")
        self.building.add(name)
        spec = dict(self.specs[name])
        target = _import_dotted(str(spec.pop("type", "")))
        for param in _required_params(target):
            if param.name not in spec and param.default is param.empty:
                spec[param.name] = self.get(param.name)
        value = target(**spec)
        if hasattr(value, "__enter__") and hasattr(value, "__exit__"):
            value = self.stack.enter_context(value)
        self.built[name] = value
        return value

    def kwargs_for(self, fn: Any) -> dict[str, Any]:
        """Keyword arguments for the test function, by parameter name."""
        sig = inspect.signature(fn)
        kwargs = {}
        for param in sig.parameters.values():
            if param.kind is param.VAR_KEYWORD:
                kwargs.update({k: self.built[k] for k in ("x", "judge")})
            elif param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY):
                if param.name in self.built or param.name in self.specs or param.default is param.empty:
                    kwargs[param.name] = self.get(param.name)
        return kwargs


def _reward_outcome(value: Any) -> TestOutcome:
    if value is None:
        return TestOutcome(result=True, reward=1.0)
    if isinstance(value, numbers.Real) and math.isfinite(float(value)) and 0.0 <= float(value) <= 1.0:
        return TestOutcome(result=True, reward=float(value))
    return system_error(f"test returned {value!r}; a reward must be None or a number in [0, 1]")


def _exception_outcome(exc: BaseException, code: str, filename: str) -> TestOutcome:
    """Failure (AssertionError) or system error, located in the test code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    lineno = frames[-1].lineno if frames else None
    lines = code.splitlines()
    line_content = lines[lineno - 1] if lineno and lineno <= len(lines) else ""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    fields = {"tb": tb, "lineno": lineno, "line_content": line_content}
    if isinstance(exc, AssertionError):
        message = str(exc) or f"assertion failed: {line_content.strip()}"
        return TestOutcome(result=False, reward=0.0, message=message, **fields)
    kind = exc.error_kind if isinstance(exc, InfrastructureError) else "grader_error"
    return system_error(f"{type(exc).__name__}: {exc}", kind, permanent=is_permanent(exc), **fields)


def _jsonable(value: Any) -> Any:
    return json.loads(strict_json.dumps(value, default=repr))


def evaluate_test_code(
    code: str,
    context: dict[str, Any] | TestContext,
    *,
    judge_config: JudgeConfig | dict[str, Any] | None = None,
    fixtures: dict[str, dict[str, Any]] | None = None,
    uid: str = "",
) -> TestOutcome:
    """Run one test **in this process** (the workers call this). Never raises.

    Installs the ``thinkingbox.common`` shim in this process. No timeout and no
    isolation: prefer :class:`TestRunner` for anything but debugging.

    Args:
        code: test code that binds ``__tb_test_fn`` (``Task.test_code``).
        context: a context payload (dict) or a TestContext.
        judge_config: the judge endpoint, or None (calling the judge is then a system error).
        fixtures: ``Task.fixtures``.
        uid: used in the traceback's file name.
    """
    install_thinkingbox_shim()
    ctx = context if isinstance(context, TestContext) else TestContext.from_dict(context)
    judge = Judge(judge_config)
    filename = f"<test {uid or 'code'}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    out = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "__tb_test__"}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), contextlib.ExitStack() as stack:
            exec(compile(code, filename, "exec"), namespace, namespace)  # noqa: S102 - task test code
            fn = namespace.get(TEST_FN_BINDING)
            if not callable(fn):
                raise NameError(f"test code does not bind a function to {TEST_FN_BINDING}")
            kwargs = _Fixtures(fixtures or {}, {"x": ctx, "judge": judge}, stack).kwargs_for(fn)
            outcome = _reward_outcome(fn(**kwargs))
    except (Exception, SystemExit) as exc:
        outcome = _exception_outcome(exc, code, filename)
    finally:
        linecache.cache.pop(filename, None)
    outcome.prints = out.getvalue()
    outcome.metadata = _jsonable({**ctx.metadata, **({"judge_decisions": judge.decisions} if judge.decisions else {})})
    return outcome


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
            [sys.executable, "-c", _BOOTSTRAP, str(child.fileno())], pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL, env=threads.single_thread_env())
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
                return system_error(f"test timed out after {timeout_s:g} s; its worker was killed", "grader_timeout"), False
            outcome = self.conn.recv()
        except (EOFError, OSError) as exc:
            self.stop(kill=True)
            return system_error(f"grading worker died ({exc or type(exc).__name__}, exit code {self.proc.returncode})",
                                "grader_crash"), False
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
            raise ValueError("TestRunner needs max_workers >= 1, timeout_s > 0 and max_tasks_per_worker >= 1")
        self.max_workers = max_workers
        self.timeout_s = float(timeout_s)
        self.max_tasks_per_worker = max_tasks_per_worker
        judge = JudgeConfig.from_value(judge_config)
        self._judge_config = judge.to_dict() if judge else None
        self._slots = threading.BoundedSemaphore(max_workers)
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        from concurrent.futures import ThreadPoolExecutor  # parent-only; keeps worker start-up light

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
        request = {"code": code, "context": payload, "judge_config": self._judge_config,
                   "fixtures": fixtures or {}, "uid": uid}
        with self._slots:
            worker = self._checkout()
            try:
                outcome, healthy = worker.call(request, self.timeout_s)
            except Exception as exc:  # e.g. a payload that cannot be pickled
                worker.stop(kill=True)
                outcome, healthy = system_error(f"could not send the test to a worker: {type(exc).__name__}: {exc}"), False
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

    def __enter__(self) -> "TestRunner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
