"""The Ray episode executor: keys sent in chunks to Ray actors, each with its own runner and sandboxes.

``ExecutorConfig.workers`` async actors (:class:`EpisodeWorker`) each hold one
copy of the policy, the user simulator, a grading pool and the sandbox factory,
built in the worker from the same picklable runner factory the local executor
uses. The bound ``concurrency`` is split into per-worker *shares* that sum to
it; a worker admits at most its share of episodes at once (a semaphore in the
worker), so the sandboxes open across the cluster never exceed the bound.
Each worker counts its own open sandboxes; the executor's peak is the sum of
the workers' peaks, an upper bound of the cluster-wide peak (a sum <= the bound
proves the bound held).

Dispatch. ``run_one`` and ``run`` put keys in the driver's queue (no sandbox
is open there) and wait. One dispatcher per worker sends them in *chunks*: one
Ray call runs many episodes, so a 10 ms episode no longer pays a Ray round trip
of its own. A chunk is sized to keep its worker busy about ``CHUNK_TARGET_S``:
by Little's law (L = lambda W; Little, Operations Research 9(3), 1961) a worker
with ``share`` slots full finishes ``share / W`` episodes per second when an
episode holds its slot ``W`` seconds, so the chunk is ``CHUNK_TARGET_S * share / W``
keys (W measured by the worker, starting at one round of ``share``), at most
``MAX_CHUNK`` and at most an even split of what is queued (the tail stays
balanced). A dispatcher keeps two calls at its worker, one running and one
waiting behind it (or, for one-key chunks, one key more than the worker's slots),
so a worker never waits for the driver between chunks. Slow (LLM) episodes
thus go one round at a time; fast ones (golden replay) go dozens per call.

Ray is started embedded (``ray.init(num_cpus=...)``) unless a connection
exists already (the Dagster resource made it) or ``address`` names a cluster.
A worker that dies (node lost, out of memory) makes its in-flight keys system
errors, retried by the campaign's repair pass, never rewards of 0; the other
workers take the rest of the queue. Cancelling the caller (a terminated Dagster
run) cancels every outstanding Ray call.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

from rewardbox.episode.config import ExecutorConfig
from rewardbox.episode.executor import OnResult, RunnerFactory, run_pairs
from rewardbox.episode.ray_worker import (
    ChunkReport,
    EpisodeWorker,
    check_shippable,
    worker_lost_result,
)
from rewardbox.episode.trajectory import EpisodeResult
from rewardbox.policy.base import Policy
from rewardbox.tasks.schema import Task

__all__ = ["RayExecutor", "check_shippable", "split_shares", "worker_lost_result"]

CLOSE_TIMEOUT_S = 30.0
CHUNK_TARGET_S = 0.25  # seconds of work per Ray call when episodes are fast
MAX_CHUNK = 64  # keys per Ray call, at most
_WORKER_LOST = (RayActorError, ActorDiedError, ActorUnavailableError)


def split_shares(concurrency: int, workers: int) -> list[int]:
    """Per-worker slots summing to ``concurrency``; never a worker with 0 (fewer workers instead).

    >>> split_shares(8, 3)
    [3, 3, 2]
    """
    count = min(concurrency, workers)
    return [concurrency // count + (1 if i < concurrency % count else 0) for i in range(count)]


@dataclass(eq=False)
class _Key:
    """A key waiting in the driver: its task, trial and the caller's future."""

    task: Task
    trial: int
    future: asyncio.Future


class _RaySession:
    """Chunked dispatch of queued keys to worker actors, each bounded by its share.

    Attributes:
        width: keys a caller should keep outstanding so that every worker can
            have a chunk running and one prefetched (``run_campaign``'s window).
        peaks: per worker, the most sandboxes it reported open at once.
        calls: Ray calls sent (chunks); keys / calls is the mean chunk size.
        cancelled: keys whose Ray calls were cancelled because the caller was.
    """

    def __init__(self, workers: list[Any], shares: list[int]) -> None:
        self.workers, self.shares = workers, shares
        self.width = sum(shares) + len(workers) * MAX_CHUNK
        self.peaks = [0] * len(workers)
        self.calls = self.cancelled = 0
        self._queue: deque[_Key] = deque()
        self._wakeup = [asyncio.Event() for _ in workers]
        self._outstanding = [0] * len(workers)  # keys sent to each worker and not yet returned
        self._calls = [0] * len(workers)  # Ray calls in flight per worker
        self._alive = [True] * len(workers)
        self._sent: list[dict[str, Task]] = [{} for _ in workers]
        self._slot_s: list[float | None] = [None] * len(workers)
        self._refs: dict[Any, list[_Key]] = {}
        self._tasks: set[asyncio.Task] = set()
        self._dispatchers = [asyncio.create_task(self._dispatch(i)) for i in range(len(workers))]

    async def run_one(self, task: Task, trial: int) -> EpisodeResult:
        if not any(self._alive):
            return worker_lost_result(
                task, trial, RuntimeError("no live Ray worker left in this session")
            )
        key = _Key(task, trial, asyncio.get_running_loop().create_future())
        self._queue.append(key)
        for event in self._wakeup:
            event.set()
        try:
            return await key.future
        except asyncio.CancelledError:
            if key in self._queue:  # never left the driver
                self._queue.remove(key)
            raise

    async def run(
        self, pairs: Sequence[tuple[Task, int]], on_result: OnResult | None = None
    ) -> list[EpisodeResult]:
        return await run_pairs(self.run_one, pairs, on_result)

    def chunk_size(self, index: int) -> int:
        """Keys for worker ``index``'s next call (Little's law sizing; see the module docstring)."""
        share, slot_s = self.shares[index], self._slot_s[index]
        size = share if slot_s is None else round(CHUNK_TARGET_S * share / max(slot_s, 1e-6))
        even = math.ceil(len(self._queue) / max(1, sum(self._alive)))
        return max(1, min(MAX_CHUNK, size, even))

    async def _dispatch(self, index: int) -> None:
        while self._alive[index]:
            await self._wakeup[index].wait()
            self._wakeup[index].clear()
            while self._queue and self._alive[index] and self._wants_more(index):
                size = min(self.chunk_size(index), len(self._queue))
                self._send(index, [self._queue.popleft() for _ in range(size)])

    def _wants_more(self, index: int) -> bool:
        """True while worker ``index`` could idle: fewer than two calls (one running, one waiting behind
        it), or no more keys than its slots (one-key chunks of slow episodes)."""
        return self._calls[index] < 2 or self._outstanding[index] <= self.shares[index]

    def _send(self, index: int, batch: list[_Key]) -> None:
        sent, fresh = self._sent[index], {}
        for key in batch:
            if sent.get(key.task.uid) is not key.task:
                fresh[key.task.uid] = key.task
        ref = self.workers[index].run_chunk.remote(
            list(fresh.values()), [(k.task.uid, k.trial) for k in batch]
        )
        self._refs[ref] = batch
        self._outstanding[index] += len(batch)
        self._calls[index] += 1
        self.calls += 1
        call = asyncio.create_task(self._collect(index, ref, batch, fresh))
        self._tasks.add(call)
        call.add_done_callback(self._tasks.discard)

    async def _collect(
        self, index: int, ref: Any, batch: list[_Key], fresh: dict[str, Task]
    ) -> None:
        try:
            report: ChunkReport = await ref
        except asyncio.CancelledError:  # the caller, or asyncio.run's shutdown, cancelled this wait
            self._cancel_ref(ref)
            raise
        except _WORKER_LOST as exc:
            self._lose(index, exc, batch)
            return
        except RayTaskError as exc:  # a bug in the episode code: the same error as locally
            error = exc.as_instanceof_cause()
            for key in batch:
                _settle(key, error=error)
            return
        finally:
            self._refs.pop(ref, None)
            self._outstanding[index] -= len(batch)
            self._calls[index] -= 1
            self._wakeup[index].set()
        self._sent[index].update(fresh)
        self.peaks[index] = max(self.peaks[index], report.peak)
        previous = self._slot_s[index]
        self._slot_s[index] = report.slot_s if previous is None else (previous + report.slot_s) / 2
        for key, result in zip(batch, report.results):
            _settle(key, result=result)

    def _lose(self, index: int, exc: BaseException, batch: list[_Key]) -> None:
        """Worker ``index`` died: its keys become system errors; with no worker left, so does the queue."""
        self._alive[index] = False
        self._wakeup[index].set()
        if not any(self._alive):
            batch = batch + list(self._queue)
            self._queue.clear()
        for key in batch:
            _settle(key, result=worker_lost_result(key.task, key.trial, exc))

    def _cancel_ref(self, ref: Any) -> None:
        batch = self._refs.pop(ref, None)
        if batch is not None:
            ray.cancel(ref)
            self.cancelled += len(batch)

    def cancel(self) -> None:
        """Stop dispatching and cancel every outstanding Ray call (counted per key in ``cancelled``)."""
        for task in self._dispatchers:
            task.cancel()
        for ref in list(self._refs):
            self._cancel_ref(ref)
        for task in list(self._tasks):
            task.cancel()


def _settle(
    key: _Key, *, result: EpisodeResult | None = None, error: BaseException | None = None
) -> None:
    if key.future.done():  # the caller was cancelled meanwhile
        return
    if error is not None:
        key.future.set_exception(error)
    else:
        key.future.set_result(result)


class RayExecutor:
    """Episodes on Ray actors under one bound on open sandboxes.

    Args:
        config: ``ExecutorConfig`` (address, num_cpus, workers, runtime_env).
        concurrency: episodes (sandboxes) open at once across every worker.

    Attributes:
        cancelled: keys whose Ray calls were cancelled because the caller was cancelled.
        calls: Ray calls (chunks) sent over this executor's sessions.
    """

    kind = "ray"

    def __init__(self, config: ExecutorConfig, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.config, self.concurrency = config, concurrency
        self.cancelled = self.calls = 0
        self._owns_ray = False
        self._peak = 0

    def connect(self) -> None:
        """``ray.init`` unless Ray is connected already (embedded, or ``address`` when set)."""
        if not ray.is_initialized():
            options: dict[str, Any] = {
                "runtime_env": self.config.runtime_env or None,
                "log_to_driver": False,
            }
            if self.config.address:
                ray.init(address=self.config.address, **options)
            else:
                ray.init(num_cpus=self.config.num_cpus, include_dashboard=False, **options)
            self._owns_ray = True

    @property
    def gauge_peak(self) -> int:
        """Upper bound of the sandboxes open at once across the cluster: the sum of the workers' own peaks
        (max over this executor's sessions)."""
        return self._peak

    @asynccontextmanager
    async def session(
        self, runner_factory: RunnerFactory, policy: Policy
    ) -> AsyncIterator[_RaySession]:
        """Start one actor per share of the bound for ``policy``; on exit cancel what is outstanding and stop them.

        Raises:
            ValueError: the policy cannot run in a worker process (``check_shippable``).
        """
        check_shippable(policy)
        self.connect()
        shares = split_shares(self.concurrency, self.config.workers)
        actor = EpisodeWorker.options(num_cpus=self.config.worker_num_cpus)
        workers = [actor.remote(runner_factory, policy, share) for share in shares]
        session = _RaySession(workers, shares)
        try:
            yield session
        finally:
            session.cancel()
            closed = await _stop_workers(workers)
            self.cancelled += session.cancelled
            self.calls += session.calls
            peaks = [max(seen, last) for seen, last in zip(session.peaks, closed)]
            self._peak = max(self._peak, sum(peaks))

    def close(self) -> None:
        """Disconnect Ray when this executor started it. Idempotent."""
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False


async def _stop_workers(workers: list[Any]) -> list[int]:
    """Let each worker close its runner (bounded wait), then kill it; returns each one's sandbox peak (0 if lost)."""
    peaks = [0] * len(workers)
    try:
        closed = await asyncio.wait_for(
            asyncio.gather(*(w.close.remote() for w in workers), return_exceptions=True),
            timeout=CLOSE_TIMEOUT_S,
        )
        peaks = [p if isinstance(p, int) else 0 for p in closed]
    except TimeoutError:
        pass
    finally:
        for worker in workers:
            ray.kill(worker)
    return peaks
