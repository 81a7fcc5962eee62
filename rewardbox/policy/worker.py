"""The local policy's worker thread: queue, tokenise, admit into the running batch, step, settle.

Requests go into a queue as they are (rendering and tokenising happen here, off
the event loop, so a burst of requests lands inside one gather window). Each
turn of the loop (``_tick``):

1. takes what is queued: when nothing is decoding it blocks for the first
   request, then waits at most ``batch_wait_s`` for company (or until a full
   batch is queued); while rows are decoding it only drains the queue;
2. renders and tokenises the new requests in one tokenizer call (a prompt that
   does not fit fails alone with ``ContextLengthError``);
3. admits up to ``max_batch_size`` minus the running rows (the oldest waiting
   request, the others sharing its prompt prefix, then any others:
   ``batching.choose_batch``) into the ``running.RunningBatch``: they join at
   this step, their shared prefix from the prefix cache;
4. runs one decode step for every running row and settles the rows that finished.

A model fault fails the rows it touched with ``EndpointError`` (a system error).
When the weights change (``weights_changed``, ``load_adapter``) rows still
decoding fail with ``EndpointError``: their KV came from the old weights.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

import torch

from rewardbox.errors import ContextLengthError, EndpointError
from rewardbox.policy.batching import Pending, choose_batch, fail, settle
from rewardbox.policy.chat_template import render_prompt
from rewardbox.policy.guided import record_forced_close
from rewardbox.policy.running import FinishedRow
from rewardbox.threads import wide_team

log = logging.getLogger(__name__)
STOP = object()


class ContinuousWorker:
    """The worker half of ``LocalPolicy``; the policy provides ``name``, ``tokenizer``, ``context_tokens``,
    ``max_batch_size``, ``batch_wait_s``, ``prefix_cache``, ``generation_lock``, ``_weights_version``, ``decode_threads``,
    ``decode_weights()``, ``_new_batch()``, ``_spec(request, prompt_ids)``, ``_temperature(request)`` and ``_completion(...)``."""

    decode_threads: int | None = None
    """The worker thread's team size for decode steps (``LocalPolicy`` sets the thread policy's count);
    None leaves the thread's own."""

    def _start_worker(self) -> None:
        self._queue: queue.Queue = queue.Queue()
        self._waiting: list[Pending] = []
        self._slots: dict[int, Pending] = {}
        self._batch, self._batch_version = self._new_batch(), self._weights_version
        self._thread = threading.Thread(
            target=self._worker, name=f"LocalPolicy[{self.name}]", daemon=True
        )
        self._thread.start()

    def _worker(self) -> None:
        stopping = False
        while not (stopping and not self._waiting and not self._slots):
            stopping = self._tick(stopping)

    def _tick(self, stopping: bool = False) -> bool:
        """One turn of the loop (module doc); returns whether a stop was asked for."""
        idle = not self._slots
        stop = self._collect(block=idle and not self._waiting and not stopping, company=idle)
        with self.generation_lock, torch.inference_mode(), self.decode_weights():
            self._check_weights()
            self._apply_decode_team()
            joiners = self._joiners()
            if joiners:
                self._admit(joiners)
            self._drop_cancelled()
            if self._slots:
                self._step()
        return stopping or stop

    def _apply_decode_team(self) -> None:
        """Give this thread ``decode_threads`` (the thread policy's decode team) before it runs the model.

        torch keeps an OpenMP team size per thread: a thread takes the process-wide count at its first
        parallel op and keeps its own after that, so without this the worker decoded with whatever
        count was set anywhere when it first ran (a ``wide_team()`` on another thread, say) and never
        saw a later change."""
        if self.decode_threads is not None and torch.get_num_threads() != self.decode_threads:
            torch.set_num_threads(self.decode_threads)

    def _drop_cancelled(self) -> None:
        """Rows whose caller cancelled (an episode's timeout) leave the batch without decoding on."""
        cancelled = [slot for slot, pending in self._slots.items() if pending.future.cancelled()]
        if cancelled:
            self._batch.drop(cancelled)
            for slot in cancelled:
                del self._slots[slot]

    def _collect(self, block: bool, company: bool) -> bool:
        """Move queued requests to ``_waiting`` (tokenised); returns whether a stop was queued."""
        stop, deadline = False, time.monotonic() + self.batch_wait_s
        while len(self._waiting) < 4 * self.max_batch_size:
            try:
                if block and not self._waiting:
                    item = self._queue.get()
                    deadline = (
                        time.monotonic() + self.batch_wait_s
                    )  # wait for company after the first
                elif not company or len(self._waiting) + len(self._slots) >= self.max_batch_size:
                    item = self._queue.get_nowait()
                else:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is STOP:
                stop = True
                break
            self._waiting.append(item)
        self._tokenize([p for p in self._waiting if p.prompt_ids is None])
        self._waiting = [
            p for p in self._waiting if p.prompt_ids is not None and not p.future.cancelled()
        ]
        return stop

    def _tokenize(self, fresh: list[Pending]) -> None:
        """Render and tokenise new requests in one tokenizer call; fail those that cannot run.

        A prompt that leaves no room in the context window gets its
        ``ContextLengthError`` alone; a request that cannot be rendered gets an
        ``EndpointError``. Either way the request leaves the queue.
        """
        prompts: list[tuple[Pending, str]] = []
        for pending in fresh:
            try:
                prompts.append(
                    (pending, render_prompt(pending.request.messages, pending.request.tools))
                )
            except Exception as exc:  # noqa: BLE001 - a bad request fails alone, as a system error
                fail(
                    pending, EndpointError(f"cannot render the prompt: {type(exc).__name__}: {exc}")
                )
        if not prompts:
            return
        try:
            encoded = self.tokenizer(
                [text for _, text in prompts], add_special_tokens=False
            ).input_ids
        except Exception as exc:  # noqa: BLE001 - a tokenizer fault is a system error of these requests
            for pending, _ in prompts:
                fail(
                    pending,
                    EndpointError(f"cannot tokenise the prompt: {type(exc).__name__}: {exc}"),
                )
            return
        for (pending, _), ids in zip(prompts, encoded):
            if len(ids) >= self.context_tokens:
                fail(
                    pending,
                    ContextLengthError(
                        f"prompt of {len(ids)} tokens does not fit the context window "
                        f"({self.context_tokens} tokens) of {self.name!r}"
                    ),
                )
                pending.prompt_ids = None
            else:
                pending.prompt_ids = list(ids)

    def _joiners(self) -> list[Pending]:
        """The waiting requests that join the batch now (none while a full or unmergeable batch runs)."""
        free = self.max_batch_size - len(self._slots)
        if free <= 0 or not self._waiting or not self._batch.joinable:
            return []
        joiners, self._waiting = choose_batch(self._waiting, free, self.prefix_cache.min_tokens)
        fit = self._rows_that_fit(joiners)
        self._waiting = joiners[fit:] + self._waiting  # they join first when rows finish
        return joiners[:fit]

    def _rows_that_fit(self, joiners: list[Pending]) -> int:
        """How many of ``joiners`` (in order) the KV memory budget takes now (all, without one)."""
        return len(joiners)

    def _admit(self, joiners: list[Pending]) -> None:
        specs, admitted = [], []
        for pending in joiners:
            try:
                specs.append(self._spec(pending.request, pending.prompt_ids))
                admitted.append(pending)
            except (ContextLengthError, EndpointError) as exc:
                fail(pending, exc)
        if not specs:
            return
        try:
            with wide_team():  # prefill: hundreds of rows per matmul (rewardbox.threads)
                slots, finished = self._batch.admit(specs)
        except Exception as exc:  # noqa: BLE001 - any generation fault is a system error of these rows
            self._fail_rows(admitted, exc)
            return
        self._slots.update(zip(slots, admitted))
        self._settle(finished)

    def _step(self) -> None:
        try:
            finished = self._batch.step()
        except Exception as exc:  # noqa: BLE001 - any generation fault is a system error of the running rows
            self._fail_rows(list(self._slots.values()), exc)
            self._slots.clear()
            self._batch = self._new_batch()
            return
        self._settle(finished)

    def _check_weights(self) -> None:
        """Rows decoding on weights that changed since they joined fail (system error); a fresh batch."""
        if self._batch_version == self._weights_version:
            return
        if self._slots:
            error = EndpointError(
                f"the weights of {self.name!r} changed while these requests were decoding"
            )
            for pending in self._slots.values():
                fail(pending, error)
            self._slots.clear()
        self._batch, self._batch_version = self._new_batch(), self._weights_version

    def _fail_rows(self, rows: list[Pending], exc: BaseException) -> None:
        if not isinstance(exc, EndpointError | ContextLengthError):
            log.exception("local generation failed")
            exc = EndpointError(f"local generation failed: {type(exc).__name__}: {exc}")
        for pending in rows:
            fail(pending, exc)

    def _settle(self, finished: list[FinishedRow]) -> None:
        now = time.perf_counter()
        for row in finished:
            pending = self._slots.pop(row.slot)
            try:
                completion = self._finish(pending.request, pending.prompt_ids, row)
            except Exception as exc:  # noqa: BLE001 - a completion that cannot be built is a system error
                self._fail_rows([pending], exc)
                continue
            completion.duration_s = now - pending.enqueued_s
            settle(pending, completion)

    def _finish(self, request: Any, prompt_ids: list[int], row: FinishedRow) -> Any:
        """The ``Completion`` of a finished row, forced closes recorded."""
        completion = self._completion(
            request,
            prompt_ids,
            row.tokens,
            self._temperature(request),
            row.peak_rows,
            row.cached_tokens,
            row.logprobs,
        )
        for event in row.events:
            record_forced_close(completion, event)
        return completion
