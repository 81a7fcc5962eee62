"""Episode executors: where the episodes of a campaign run, with one bound on open sandboxes.

Every stage that runs episodes (screening, probes, evaluation campaigns, GRPO
rollouts) asks an executor for a *session* bound to one policy and calls its
``run_one(task, trial)``, or ``run(pairs)`` for many keys at once. Two
implementations share this interface (``ExecutorConfig.kind``):

- ``local``: asyncio in this process (:class:`LocalExecutor`), the laptop default.
- ``ray``: Ray actors, each with its own runner and sandboxes
  (``rewardbox.episode.executor_ray.RayExecutor``).

Both admit at most ``concurrency`` episodes, hence sandboxes, at once; a key
waits for a free slot (backpressure), so a caller may hand over all B x G
rollouts of a GRPO step, or 10,000 campaign keys, in one ``gather``. Both
count the sandboxes actually open (started and not yet closed) with a
:class:`SandboxGauge`, and report the peak.

The runner itself is built by a *runner factory*, ``policy -> async context
manager of EpisodeRunner`` (``rewardbox.episode.parts.CampaignParts.runner_factory``, which
binds the composition root's ``episode_runner``), so this module needs no knowledge of
profiles, and a Ray worker can build its own runner from the same picklable factory.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from rewardbox.episode.config import ExecutorConfig
from rewardbox.episode.runner import EpisodeRunner
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.episode.trial import run_trial
from rewardbox.policy.base import Policy
from rewardbox.sandbox.base import Sandbox, SandboxFactory
from rewardbox.tasks.schema import Task

RunnerFactory = Callable[[Policy], AbstractAsyncContextManager[EpisodeRunner]]
OnResult = Callable[[EpisodeResult], None]


class SandboxGauge:
    """Counts open sandboxes (``start`` entered, ``close`` not yet finished) and their peak.

    The methods are async so a remote gauge (a Ray actor) has the same interface.
    """

    def __init__(self) -> None:
        self.open = 0
        self.peak = 0

    async def opened(self) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)

    async def closed(self) -> None:
        self.open -= 1


class GaugedSandbox:
    """A sandbox that reports its open interval to a gauge; every call is delegated.

    The gauge sees ``opened`` before the inner ``start`` and ``closed`` after the
    inner ``close``, so the counted interval contains the real one: the measured
    peak is never below the real peak.
    """

    def __init__(self, inner: Sandbox, gauge: Any) -> None:
        self._inner, self._gauge, self._counted = inner, gauge, False

    async def start(
        self, world_state: dict[str, Any], available_tools: list[str]
    ) -> dict[str, Any]:
        await self._gauge.opened()
        self._counted = True
        return await self._inner.start(world_state, available_tools)

    async def close(self) -> None:
        try:
            await self._inner.close()
        finally:
            if self._counted:
                self._counted = False
                await self._gauge.closed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class GaugedSandboxFactory:
    """Wraps a sandbox factory so that every sandbox it makes is counted by ``gauge``."""

    inner: SandboxFactory
    gauge: Any

    def __call__(self) -> Sandbox:
        return GaugedSandbox(self.inner(), self.gauge)


class ExecutorSession(Protocol):
    """One policy's episodes on an executor; open with ``EpisodeExecutor.session``.

    Attributes:
        width: keys a caller should keep outstanding to keep every slot busy
            (``run_campaign``'s window). Locally the bound itself; on Ray more,
            so that chunks can be prefetched. The sandbox bound holds whatever
            a caller hands over.
    """

    width: int

    async def run_one(self, task: Task, trial: int) -> EpisodeResult:
        """One trial of (task, trial), waiting for a free slot first.

        Never raises for policy behaviour or infrastructure faults: those are
        results (``system_error`` set, ``reward`` None), never a reward of 0.
        """

    async def run(
        self, pairs: Sequence[tuple[Task, int]], on_result: OnResult | None = None
    ) -> list[EpisodeResult]:
        """Every ``(task, trial)`` pair, bounded; results in the order of ``pairs``."""


class EpisodeExecutor(Protocol):
    """Runs episodes under one bound on open sandboxes (``concurrency``)."""

    kind: str
    concurrency: int
    gauge_peak: int

    def session(
        self, runner_factory: RunnerFactory, policy: Policy
    ) -> AbstractAsyncContextManager[ExecutorSession]:
        """A session that runs ``policy``'s episodes; its resources are released on exit."""

    def close(self) -> None:
        """Release what the executor holds (a Ray connection it started). Idempotent."""


async def run_pairs(
    run_one: Callable[[Task, int], Any],
    pairs: Sequence[tuple[Task, int]],
    on_result: OnResult | None = None,
) -> list[EpisodeResult]:
    """Gather ``run_one`` over ``pairs`` (the bound lives in ``run_one``); results in pair order."""

    async def one(task: Task, trial: int) -> EpisodeResult:
        result = await run_one(task, trial)
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(task, trial) for task, trial in pairs)))


class _LocalSession:
    def __init__(self, runner: EpisodeRunner, slots: asyncio.Semaphore, width: int) -> None:
        self._runner, self._slots, self.width = runner, slots, width

    async def run_one(self, task: Task, trial: int) -> EpisodeResult:
        async with self._slots:
            return await run_trial(self._runner, task, trial)

    async def run(
        self, pairs: Sequence[tuple[Task, int]], on_result: OnResult | None = None
    ) -> list[EpisodeResult]:
        return await run_pairs(self.run_one, pairs, on_result)


class LocalExecutor:
    """Episodes as asyncio tasks in this process (a batching local policy groups their completions).

    Args:
        concurrency: episodes (and sandboxes) open at once, >= 1; shared by
            every session of this executor that runs at the same time.
    """

    kind = "local"

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self.gauge = SandboxGauge()
        # one semaphore per event loop (``run_trials`` runs each campaign in its own ``asyncio.run``)
        self._slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    @property
    def gauge_peak(self) -> int:
        """Most sandboxes open at once so far."""
        return self.gauge.peak

    @asynccontextmanager
    async def session(
        self, runner_factory: RunnerFactory, policy: Policy
    ) -> AsyncIterator[ExecutorSession]:
        """A bounded session over one runner for ``policy`` (closed, with its grader, on exit)."""
        slots = self._slots.setdefault(
            asyncio.get_running_loop(), asyncio.Semaphore(self.concurrency)
        )
        async with runner_factory(policy) as runner:
            runner.sandbox_factory = GaugedSandboxFactory(runner.sandbox_factory, self.gauge)
            yield _LocalSession(runner, slots, self.concurrency)

    def close(self) -> None:
        self._slots.clear()


def build_executor(config: ExecutorConfig, concurrency: int) -> EpisodeExecutor:
    """The executor the config names, bounded by ``concurrency`` open sandboxes.

    ``ray`` imports Ray lazily (the ``cluster`` extra) and connects on the first session.

    Raises:
        ImportError: ``kind: ray`` without Ray installed (``pip install -e '.[cluster]'``).
    """
    if config.kind == "ray":
        from rewardbox.episode.executor_ray import RayExecutor

        return RayExecutor(config, concurrency)
    return LocalExecutor(concurrency)
