"""The local transformers policy: one worker thread, continuous batching.

Episodes run concurrently on an asyncio loop and each awaits ``complete``.
Requests go into a queue; the worker thread (``worker.ContinuousWorker``)
renders and tokenises them off the event loop and admits them into ONE running
decode batch (``running.RunningBatch``) of up to ``max_batch_size`` rows:
requests that arrive while it decodes join it at the next step, and rows leave
as soon as they stop. Where new rows share a long prefix its cached KV is
reused (``prefix_cache``), so only their suffixes are prefilled, and a finished
row's KV is kept for its episode's next turn (``episode_kv``), so that turn
prefills only its new tokens. Each row keeps
its own temperature (0 means greedy), its own token budget, and its own random
generator (``sampling.PerRowSampler``, which also records each sampled token's
log-probability for the trainer), so mixed requests share a batch and a row's
tokens do not depend on when it joined. Completions carry the exact prompt and
completion token ids, so the trainer scores the policy's own tokens without
re-tokenising.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time
from pathlib import Path
from typing import Any

import torch

from rewardbox.errors import ContextLengthError, EndpointError
from rewardbox.policy import packed_linear
from rewardbox.policy.base import ChatRequest, Completion
from rewardbox.policy.batching import Pending
from rewardbox.policy.chat_template import prompt_opens_reasoning
from rewardbox.policy.guided import VocabularyIndex, tool_signatures
from rewardbox.policy.interpreter import interpret
from rewardbox.policy.kv_cache import kv_bytes_per_position
from rewardbox.policy.packed_linear import PackedLinears
from rewardbox.policy.precision import resolve_dtype
from rewardbox.policy.prefix_cache import PrefixCache
from rewardbox.policy.running import RowSpec, RunningBatch
from rewardbox.policy.worker import STOP, ContinuousWorker
from rewardbox.process_memory import map_large_blocks
from rewardbox.threads import apply_thread_policy

STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


class LocalPolicy(ContinuousWorker):
    """SmolLM2 (or any causal LM checkpoint directory) served in-process.

    Args:
        checkpoint_dir: a Hugging Face directory (the base checkpoint or a merged one).
        adapter_dir: optional PEFT adapter directory, merged into the weights on load.
        max_batch_size: most rows decoding at once.
        batch_wait_ms: when nothing is decoding, how long the worker waits for more requests after
            the first, ms (it stops waiting once a full batch is queued); requests that arrive while
            rows decode join at the next step without waiting.
        device, dtype: where and how the weights live (``"auto"``: ``precision.resolve_dtype``).
        seed: seeds the generators of rows whose request has no ``seed`` (reproducible runs); None
            draws fresh ones. A request's own ``seed`` seeds its row's generator
            (``sampling.PerRowSampler``), so its tokens do not depend on the other rows of the batch.
        num_threads: ``rewardbox.threads.apply_thread_policy``'s count (``"auto"``: measured). The
            worker thread decodes with ``decode_threads`` (the policy's count; set it to change the
            team from the next worker turn on), prefill with the policy's wide team.
        temperature, max_new_tokens: when set, override every request's values.
        name: policy name for records (defaults to the checkpoint directory name).
        prefix_cache_min_tokens: new rows whose prompts share at least this many leading tokens
            reuse a cached prefix KV (see ``prefix_cache``).
        guided_tool_calls: restrict tool-call names and argument keys to the request's tools while
            the model writes them (``guided``); values and the choice to call stay free.
        kv_cache_mib: most memory the running batch's KV buffer may reserve, MiB; requests that
            would exceed it wait for rows to finish (a lone request always runs). None: no bound.
        episode_kv_mib: most memory finished rows' KV kept for their episode's next turn may hold,
            MiB (``episode_kv``: the next turn prefills only its new tokens); 0 keeps none, None: no
            bound (the store still keeps at most 64 entries).
        pack_weights: decode a bf16 model on a CPU with bf16 units from linear weights packed once
            for oneDNN (``packed_linear``: 1.24-1.29x per decode step at a 1,100-token context, the
            same tokens, one more copy of the weights while decoding); False: plain ``F.linear``.
        shared_prefix: rows that start with one cached prefix keep it once, not a copy each
            (``attention``'s shared-prefix attention: a decode step reads the prefix once for its
            rows), wherever the model takes it (a CPU model with full attention); False: off.

    Attributes:
        model, tokenizer: the live objects; the trainer may use them (train-mode
            toggling is the trainer's job) while holding ``generation_lock``.
    """

    samples_from_a_model = (
        True  # episode limits must fit the golden trajectories (check_policy_budget)
    )
    shared_prefix: bool = True  # the constructor's argument (class doc)

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
        kv_cache_mib: int | None = None,
        episode_kv_mib: int | None = 512,
        pack_weights: bool = True,
        shared_prefix: bool = True,
    ):
        """Load the checkpoint and start the worker thread (arguments: the class doc)."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.device, self.dtype = torch.device(device), resolve_dtype(dtype, device)
        self.thread_policy = apply_thread_policy(num_threads, self.dtype, shared_prefix)
        self.decode_threads = self.thread_policy.threads
        map_large_blocks()  # freed KV buffers go back to the system (process_memory)
        self.checkpoint_dir = Path(checkpoint_dir)
        self.name = name or self.checkpoint_dir.name
        self.max_batch_size, self.batch_wait_s = max_batch_size, batch_wait_ms / 1000.0
        self.temperature, self.max_new_tokens = temperature, max_new_tokens
        self._rng = random.Random(seed) if seed is not None else None
        self.generation_lock, self._weights_version = threading.RLock(), 0
        self.prefix_cache = PrefixCache(
            min_tokens=prefix_cache_min_tokens,
            episode_max_bytes=None if episode_kv_mib is None else int(episode_kv_mib) << 20,
        )
        self.guided_tool_calls, self._vocabulary = guided_tool_calls, None
        self.kv_cache_bytes = None if kv_cache_mib is None else int(kv_cache_mib) << 20
        self.pack_weights, self.shared_prefix = pack_weights, shared_prefix
        self._load_weights(self.dtype, adapter_dir)
        self._start_worker()

    def _load_weights(self, dtype: torch.dtype, adapter_dir: Path | str | None) -> None:
        """Load model and tokenizer, read the context window and stop tokens, merge the adapter if any."""
        self.model, self.tokenizer = _load(self.checkpoint_dir, self.device, dtype)
        packs = self.pack_weights and packed_linear.available(dtype, self.device)
        self.packed_linears = PackedLinears(self.model) if packs else None
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
            self.weights_changed()

    def weights_changed(self) -> None:
        """Tell the policy its weights were updated in place: cached prefix KV is dropped, and rows
        still decoding fail with ``EndpointError`` (a system error: their KV came from the old weights)."""
        with self.generation_lock:
            self.prefix_cache.invalidate()
            self._weights_version = getattr(self, "_weights_version", 0) + 1
            if getattr(self, "packed_linears", None) is not None:
                self.packed_linears.drop()  # repacked at the next decode, never held by the update

    def release_decode_memory(self) -> None:
        """Free what only decoding needs (the packed weights, ``packed_linear``); the next decode
        rebuilds it. The GRPO update calls it, so its peak does not carry the copies."""
        packed = getattr(self, "packed_linears", None)
        if packed is not None:
            with self.generation_lock:
                packed.drop()

    def decode_weights(self) -> contextlib.AbstractContextManager:
        """The context the policy's model calls run in: packed bf16 linear weights where available
        (``packed_linear``), nothing otherwise. Enter it holding ``generation_lock``."""
        packed = getattr(self, "packed_linears", None)
        return contextlib.nullcontext() if packed is None else packed.active(self._weights_version)

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
            self._queue.put(STOP)
            await asyncio.to_thread(self._thread.join)
        self.release_decode_memory()

    def generate_batch(
        self, requests: list[ChatRequest], prompt_ids: list[list[int]]
    ) -> list[Completion]:
        """Decode these requests as one batch to its end (synchronous; same rows as through ``complete``).

        Args:
            requests: the requests, in batch order.
            prompt_ids: their prompt token ids (rendered with ``render_prompt``).

        Returns:
            One ``Completion`` per request: ``completion_token_ids`` end with the
            stop token when ``finish_reason == "stop"``; ``raw_text`` is their
            decoding without it. ``finish_reason == "length"`` when the row's
            budget was used up without a stop token.

        Raises:
            ContextLengthError: a prompt leaves no room in the context window.
        """
        specs = [self._spec(r, p) for r, p in zip(requests, prompt_ids)]
        with self.generation_lock, torch.inference_mode(), self.decode_weights():
            rows = self._new_batch().decode_all(specs)
        return [self._finish(r, p, row) for r, p, row in zip(requests, prompt_ids, rows)]

    def _new_batch(self) -> RunningBatch:
        return RunningBatch(
            self.model,
            self.stop_token_ids,
            self.pad_token_id,
            self.device,
            prefix_cache=self.prefix_cache,
            vocabulary=self._vocabulary_index,
            shared_prefix=None if self.shared_prefix else False,
        )

    def _vocabulary_index(self) -> VocabularyIndex:
        if self._vocabulary is None:
            self._vocabulary = VocabularyIndex(self.tokenizer, int(self.model.config.vocab_size))
        return self._vocabulary

    def _rows_that_fit(self, joiners: list) -> int:
        """How many of ``joiners`` keep the merged batch's KV buffer (rows x (columns + budget left)
        x ``kv_bytes_per_position``) within ``kv_cache_bytes``; at least one when nothing runs."""
        limit = getattr(self, "kv_cache_bytes", None)
        if limit is None:
            return len(joiners)
        per_position = kv_bytes_per_position(self.model.config, next(self.model.parameters()).dtype)
        rows, width, left = self._batch.reserved()
        fit = 0
        for pending in joiners:
            width = max(width, len(pending.prompt_ids))
            left = max(left, self._budget(pending.request, len(pending.prompt_ids)))
            if rows + fit > 0 and (rows + fit + 1) * (width + left) * per_position > limit:
                break
            fit += 1
        return fit

    def _spec(self, request: ChatRequest, prompt_ids: list[int]) -> RowSpec:
        """The batch row of a request (its budget, temperature, seed and guide signatures)."""
        seed = self._row_seeds(
            [request.seed if request.sampling_seed is None else request.sampling_seed]
        )[0]
        guided = self.guided_tool_calls and request.tools
        return RowSpec(
            list(prompt_ids),
            self._budget(request, len(prompt_ids)),
            self._temperature(request),
            seed,
            tool_signatures(request.tools) if guided else {},
        )

    def _temperature(self, request: ChatRequest) -> float:
        return self.temperature if self.temperature is not None else request.temperature

    def _budget(self, request: ChatRequest, prompt_len: int) -> int:
        wanted = self.max_new_tokens if self.max_new_tokens is not None else request.max_new_tokens
        room = self.context_tokens - prompt_len
        if room <= 0:
            raise ContextLengthError(
                f"prompt of {prompt_len} tokens does not fit the context window of {self.name!r}"
            )
        return max(1, min(int(wanted), room))

    def _row_seeds(self, request_seeds: list[int | None]) -> list[int]:
        """One generator seed per row: the request's own, else from the policy's seed, else fresh."""
        rng = self._rng or random.Random()
        return [
            int(s) & 0xFFFF_FFFF_FFFF_FFFF if s is not None else rng.getrandbits(63)
            for s in request_seeds
        ]

    def _completion(
        self,
        request: ChatRequest,
        prompt_ids: list[int],
        row: list[int],
        temperature: float,
        batch_size: int,
        cached_tokens: int = 0,
        logprobs: list[float] | None = None,
    ) -> Completion:
        stop_at = next((i for i, t in enumerate(row) if t in self.stop_token_ids), None)
        completion_ids = row if stop_at is None else row[: stop_at + 1]
        finish_reason = "length" if stop_at is None else "stop"
        text_ids = completion_ids if stop_at is None else completion_ids[:-1]
        raw_text = self.tokenizer.decode(text_ids, skip_special_tokens=False)
        reasoning_open = prompt_opens_reasoning(
            self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        )
        return Completion(
            raw_text=raw_text,
            interpretation=interpret(
                raw_text, request.tools, finish_reason=finish_reason, reasoning_open=reasoning_open
            ),
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
    """Load model and tokenizer from a local directory only (no hub access); a model on a CPU gets
    ``attention.NAME`` (bf16 decode steps without the CPU's slow unmasked kernel; shared prefixes)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rewardbox.policy.attention import implementation_for

    if not (checkpoint_dir / "config.json").is_file():
        raise FileNotFoundError(
            f"{checkpoint_dir} is not a checkpoint directory (no config.json); "
            "build one with rewardbox.policy.checkpoint.convert_gguf_to_safetensors"
        )
    tokenizer = AutoTokenizer.from_pretrained(checkpoint_dir, local_files_only=True)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(
        checkpoint_dir,
        dtype=dtype,
        local_files_only=True,
        attn_implementation=implementation_for(device, dtype),
    )
    model.to(device)
    model.eval()
    return model, tokenizer
