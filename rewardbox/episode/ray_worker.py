"""The Ray side of the Ray episode executor: one worker actor and what it returns.

:class:`EpisodeWorker` is the actor the driver (``rewardbox.episode.executor_ray``)
sends chunks of ``(uid, trial)`` keys to; it holds one runner (policy copy, user
simulator, grading pool, sandbox factory) and admits at most its share of the
bound at once. Policies that cannot travel to a worker are refused up front.
"""

from __future__ import annotations

import asyncio
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass

import ray

from rewardbox.episode.executor import GaugedSandboxFactory, RunnerFactory, SandboxGauge
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.termination import TerminationReason
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.episode.trial import run_trial
from rewardbox.policy.base import Policy
from rewardbox.tasks.schema import Task


@dataclass
class ChunkReport:
    """What a worker returns for one chunk.

    Attributes:
        results: one ``EpisodeResult`` per key, in the chunk's order.
        peak: most sandboxes this worker has had open at once so far.
        slot_s: mean seconds an episode of the chunk held its slot (W in Little's law).
    """

    results: list[EpisodeResult]
    peak: int
    slot_s: float


class _Worker:
    """One Ray worker: its runner (built on the first chunk, in the worker's event loop) and its share."""

    def __init__(self, runner_factory: RunnerFactory, policy: Policy, share: int) -> None:
        self._factory, self._policy, self._share = runner_factory, policy, share
        self.gauge = SandboxGauge()
        self._tasks: dict[str, Task] = {}
        self._stack: AsyncExitStack | None = None
        self._runner: EpisodeRunner | None = None
        self._lock: asyncio.Lock | None = None
        self._slots: asyncio.Semaphore | None = None

    async def _ensure_runner(self) -> EpisodeRunner:
        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if self._runner is None:
                stack = AsyncExitStack()
                runner = await stack.enter_async_context(self._factory(self._policy))
                runner.sandbox_factory = GaugedSandboxFactory(runner.sandbox_factory, self.gauge)
                self._stack, self._runner, self._slots = (
                    stack,
                    runner,
                    asyncio.Semaphore(self._share),
                )
        return self._runner

    async def run_chunk(self, tasks: list[Task], keys: list[tuple[str, int]]) -> ChunkReport:
        """``run_trial`` of every ``(uid, trial)`` key, at most ``share`` at once.

        Args:
            tasks: tasks this worker may not hold yet (kept by uid for later chunks).
            keys: ``(uid, trial)`` pairs whose task was sent in this or an earlier chunk.
        """
        self._tasks.update((t.uid, t) for t in tasks)
        runner = await self._ensure_runner()
        held: list[float] = []

        async def one(uid: str, trial: int) -> EpisodeResult:
            async with self._slots:
                started = time.perf_counter()
                try:
                    return await run_trial(runner, self._tasks[uid], trial)
                finally:
                    held.append(time.perf_counter() - started)

        results = await asyncio.gather(*(one(uid, trial) for uid, trial in keys))
        return ChunkReport(list(results), self.gauge.peak, sum(held) / max(1, len(held)))

    async def close(self) -> int:
        """Close the runner (grading pool) and the policy copy; returns this worker's sandbox peak."""
        try:
            if self._stack is not None:
                await self._stack.aclose()
        finally:
            await self._policy.aclose()
        return self.gauge.peak


EpisodeWorker = ray.remote(_Worker)


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
            "OpenAI-compatible endpoint (policy.kind 'endpoint', e.g. vLLM) to run episodes on Ray."
        )
    try:
        ray.cloudpickle.dumps(policy)
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing here
        raise ValueError(
            f"executor.kind 'ray': the policy {type(policy).__name__} cannot be sent to Ray workers "
            f"({type(exc).__name__}: {exc}); use executor.kind 'local' for it"
        ) from exc


def worker_lost_result(task: Task, trial: int, exc: BaseException) -> EpisodeResult:
    """The system-error result of a key whose Ray worker died (retried by repair, never scored)."""
    return EpisodeResult(
        uid=task.uid,
        trial=trial,
        termination_reason=TerminationReason.SYSTEM_ERROR,
        system_error=f"ray_worker: {type(exc).__name__}: {exc}",
    )
