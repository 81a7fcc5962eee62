"""Request bookkeeping of the local policy's worker: pending requests and batch choice."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from rewardbox.policy.base import ChatRequest


@dataclass
class Pending:
    """One queued ``complete`` call; ``prompt_ids`` is filled in by the worker thread."""

    request: ChatRequest
    prompt_ids: list[int] | None
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    enqueued_s: float


def _resolve(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def settle(pending: Pending, result: Any, error: BaseException | None = None) -> None:
    """Resolve the caller's future on its own loop (thread-safe); a gone loop is ignored."""
    try:
        pending.loop.call_soon_threadsafe(_resolve, pending.future, result, error)
    except RuntimeError:  # the caller's loop is gone; nobody is waiting
        pass


def fail(pending: Pending, error: BaseException) -> None:
    """Fail one request alone (thread-safe)."""
    settle(pending, None, error)


def choose_batch(
    waiting: list[Pending], max_batch_size: int, key_tokens: int
) -> tuple[list[Pending], list[Pending]]:
    """The next batch and the requests left waiting, both in arrival order.

    The batch is the oldest request, then the others whose first
    ``key_tokens`` prompt tokens equal its own (they can share one cached
    prefix), then any others, up to ``max_batch_size``: every waiting request
    that fits runs now.

    Args:
        waiting: tokenised requests, oldest first.
        max_batch_size: most rows per ``generate`` call (>= 1).
        key_tokens: how many leading tokens decide "same prefix".

    Returns:
        ``(batch, rest)``.
    """
    if not waiting:
        return [], []
    key = waiting[0].prompt_ids[:key_tokens]
    same = [p for p in waiting if p.prompt_ids[:key_tokens] == key]
    others = [p for p in waiting if p.prompt_ids[:key_tokens] != key]
    batch = (same + others)[:max_batch_size]
    chosen = {id(p) for p in batch}
    return batch, [p for p in waiting if id(p) not in chosen]
