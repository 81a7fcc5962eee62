"""The local transformers policy: one worker thread, batched decoding.

Episodes run concurrently on an asyncio loop and each awaits ``complete``.
Requests go into a queue as they are (rendering and tokenising happen in the
worker thread, off the event loop, so a burst of requests lands inside one
gather window); a single worker thread waits at most ``batch_wait_ms`` for
company after the first, tokenises the whole burst in one call, and decodes ONE
left-padded batch (``decode.decode_batch``) of up to ``max_batch_size`` waiting
requests: the oldest, the others sharing its prompt prefix, then any others.
Where the batch shares a long prefix its cached KV is reused (``prefix_cache``);
otherwise it is a plain padded batch. Each row keeps its own temperature (0
means greedy), its own token budget (a row leaves the batch when it stops), and
its own random generator (``sampling.PerRowSampler``, which also records each
sampled token's log-probability for the trainer), so mixed requests share a batch.
Completions carry the exact prompt and completion token ids, so the trainer
scores the policy's own tokens without re-tokenising.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import random
import threading
import time
from pathlib import Path
from typing import Any

import torch

from rewardbox.errors import ContextLengthError, EndpointError
from rewardbox.policy.base import ChatRequest, Completion
from rewardbox.policy.batching import Pending, choose_batch, fail, settle
from rewardbox.policy.chat_template import prompt_opens_reasoning, render_prompt
from rewardbox.policy.decode import decode_batch
from rewardbox.policy.guided import ToolCallGuide, VocabularyIndex, record_forced_close, tool_signatures
from rewardbox.policy.interpreter import interpret
from rewardbox.policy.prefix_cache import PrefixCache
from rewardbox.policy.precision import resolve_dtype
from rewardbox.policy.sampling import PerRowSampler
from rewardbox.threads import apply_thread_policy

log = logging.getLogger(__name__)
STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")
_STOP = object()


class LocalPolicy:
    """SmolLM2 (or any causal LM checkpoint directory) served in-process.

    Attributes:
        model, tokenizer: the live objects; the trainer may use them (train-mode
            toggling is the trainer's job) while holding ``generation_lock``.
        name: policy name for records (defaults to the checkpoint directory name).
    """

    samples_from_a_model = True  # episode limits must fit the golden trajectories (check_policy_budget)

    def __init__(
        self,
        checkpoint_dir: Path | str,
        *,
        adapter_dir: Path | str | None = None,
        max_batch_size: int = 8,
        batch_wait_ms: float = 20.0,
        device: str = "cpu",
        dtype: torch.dtype | str = "auto",
        seed: int | None = None,
        num_threads: int | str | None = "auto",
        temperature: float | None = None,
        max_new_tokens: int | None = None,
        name: str | None = None,
        prefix_cache_min_tokens: int = 64,
        guided_tool_calls: bool = True,
    ):
        """Load the checkpoint and start the worker thread.

        Args:
            checkpoint_dir: a Hugging Face directory (the base checkpoint or a merged one).
            adapter_dir: optional PEFT adapter directory, merged into the weights on load.
            max_batch_size: most requests decoded as one batch.
            batch_wait_ms: how long the worker waits for more requests after the first, ms
                (it stops waiting once a full batch is queued).
            device, dtype: where and how the weights live (``"auto"``: ``precision.resolve_dtype``).
            seed: seeds the generators of rows whose request has no ``seed``
                (reproducible runs); None draws fresh ones. A request's own ``seed``
                seeds its row's generator (``sampling.PerRowSampler``), so its tokens
                do not depend on the other rows of the batch.
            num_threads: ``rewardbox.threads.apply_thread_policy``'s count (``"auto"``: measured).
            temperature, max_new_tokens: when set, override every request's values.
            name: policy name for records.
            prefix_cache_min_tokens: batches whose prompts share at least this many
                leading tokens reuse a cached prefix KV (see ``prefix_cache``).
            guided_tool_calls: restrict tool-call names and argument keys to the
                request's tools while the model writes them (``guided``); values
                and the choice to call stay free.
        """
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.thread_policy = apply_thread_policy(num_threads)
        self.checkpoint_dir = Path(checkpoint_dir)
        self.name = name or self.checkpoint_dir.name
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_ms / 1000.0
        self.device = torch.device(device)
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self._rng = random.Random(seed) if seed is not None else None
        self.generation_lock = threading.RLock()
        self.prefix_cache = PrefixCache(min_tokens=prefix_cache_min_tokens)
        self.guided_tool_calls = guided_tool_calls
        self._vocabulary: VocabularyIndex | None = None
        self.dtype = resolve_dtype(dtype, device)
        self._load_weights(self.dtype, adapter_dir)
        self._queue: queue.Queue = queue.Queue()
        self._waiting: list[Pending] = []
        self._thread = threading.Thread(target=self._worker, name=f"LocalPolicy[{self.name}]", daemon=True)
        self._thread.start()

    def _load_weights(self, dtype: torch.dtype, adapter_dir: Path | str | None) -> None:
        """Load model and tokenizer, read the context window and stop tokens, merge the adapter if any."""
        self.model, self.tokenizer = _load(self.checkpoint_dir, self.device, dtype)
        self.context_tokens = int(getattr(self.model.config, "max_position_embeddings", 1 << 30))
        self.stop_token_ids = [self.tokenizer.convert_tokens_to_ids(t) for t in STOP_TOKENS]
        self.pad_token_id = self.stop_token_ids[0]
        if adapter_dir is not None:
            self.load_adapter(adapter_dir)

    def load_adapter(self, adapter_dir: Path | str, *, merge: bool = True) -> None:
        """Apply a PEFT (LoRA) adapter to the live model, merged into the weights by default."""
        from peft import PeftModel

        with self.generation_lock:
            model = PeftModel.from_pretrained(self.model, str(adapter_dir))
            self.model = model.merge_and_unload() if merge else model
            self.model.eval()
            self.prefix_cache.invalidate()

    def weights_changed(self) -> None:
        """Tell the policy its weights were updated in place (drops cached prefix KV)."""
        with self.generation_lock:
            self.prefix_cache.invalidate()

    async def complete(self, request: ChatRequest) -> Completion:
        """Queue one request and await its completion (batched with concurrent ones).

        The prompt is rendered and tokenised in the worker thread, not here.

        Raises:
            EndpointError: generation failed (a system error; the episode is not scored).
            ContextLengthError: the prompt leaves no room in the context window
                (the episode's own limit, checked per request so it never fails a batch).
        """
        if not self._thread.is_alive():
            raise EndpointError(f"local policy {self.name!r} is closed")
        loop = asyncio.get_running_loop()
        pending = Pending(request, None, loop.create_future(), loop, time.perf_counter())
        self._queue.put(pending)
        return await pending.future

    async def aclose(self) -> None:
        """Stop the worker after the requests already queued; idempotent."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            await asyncio.to_thread(self._thread.join)

    def _worker(self) -> None:
        stopping = False
        while True:
            batch, stop = self._collect(block=not self._waiting and not stopping)
            stopping = stopping or stop
            if batch:
                self._run_batch(batch)
            if stopping and not self._waiting:
                return

    def _collect(self, block: bool = True) -> tuple[list[Pending], bool]:
        """Take queued requests (tokenising them), then choose the next batch.

        The batch is the oldest request, the others sharing its first
        ``prefix_cache.min_tokens`` tokens (so a batch can reuse one cached
        prefix), then any other waiting requests, up to ``max_batch_size``.
        """
        stop = False
        deadline = time.monotonic() + self.batch_wait_s
        while len(self._waiting) < 4 * self.max_batch_size:
            try:
                if block and not self._waiting:
                    item = self._queue.get()
                elif len(self._waiting) >= self.max_batch_size:  # a full batch: take only what is queued
                    item = self._queue.get_nowait()
                else:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is _STOP:
                stop = True
                break
            self._waiting.append(item)
        self._tokenize([p for p in self._waiting if p.prompt_ids is None])
        self._waiting = [p for p in self._waiting if p.prompt_ids is not None]
        if not self._waiting:
            return [], stop
        batch, self._waiting = choose_batch(self._waiting, self.max_batch_size, self.prefix_cache.min_tokens)
        return batch, stop

    def _tokenize(self, fresh: list[Pending]) -> None:
        """Render and tokenise new requests in one tokenizer call; fail those that cannot run.

        A prompt that leaves no room in the context window gets its
        ``ContextLengthError`` alone; a request that cannot be rendered gets an
        ``EndpointError``. Either way the request leaves the queue.
        """
        prompts: list[tuple[Pending, str]] = []
        for pending in fresh:
            try:
                prompts.append((pending, render_prompt(pending.request.messages, pending.request.tools)))
            except Exception as exc:  # noqa: BLE001 - a bad request fails alone, as a system error
                fail(pending, EndpointError(f"cannot render the prompt: {type(exc).__name__}: {exc}"))
        if not prompts:
            return
        try:
            encoded = self.tokenizer([text for _, text in prompts], add_special_tokens=False).input_ids
        except Exception as exc:  # noqa: BLE001 - a tokenizer fault is a system error of these requests
            for pending, _ in prompts:
                fail(pending, EndpointError(f"cannot tokenise the prompt: {type(exc).__name__}: {exc}"))
            return
        for (pending, _), ids in zip(prompts, encoded):
            if len(ids) >= self.context_tokens:
                fail(pending, ContextLengthError(
                    f"prompt of {len(ids)} tokens does not fit the context window "
                    f"({self.context_tokens} tokens) of {self.name!r}"))
                pending.prompt_ids = None
            else:
                pending.prompt_ids = list(ids)

    def _run_batch(self, batch: list[Pending]) -> None:
        batch = [p for p in batch if not p.future.cancelled()]
        if not batch:
            return
        try:
            completions = self.generate_batch([p.request for p in batch], [p.prompt_ids for p in batch])
            outcomes: list[tuple[Any, BaseException | None]] = [(c, None) for c in completions]
        except (EndpointError, ContextLengthError) as exc:
            outcomes = [(None, exc)] * len(batch)
        except Exception as exc:  # noqa: BLE001 - any generation fault is a system error
            log.exception("local generation failed")
            outcomes = [(None, EndpointError(f"local generation failed: {type(exc).__name__}: {exc}"))] * len(batch)
        now = time.perf_counter()
        for pending, (completion, error) in zip(batch, outcomes):
            if completion is not None:
                completion.duration_s = now - pending.enqueued_s
            settle(pending, completion, error)

    def generate_batch(self, requests: list[ChatRequest], prompt_ids: list[list[int]]) -> list[Completion]:
        """Decode these requests as ONE batch (synchronous; the worker's step).

        Args:
            requests: the requests, in batch order.
            prompt_ids: their prompt token ids (rendered with ``render_prompt``).

        Returns:
            One ``Completion`` per request: ``completion_token_ids`` end with the
            stop token when ``finish_reason == "stop"``; ``raw_text`` is their
            decoding without it. ``finish_reason == "length"`` when the row's
            budget was used up without a stop token.

        Raises:
            EndpointError: a prompt leaves no room in the context window.
        """
        budgets = [self._budget(r, len(p)) for r, p in zip(requests, prompt_ids)]
        temperatures = [self.temperature if self.temperature is not None else r.temperature for r in requests]
        sampler = PerRowSampler(self._row_seeds([r.seed if r.sampling_seed is None else r.sampling_seed
                                                 for r in requests]), self.device, temperatures)
        with self.generation_lock, torch.inference_mode():
            prepared = self.prefix_cache.prepare(self.model, prompt_ids, self.pad_token_id, self.device)
            if prepared is None:
                input_ids, attention_mask = self._left_pad(prompt_ids)
                cache, cached_tokens = None, 0
            else:
                input_ids, attention_mask, cache = (prepared[0][k] for k in ("input_ids", "attention_mask", "cache"))
                cached_tokens = cache.get_seq_length()
            guides = self._guides(requests)
            new_tokens = decode_batch(self.model, input_ids, attention_mask, budgets=budgets,
                                      stop_token_ids=self.stop_token_ids, sampler=sampler, guides=guides,
                                      cache=cache)
        completions = [
            self._completion(req, ids, row, temp, len(requests), cached_tokens, logprobs)
            for req, ids, row, temp, logprobs in zip(requests, prompt_ids, new_tokens, temperatures, sampler.logprobs)
        ]
        for event in (e for guide in guides for e in guide.events):
            record_forced_close(completions[event.row], event)
        return completions

    def _guides(self, requests: list[ChatRequest]) -> list[ToolCallGuide]:
        if not self.guided_tool_calls or not any(r.tools for r in requests):
            return []
        if self._vocabulary is None:
            self._vocabulary = VocabularyIndex(self.tokenizer, int(self.model.config.vocab_size))
        return [ToolCallGuide(self._vocabulary, [tool_signatures(r.tools or []) for r in requests], prompt_len=0)]

    def _budget(self, request: ChatRequest, prompt_len: int) -> int:
        wanted = self.max_new_tokens if self.max_new_tokens is not None else request.max_new_tokens
        room = self.context_tokens - prompt_len
        if room <= 0:
            raise ContextLengthError(f"prompt of {prompt_len} tokens does not fit the context window of {self.name!r}")
        return max(1, min(int(wanted), room))

    def _left_pad(self, prompt_ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompt_ids)
        ids = torch.full((len(prompt_ids), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for row, prompt in enumerate(prompt_ids):
            ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _row_seeds(self, request_seeds: list[int | None]) -> list[int]:
        """One generator seed per row: the request's own, else from the policy's seed, else fresh."""
        rng = self._rng or random.Random()
        return [int(s) & 0xFFFF_FFFF_FFFF_FFFF if s is not None else rng.getrandbits(63) for s in request_seeds]

    def _completion(
        self, request: ChatRequest, prompt_ids: list[int], row: list[int], temperature: float, batch_size: int,
        cached_tokens: int = 0, logprobs: list[float] | None = None,
    ) -> Completion:
        stop_at = next((i for i, t in enumerate(row) if t in self.stop_token_ids), None)
        completion_ids = row if stop_at is None else row[: stop_at + 1]
        finish_reason = "length" if stop_at is None else "stop"
        text_ids = completion_ids if stop_at is None else completion_ids[:-1]
        raw_text = self.tokenizer.decode(text_ids, skip_special_tokens=False)
        reasoning_open = prompt_opens_reasoning(self.tokenizer.decode(prompt_ids, skip_special_tokens=False))
        return Completion(
            raw_text=raw_text,
            interpretation=interpret(raw_text, request.tools, finish_reason=finish_reason,
                                     reasoning_open=reasoning_open),
            finish_reason=finish_reason,
            input_tokens=len(prompt_ids),
            cached_input_tokens=cached_tokens,
            output_tokens=len(completion_ids),
            prompt_token_ids=list(prompt_ids),
            completion_token_ids=list(completion_ids),
            completion_logprobs=None if logprobs is None else list(logprobs[: len(completion_ids)]),
            extra={"batch_size": batch_size, "temperature": temperature},
        )


def _load(checkpoint_dir: Path, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    """Load model and tokenizer from a local directory only (no hub access)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (checkpoint_dir / "config.json").is_file():
        raise FileNotFoundError(
            f"{checkpoint_dir} is not a checkpoint directory (no config.json); "
            "build one with rewardbox.policy.checkpoint.convert_gguf_to_safetensors"
        )
    tokenizer = AutoTokenizer.from_pretrained(checkpoint_dir, local_files_only=True)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(checkpoint_dir, dtype=dtype, local_files_only=True)
    model.to(device)
    model.eval()
    return model, tokenizer
