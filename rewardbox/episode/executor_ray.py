"""The Ray episode executor: episodes as calls on Ray actors, each with its own runner and sandboxes.

``ExecutorConfig.workers`` async actors (:class:`EpisodeWorker`) each hold one
copy of the policy, the user simulator, a grading pool and the sandbox factory,
built in the worker from the same picklable runner factory the local executor
uses. The driver admits at most ``concurrency`` keys at once (an asyncio
semaphore: backpressure) and sends each to the least-loaded worker, so the
sandboxes open across the whole cluster never exceed the bound; a gauge actor
counts them.

Ray is started embedded (``ray.init(num_cpus=...)``) unless a connection
exists already (the Dagster resource made it) or ``address`` names a cluster.
A worker that dies (node lost, out of memory) makes its in-flight keys system
errors, retried by the campaign's repair pass, never rewards of 0. Cancelling
the caller (a terminated Dagster run) cancels every outstanding Ray call.
"""

from __future__ import annotations

import asyncio
import math
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

from rewardbox.episode.config import ExecutorConfig
from rewardbox.episode.executor import (GaugedSandboxFactory, OnResult, RunnerFactory, SandboxGauge, run_pairs)
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.termination import TerminationReason
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.episode.trial import run_trial
from rewardbox.policy.base import Policy
from rewardbox.tasks.schema import Task

CLOSE_TIMEOUT_S = 30.0
_WORKER_LOST = (RayActorError, ActorDiedError, ActorUnavailableError)


class RemoteGauge:
    """A ``SandboxGauge`` actor seen through the async gauge interface (calls are awaited)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    async def opened(self) -> None:
        await self._handle.opened.remote()

    async def closed(self) -> None:
        await self._handle.closed.remote()


class _GaugeState(SandboxGauge):
    async def peak_seen(self) -> int:
        return self.peak


class _Worker:
    """One Ray worker's runner: built on the first episode, in the worker's event loop."""

    def __init__(self, runner_factory: RunnerFactory, policy: Policy, gauge: Any) -> None:
        self._factory, self._policy, self._gauge = runner_factory, policy, gauge
        self._stack: AsyncExitStack | None = None
        self._runner: EpisodeRunner | None = None
        self._lock: asyncio.Lock | None = None

    async def _ensure_runner(self) -> EpisodeRunner:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self._runner is None:
                stack = AsyncExitStack()
                runner = await stack.enter_async_context(self._factory(self._policy))
                runner.sandbox_factory = GaugedSandboxFactory(runner.sandbox_factory, RemoteGauge(self._gauge))
                self._stack, self._runner = stack, runner
        return self._runner

    async def run_one(self, task: Task, trial: int) -> EpisodeResult:
        """``run_trial`` of (task, trial) on this worker's runner."""
        return await run_trial(await self._ensure_runner(), task, trial)

    async def close(self) -> None:
        """Close the runner (grading pool) and the policy copy."""
        try:
            if self._stack is not None:
                await self._stack.aclose()
        finally:
            await self._policy.aclose()


EpisodeWorker = ray.remote(_Worker)
GaugeActor = ray.remote(num_cpus=0)(_GaugeState)


def check_shippable(policy: Policy) -> None:
    """Refuse a policy that cannot run in a Ray worker process.

    Raises:
        ValueError: the local model policy (weights live in this process; its
            batching needs every episode in one event loop), or any policy that
            cannot be pickled (the message names it and the cause).
    """
    local = sys.modules.get("rewardbox.policy.local")
    if local is not None and isinstance(policy, local.LocalPolicy):
        raise ValueError(
            "executor.kind 'ray' cannot run the local model policy (policy.kind 'local'): its weights and its "
            "batching live in this process. Use executor.kind 'local' for it, or serve the model behind an "
            "OpenAI-compatible endpoint (policy.kind 'endpoint', e.g. vLLM) to run episodes on Ray.")
    try:
        ray.cloudpickle.dumps(policy)
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing here
        raise ValueError(f"executor.kind 'ray': the policy {type(policy).__name__} cannot be sent to Ray workers "
                         f"({type(exc).__name__}: {exc}); use executor.kind 'local' for it") from exc


def worker_lost_result(task: Task, trial: int, exc: BaseException) -> EpisodeResult:
    """The system-error result of a key whose Ray worker died (retried by repair, never scored)."""
    return EpisodeResult(uid=task.uid, trial=trial, termination_reason=TerminationReason.SYSTEM_ERROR,
                         system_error=f"ray_worker: {type(exc).__name__}: {exc}")


class _RaySession:
    """Bounded dispatch of keys to worker actors (least in-flight first)."""

    def __init__(self, workers: list[Any], concurrency: int) -> None:
        self.workers = workers
        self._slots = asyncio.Semaphore(concurrency)
        self._in_flight = [0] * len(workers)
        self.outstanding: set[Any] = set()
        self.cancelled = 0

    async def run_one(self, task: Task, trial: int) -> EpisodeResult:
        async with self._slots:
            index = min(range(len(self.workers)), key=self._in_flight.__getitem__)
            self._in_flight[index] += 1
            ref = self.workers[index].run_one.remote(task, trial)
            self.outstanding.add(ref)
            try:
                return await ref
            except _WORKER_LOST as exc:
                return worker_lost_result(task, trial, exc)
            except RayTaskError as exc:  # a bug in the episode code: the same error as locally
                raise exc.as_instanceof_cause() from None
            except asyncio.CancelledError:
                self.cancel([ref])
                raise
            finally:
                self._in_flight[index] -= 1
                self.outstanding.discard(ref)

    async def run(self, pairs: Sequence[tuple[Task, int]], on_result: OnResult | None = None) -> list[EpisodeResult]:
        return await run_pairs(self.run_one, pairs, on_result)

    def cancel(self, refs: Sequence[Any] | None = None) -> None:
        """Cancel outstanding calls (all when ``refs`` is None); counts them in ``cancelled``."""
        for ref in list(self.outstanding if refs is None else refs):
            ray.cancel(ref)
            self.cancelled += 1
            self.outstanding.discard(ref)


class RayExecutor:
    """Episodes on Ray actors under one bound on open sandboxes.

    Args:
        config: ``ExecutorConfig`` (address, num_cpus, workers, runtime_env).
        concurrency: episodes (sandboxes) open at once across every worker.

    Attributes:
        cancelled: Ray calls cancelled because the caller was cancelled.
    """

    kind = "ray"

    def __init__(self, config: ExecutorConfig, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.config, self.concurrency = config, concurrency
        self.cancelled = 0
        self._owns_ray = False
        self._gauge: Any = None

    def connect(self) -> None:
        """``ray.init`` unless Ray is connected already (embedded, or ``address`` when set)."""
        if not ray.is_initialized():
            options: dict[str, Any] = {"runtime_env": self.config.runtime_env or None, "log_to_driver": False}
            if self.config.address:
                ray.init(address=self.config.address, **options)
            else:
                ray.init(num_cpus=self.config.num_cpus, include_dashboard=False, **options)
            self._owns_ray = True
        if self._gauge is None:
            self._gauge = GaugeActor.remote()

    @property
    def gauge_peak(self) -> int:
        """Most sandboxes open at once so far, across every worker."""
        return ray.get(self._gauge.peak_seen.remote(), timeout=CLOSE_TIMEOUT_S) if self._gauge else 0

    @asynccontextmanager
    async def session(self, runner_factory: RunnerFactory, policy: Policy) -> AsyncIterator[_RaySession]:
        """Start ``workers`` actors for ``policy``; on exit cancel what is outstanding and stop them.

        Raises:
            ValueError: the policy cannot run in a worker process (``check_shippable``).
        """
        check_shippable(policy)
        self.connect()
        slots = math.ceil(self.concurrency / self.config.workers)
        actor = EpisodeWorker.options(num_cpus=self.config.worker_num_cpus, max_concurrency=slots + 1)
        workers = [actor.remote(runner_factory, policy, self._gauge) for _ in range(self.config.workers)]
        session = _RaySession(workers, self.concurrency)
        try:
            yield session
        finally:
            session.cancel()
            self.cancelled += session.cancelled
            await _stop_workers(workers)

    def close(self) -> None:
        """Stop the gauge, and Ray itself when this executor started it. Idempotent."""
        if self._gauge is not None and ray.is_initialized():
            ray.kill(self._gauge)
        self._gauge = None
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False


async def _stop_workers(workers: list[Any]) -> None:
    """Let each worker close its runner (bounded wait), then kill it."""
    try:
        await asyncio.wait_for(asyncio.gather(*(w.close.remote() for w in workers), return_exceptions=True),
                               timeout=CLOSE_TIMEOUT_S)
    except asyncio.TimeoutError:
        pass
    finally:
        for worker in workers:
            ray.kill(worker)
