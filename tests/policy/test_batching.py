"""The local policy's batching: waiting requests join the running batch, tokenised off the loop.

The worker, queue and tokenisation are the real ones; only the running batch
(``running.RunningBatch``) and the tokenizer are fakes, so these tests need no weights.
"""

from __future__ import annotations

import asyncio
import queue
import threading

import pytest

pytest.importorskip("torch")

from rewardbox.errors import ContextLengthError  # noqa: E402
from rewardbox.policy.base import ChatRequest, Completion  # noqa: E402
from rewardbox.policy.batching import Pending, choose_batch  # noqa: E402
from rewardbox.policy.local import LocalPolicy  # noqa: E402
from rewardbox.policy.prefix_cache import PrefixCache  # noqa: E402
from rewardbox.policy.running import FinishedRow, RowSpec  # noqa: E402


def _pending(ids: list[int]) -> Pending:
    return Pending(request=None, prompt_ids=ids, future=None, loop=None, enqueued_s=0.0)  # type: ignore[arg-type]


def test_choose_batch_takes_the_prefix_group_first_then_fills_with_others():
    a1, b1, a2, c1, a3 = (
        _pending(ids) for ids in ([1, 1, 5], [2, 2, 5], [1, 1, 6], [3, 3], [1, 1, 7])
    )
    batch, rest = choose_batch([a1, b1, a2, c1, a3], max_batch_size=4, key_tokens=2)
    assert batch == [a1, a2, a3, b1] and rest == [c1]
    batch, rest = choose_batch(
        [b1, c1], max_batch_size=8, key_tokens=2
    )  # no shared prefix: still one batch
    assert batch == [b1, c1] and rest == []
    assert choose_batch([], 8, 2) == ([], [])


class _Tokenizer:
    """Token per character; records the threads and batch sizes of its calls."""

    def __init__(self):
        self.calls: list[tuple[str, int]] = []

    def __call__(self, texts, add_special_tokens=False):
        self.calls.append((threading.current_thread().name, len(texts)))

        class Encoded:
            input_ids = [[ord(ch) % 200 for ch in text] for text in texts]

        return Encoded()


class _Batch:
    """A fake ``RunningBatch``: each row finishes after ``steps`` decode steps; records admissions and widths."""

    joinable = True

    def __init__(self, steps: int, log: dict):
        self.steps, self.log, self.rows, self.next_slot = steps, log, {}, 0

    def __len__(self):
        return len(self.rows)

    def admit(self, specs):
        self.log["admitted"].append(len(specs))
        slots = list(range(self.next_slot, self.next_slot + len(specs)))
        self.next_slot += len(specs)
        self.rows.update({slot: self.steps for slot in slots})
        return slots, []

    def step(self):
        self.log["widths"].append(len(self.rows))
        self.rows = {slot: left - 1 for slot, left in self.rows.items()}
        done = [slot for slot, left in self.rows.items() if left == 0]
        for slot in done:
            del self.rows[slot]
        return [FinishedRow(slot, [1], [0.0], [], 0, 1) for slot in done]


def _policy(
    max_batch_size: int, context_tokens: int = 100_000, steps: int = 1, start: bool = True
) -> LocalPolicy:
    policy = LocalPolicy.__new__(LocalPolicy)
    policy.name, policy.max_batch_size, policy.batch_wait_s = "fake", max_batch_size, 0.2
    policy.context_tokens, policy.tokenizer = context_tokens, _Tokenizer()
    policy.prefix_cache = PrefixCache(min_tokens=64)
    policy.generation_lock, policy._weights_version = threading.RLock(), 0
    policy.log = {"admitted": [], "widths": []}
    policy._new_batch = lambda: _Batch(steps, policy.log)
    policy._spec = lambda request, ids: RowSpec(ids, 4, 0.0, 0)
    policy._finish = lambda request, ids, row: Completion(
        raw_text="ok", interpretation=None, finish_reason="stop", input_tokens=len(ids)
    )
    if start:
        policy._start_worker()
    else:
        policy._queue, policy._waiting, policy._slots = queue.Queue(), [], {}
        policy._batch, policy._batch_version = policy._new_batch(), 0
    return policy


def _request(text: str) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], tools=[], max_new_tokens=4)


def test_a_burst_of_distinct_prompts_joins_as_one_admission_tokenised_in_the_worker():
    policy = _policy(max_batch_size=8)

    async def burst():
        try:
            return await asyncio.gather(
                *(policy.complete(_request(f"note {i} about tea")) for i in range(8))
            )
        finally:
            await policy.aclose()

    completions = asyncio.run(burst())
    assert policy.log["admitted"] == [8] and all(c.raw_text == "ok" for c in completions)
    assert policy.tokenizer.calls == [
        ("LocalPolicy[fake]", 8)
    ]  # one call, off the event loop's thread


def test_a_prompt_too_long_fails_alone_and_the_rest_still_batch():
    policy = _policy(max_batch_size=8, context_tokens=400)

    async def burst():
        try:
            texts = ["short one", "x" * 2000, "short two", "short three"]
            return await asyncio.gather(
                *(policy.complete(_request(t)) for t in texts), return_exceptions=True
            )
        finally:
            await policy.aclose()

    results = asyncio.run(burst())
    assert isinstance(results[1], ContextLengthError) and "context window" in str(results[1])
    assert [r.raw_text for i, r in enumerate(results) if i != 1] == ["ok"] * 3
    assert policy.log["admitted"] == [3]


def test_more_requests_than_fit_join_as_rows_leave_and_never_exceed_the_batch():
    policy = _policy(max_batch_size=3, steps=2)

    async def burst():
        try:
            return await asyncio.gather(*(policy.complete(_request(f"q{i}")) for i in range(7)))
        finally:
            await policy.aclose()

    assert len(asyncio.run(burst())) == 7
    assert policy.log["admitted"] == [3, 3, 1] and max(policy.log["widths"]) == 3


def test_a_request_that_arrives_while_rows_decode_joins_at_the_next_step():
    """Driven tick by tick (no timing): the old batch-to-its-end worker would give widths [1, 1, 1, 1, 1, 1]."""
    policy = _policy(max_batch_size=8, steps=3, start=False)
    loop = asyncio.new_event_loop()
    try:
        futures = []
        for i in range(3):
            pending = Pending(_request(f"turn {i}"), None, loop.create_future(), loop, 0.0)
            futures.append(pending.future)
            policy._queue.put(pending)
            policy._tick()
        while policy._slots:
            policy._tick()
        loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
    assert policy.log["admitted"] == [1, 1, 1]
    assert policy.log["widths"] == [1, 2, 3, 2, 1]
    assert all(f.result().raw_text == "ok" for f in futures)
