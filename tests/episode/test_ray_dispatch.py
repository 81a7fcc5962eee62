"""The Ray executor's chunked dispatch, driven with fake worker handles (no Ray): chunk sizes,
prefetch depth, the per-worker share and a lost worker."""

from __future__ import annotations

import asyncio
import functools

import pytest

pytest.importorskip("ray")

from ray.exceptions import ActorDiedError  # noqa: E402

from rewardbox.config.profile import load_profile  # noqa: E402
from rewardbox.episode import executor_ray  # noqa: E402
from rewardbox.episode.executor_ray import MAX_CHUNK, _RaySession, split_shares  # noqa: E402
from rewardbox.episode.ray_worker import ChunkReport  # noqa: E402
from rewardbox.episode.trajectory import EpisodeResult  # noqa: E402
from rewardbox.tasks.schema import Task  # noqa: E402
from rewardbox.tasks.sources import load_candidates  # noqa: E402


class FakeWorker:
    """A worker handle: ``run_chunk.remote`` returns an awaitable that runs the chunk ``episode_s`` per key,
    ``share`` at once, and records what it was sent and how many keys were running at once."""

    def __init__(
        self,
        share: int,
        episode_s: float,
        die_after: int | None = None,
        reported_slot_s: float | None = None,
    ) -> None:
        self.share, self.episode_s, self.die_after = share, episode_s, die_after
        self.reported_slot_s = episode_s if reported_slot_s is None else reported_slot_s
        self.chunks: list[list[tuple[str, int]]] = []
        self.task_uploads: list[list[str]] = []
        self.running = self.peak = 0
        self.failed: list[tuple[str, int]] = []
        self.slots: asyncio.Semaphore | None = (
            None  # one per worker, across its chunks (as the real one)
        )
        self.run_chunk = self

    def remote(self, tasks, keys):
        self.chunks.append(keys)
        self.task_uploads.append([t.uid for t in tasks])
        return asyncio.ensure_future(self._run(keys))

    async def _run(self, keys):
        if self.die_after is not None and len(self.chunks) > self.die_after:
            self.failed += keys
            raise ActorDiedError()
        self.slots = self.slots or asyncio.Semaphore(self.share)

        async def one(uid, trial):
            async with self.slots:
                self.running += 1
                self.peak = max(self.peak, self.running)
                await asyncio.sleep(self.episode_s)
                self.running -= 1
                return EpisodeResult(uid=uid, trial=trial, reward=1.0, passed=True)

        results = await asyncio.gather(*(one(u, t) for u, t in keys))
        return ChunkReport(list(results), self.peak, self.reported_slot_s)


@functools.cache
def _all_tasks() -> tuple[Task, ...]:
    return tuple(load_candidates(load_profile("test").tasks).tasks)


def _tasks(n: int) -> list[Task]:
    return list(_all_tasks()[:n])


async def _campaign(workers, keys):
    session = _RaySession(workers, [w.share for w in workers])
    try:
        return session, await asyncio.gather(
            *(session.run_one(task, trial) for task, trial in keys)
        )
    finally:
        session.cancel()


def test_fast_episodes_go_in_large_chunks_and_every_key_comes_back_once():
    tasks = _tasks(4)
    keys = [(t, trial) for trial in range(150) for t in tasks]  # 600 keys
    workers = [FakeWorker(share=4, episode_s=0.0005) for _ in range(2)]
    session, results = asyncio.run(_campaign(workers, keys))
    assert [(r.uid, r.trial) for r in results] == [(t.uid, trial) for t, trial in keys]
    sent = sorted(k for w in workers for chunk in w.chunks for k in chunk)
    assert sent == sorted((t.uid, trial) for t, trial in keys)  # each key sent exactly once
    assert session.calls == sum(len(w.chunks) for w in workers) < len(keys) / 10
    assert max(len(c) for w in workers for c in w.chunks) <= MAX_CHUNK
    assert all(w.peak <= w.share for w in workers)
    assert min(sum(map(len, w.chunks)) for w in workers) > 0.3 * len(
        keys
    )  # both workers did real work
    for worker in (
        workers
    ):  # a task travels with (or before) its first chunk, then not again once acknowledged
        uploaded: set[str] = set()
        for chunk, uploads in zip(worker.chunks, worker.task_uploads):
            uploaded |= set(uploads)
            assert {uid for uid, _ in chunk} <= uploaded
        assert len(sum(worker.task_uploads, [])) <= 2 * len(tasks)


def test_slow_episodes_go_one_round_at_a_time_and_the_driver_holds_the_rest():
    tasks = _tasks(3)
    keys = [(t, trial) for trial in range(4) for t in tasks]  # 12 keys
    worker = FakeWorker(
        share=2, episode_s=0.02, reported_slot_s=5.0
    )  # reports LLM-like 5 s episodes
    session, results = asyncio.run(_campaign([worker], keys))
    assert len(results) == 12 and worker.peak == 2
    # the first call is one round (its share); once W is measured, keys go one per call
    assert len(worker.chunks[0]) == 2 and all(len(c) == 1 for c in worker.chunks[2:])


def test_chunk_size_follows_littles_law_and_splits_the_tail_evenly(monkeypatch):
    async def main():
        session = _RaySession([FakeWorker(4, 0.0), FakeWorker(4, 0.0)], [4, 4])
        session._queue.extend([object()] * 1000)
        assert session.chunk_size(0) == 4  # nothing measured yet: one round of the share
        session._slot_s[0] = executor_ray.CHUNK_TARGET_S * 4 / 20  # 20 keys fill the target time
        assert session.chunk_size(0) == 20
        session._slot_s[0] = 1e-9
        assert session.chunk_size(0) == MAX_CHUNK
        session._queue.clear()
        session._queue.extend([object()] * 9)
        assert session.chunk_size(0) == 5  # ceil(9 / 2 live workers)
        session._slot_s[0] = 10.0
        assert session.chunk_size(0) == 1  # slow episodes: one key per call
        session.cancel()

    asyncio.run(main())


def test_a_lost_worker_makes_its_keys_system_errors_and_the_others_finish_the_queue():
    tasks = _tasks(5)
    keys = [(t, trial) for trial in range(20) for t in tasks]
    dying, healthy = FakeWorker(2, 0.001, die_after=1), FakeWorker(2, 0.001)
    _, results = asyncio.run(_campaign([dying, healthy], keys))
    lost = [r for r in results if r.system_error]
    assert lost and all(
        r.system_error.startswith("ray_worker: ActorDiedError") and r.reward is None for r in lost
    )
    assert sorted((r.uid, r.trial) for r in lost) == sorted(
        dying.failed
    )  # exactly the keys of the failed calls
    assert len(results) == len(keys) and sum(r.reward == 1.0 for r in results) == len(keys) - len(
        lost
    )


def test_shares_sum_to_the_bound_and_no_worker_gets_zero():
    assert (
        split_shares(8, 2) == [4, 4]
        and split_shares(8, 3) == [3, 3, 2]
        and split_shares(2, 5) == [1, 1]
    )
    for bound in range(1, 20):
        for workers in range(1, 6):
            shares = split_shares(bound, workers)
            assert sum(shares) == bound and min(shares) >= 1
