"""The local policy's batching: every waiting request that fits runs in one batch, tokenised off the loop.

The worker, queue and tokenisation are the real ones; only the model step
(``generate_batch``) and the tokenizer are fakes, so these tests need no weights.
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


def _pending(ids: list[int]) -> Pending:
    return Pending(request=None, prompt_ids=ids, future=None, loop=None, enqueued_s=0.0)  # type: ignore[arg-type]


def test_choose_batch_takes_the_prefix_group_first_then_fills_with_others():
    a1, b1, a2, c1, a3 = (_pending(ids) for ids in ([1, 1, 5], [2, 2, 5], [1, 1, 6], [3, 3], [1, 1, 7]))
    batch, rest = choose_batch([a1, b1, a2, c1, a3], max_batch_size=4, key_tokens=2)
    assert batch == [a1, a2, a3, b1] and rest == [c1]
    batch, rest = choose_batch([b1, c1], max_batch_size=8, key_tokens=2)  # no shared prefix: still one batch
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


def _policy(max_batch_size: int, context_tokens: int = 100_000) -> LocalPolicy:
    policy = LocalPolicy.__new__(LocalPolicy)
    policy.name, policy.max_batch_size, policy.batch_wait_s = "fake", max_batch_size, 0.2
    policy.context_tokens, policy.tokenizer = context_tokens, _Tokenizer()
    policy.prefix_cache = PrefixCache(min_tokens=64)
    policy.batches = []

    def generate_batch(requests, prompt_ids):
        policy.batches.append(len(requests))
        return [Completion(raw_text="ok", interpretation=None, finish_reason="stop", input_tokens=len(ids))
                for ids in prompt_ids]

    policy.generate_batch = generate_batch
    policy._queue, policy._waiting = queue.Queue(), []
    policy._thread = threading.Thread(target=policy._worker, name="worker", daemon=True)
    policy._thread.start()
    return policy


def _request(text: str) -> ChatRequest:
    return ChatRequest(messages=[{"role": "user", "content": text}], tools=[], max_new_tokens=4)


def test_a_burst_of_distinct_prompts_runs_as_one_batch_tokenised_in_the_worker():
    policy = _policy(max_batch_size=8)

    async def burst():
        try:
            return await asyncio.gather(*(policy.complete(_request(f"note {i} about tea")) for i in range(8)))
        finally:
            await policy.aclose()

    completions = asyncio.run(burst())
    assert policy.batches == [8] and all(c.raw_text == "ok" for c in completions)
    assert policy.tokenizer.calls == [("worker", 8)]  # one call, off the event loop's thread


def test_a_prompt_too_long_fails_alone_and_the_rest_still_batch():
    policy = _policy(max_batch_size=8, context_tokens=400)

    async def burst():
        try:
            texts = ["short one", "x" * 2000, "short two", "short three"]
            return await asyncio.gather(*(policy.complete(_request(t)) for t in texts), return_exceptions=True)
        finally:
            await policy.aclose()

    results = asyncio.run(burst())
    assert isinstance(results[1], ContextLengthError) and "context window" in str(results[1])
    assert [r.raw_text for i, r in enumerate(results) if i != 1] == ["ok"] * 3
    assert policy.batches == [3]


def test_more_requests_than_fit_run_in_full_batches():
    policy = _policy(max_batch_size=3)

    async def burst():
        try:
            return await asyncio.gather(*(policy.complete(_request(f"q{i}")) for i in range(7)))
        finally:
            await policy.aclose()

    assert len(asyncio.run(burst())) == 7
    assert policy.batches == [3, 3, 1]
