"""Continuous batching: one decode batch that requests join at the next step and leave when done.

A batch that forms, runs to its end and only then takes the requests that
arrived meanwhile decodes few rows per step when episodes' turns arrive
staggered (issue 28 measured 3.0-3.85 rows per decode step with 8 episodes in
flight). ``RunningBatch`` keeps one batch alive instead:

* ``admit(specs)`` prefills the new rows on their own (their shared prefix
  comes from the ``PrefixCache`` when cached, so a hit prefills only each row's
  suffix), draws each row's first token, and merges the rows that go on into
  the running batch (``decode.merge_rows``: one KV buffer, columns
  right-aligned, the columns a row never had masked out);
* ``step()`` runs one forward pass for every running row and draws each row's
  next token; a row that produced a stop token or used its budget leaves at
  once and is returned (``FinishedRow``).

Rows that came from one cached prefix keep it shared (``attention.SharedPrefix``): their own KV
buffer holds only the columns after it, and each step reads the prefix once for the batch
(``shared_prefix``; on by default where the model takes it).

Each row keeps its own generator (seeded from its request), temperature, budget
and tool-call guide state, indexed by its slot, so its tokens and sampler
log-probs do not depend on when it joined or which rows it met (up to the float
rounding of batched matrix products, as with ``generate``;
``tests/policy/test_running.py``). Models whose cache cannot be merged (sliding
windows) take new rows only when the batch is empty (``joinable``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rewardbox.policy.attention import SharedPrefix, takes_shared_prefix
from rewardbox.policy.decode import (
    Rows,
    advance,
    choose_tokens,
    full_attention,
    keep_rows,
    merge_rows,
    prefill,
)
from rewardbox.policy.episode_kv import row_entry
from rewardbox.policy.guided import ConstraintEvent, ToolCallGuide, VocabularyIndex
from rewardbox.policy.prefix_cache import PrefixCache, prefill_groups
from rewardbox.policy.sampling import PerRowSampler

log = logging.getLogger(__name__)


@dataclass
class RowSpec:
    """One request as a batch row: prompt ids, most new tokens (>= 1), temperature (0: greedy), seed,
    and its tool signatures for the guide (empty: unguided)."""

    prompt_ids: list[int]
    budget: int
    temperature: float
    seed: int
    signatures: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass
class FinishedRow:
    """A row that left the batch: its new tokens (the stop token kept), their sampler log-probs,
    the guide's forced closes, prompt tokens served from the prefix cache, and the most rows it decoded with."""

    slot: int
    tokens: list[int]
    logprobs: list[float]
    events: list[ConstraintEvent]
    cached_tokens: int
    peak_rows: int


def left_pad(
    prompts: list[list[int]], pad_token_id: int, device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``([B, W] ids, [B, W] mask)`` of left-padded prompts."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


class RunningBatch:
    """The rows decoding now; not thread-safe (the policy's worker thread owns it).

    Args:
        model: a causal LM (``decode``'s requirements), in eval mode; calls run under ``torch.inference_mode``
            (the caller's).
        stop_token_ids: tokens that end a row.
        pad_token_id, device: for left-padding new rows.
        prefix_cache: reuse of shared-prefix KV for new rows, or None.
        vocabulary: builds the guide's ``VocabularyIndex`` (called once, when the first guided row joins).
        shared_prefix: keep a cached prefix once for the rows that start with it (``attention``'s
            shared-prefix attention) rather than a copy in each row; None: where the model takes it
            (``attention.takes_shared_prefix``).
    """

    def __init__(
        self,
        model: Any,
        stop_token_ids: list[int],
        pad_token_id: int,
        device: Any,
        *,
        prefix_cache: PrefixCache | None = None,
        vocabulary: Callable[[], VocabularyIndex] | None = None,
        shared_prefix: bool | None = None,
    ):
        self.model, self.stops = model, {int(t) for t in stop_token_ids}
        capable = takes_shared_prefix(model)  # full attention in every layer included
        if shared_prefix and not capable:
            raise ValueError(
                "this model cannot take a shared prefix (attention.takes_shared_prefix)"
            )
        self.shared_prefix = capable if shared_prefix is None else bool(shared_prefix)
        self.pad_token_id, self.device = pad_token_id, device
        self.prefix_cache, self._vocabulary = prefix_cache, vocabulary
        self.steps = self.row_steps = (
            0  # decode forwards run, and rows they carried (rows per step = ratio)
        )
        self._reset()

    def _reset(self) -> None:
        self.rows: Rows | None = None
        self.sampler = PerRowSampler([], self.device)
        self.completions: list[list[int]] = []
        self._specs: list[RowSpec] = []
        self._signatures: list[dict[str, tuple[str, ...]]] = []
        self._cached: list[int] = []
        self._roots: list[tuple[Any, int, int]] = []  # (prefix entry, its columns, generation)
        self._peak: list[int] = []
        self.guide: ToolCallGuide | None = None

    def __len__(self) -> int:
        return 0 if self.rows is None else len(self.rows.slots)

    @property
    def joinable(self) -> bool:
        """Whether ``admit`` may run now (the batch is empty, or its cache can take more rows)."""
        return self.rows is None or self.rows.mergeable

    def admit(self, specs: list[RowSpec]) -> tuple[list[int], list[FinishedRow]]:
        """Prefill ``specs`` and draw their first tokens; rows that go on join the batch.

        Returns:
            (the rows' slots in ``specs`` order, the rows that already finished).

        Raises:
            RuntimeError: the batch is not ``joinable``. A model fault propagates (a system error) and
            fails the whole admit: rows an earlier prefill call of it already merged leave the batch.
        """
        if not self.joinable:
            raise RuntimeError("this batch's cache cannot take new rows; admit when it is empty")
        if self.rows is None:
            self._reset()
        slots = [self._add(spec) for spec in specs]
        finished: list[FinishedRow] = []
        try:
            for group in self._groups([s.prompt_ids for s in specs]):
                finished += self._prefill([specs[i] for i in group], [slots[i] for i in group])
        except BaseException:
            self.drop(slots)  # the caller fails every row of the admit: none may decode on
            raise
        return slots, finished

    def _groups(self, prompts: list[list[int]]) -> list[list[int]]:
        """The prefill calls new rows are split into (``prefix_cache.prefill_groups``); one call without a
        cache, or for a model whose rows cannot be merged (sliding windows: a second call could not join)."""
        if self.prefix_cache is None or not full_attention(self.model.config):
            return [list(range(len(prompts)))]
        cache = self.prefix_cache
        return prefill_groups(
            prompts, cache.cached_len, cache.min_tokens, own_cached_len=cache.own_cached_len
        )

    def _prefill(self, specs: list[RowSpec], slots: list[int]) -> list[FinishedRow]:
        """One prefill call for ``specs``; the rows that go on join the running batch."""
        ids, mask, cache, root = self._inputs([s.prompt_ids for s in specs])
        cached = 0 if cache is None else cache.get_seq_length()
        shared = None
        if self.shared_prefix and root[0] is not None and 0 < root[1] <= cached:
            shared = SharedPrefix(tuple(specs[0].prompt_ids[: root[1]]), root[0])
        rows, logits = prefill(
            self.model, ids, mask, cache, ids.shape[1] + max(s.budget for s in specs), slots, shared
        )
        generation = None if self.prefix_cache is None else self.prefix_cache.episodes.generation
        for slot in slots:
            self._cached[slot] = cached
            self._roots[slot] = (*root, generation)
        finished = self._draw(rows, logits)
        if rows.slots:
            self.rows = (
                rows if self.rows is None else merge_rows(self.rows, rows, self._capacity(rows))
            )
        return finished

    def step(self) -> list[FinishedRow]:
        """One forward pass for every running row; returns the rows that finished (left the batch)."""
        if self.rows is None:
            return []
        self.steps, self.row_steps = self.steps + 1, self.row_steps + len(self.rows.slots)
        finished = self._draw(self.rows, advance(self.model, self.rows))
        if not self.rows.slots:
            self.rows = None
        return finished

    def drop(self, slots: list[int]) -> None:
        """Remove running rows (their requests were cancelled) without finishing them."""
        if self.rows is None or not slots:
            return
        gone = set(slots)
        keep = [i for i, slot in enumerate(self.rows.slots) if slot not in gone]
        if keep:
            keep_rows(self.rows, keep)
        else:
            self.rows = None

    def decode_all(self, specs: list[RowSpec]) -> list[FinishedRow]:
        """Admit ``specs`` into an empty batch and decode until every row finished (in ``specs`` order)."""
        slots, done = self.admit(specs)
        while self.rows is not None:
            done += self.step()
        by_slot = {row.slot: row for row in done}
        return [by_slot[slot] for slot in slots]

    def _add(self, spec: RowSpec) -> int:
        slot = self.sampler.add_row(spec.seed, spec.temperature)
        self._specs.append(spec)
        self.completions.append([])
        self._signatures.append(spec.signatures)
        self._cached.append(0)
        self._roots.append((None, 0, None))
        self._peak.append(0)
        if spec.signatures and self.guide is None and self._vocabulary is not None:
            self.guide = ToolCallGuide(self._vocabulary(), self._signatures, prompt_len=0)
        return slot

    def _inputs(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor, Any, tuple]:
        """(ids, mask, prefix cache or None, root: the kept prefix entry and its columns) for new rows."""
        prepared = None
        if self.prefix_cache is not None:
            prepared = self.prefix_cache.prepare_rows(
                self.model, prompts, self.pad_token_id, self.device
            )
        if prepared is None:
            return (*left_pad(prompts, self.pad_token_id, self.device), None, (None, 0))
        inputs = prepared[0]
        return inputs["input_ids"], inputs["attention_mask"], inputs["cache"], prepared[2]

    def reserved(self) -> tuple[int, int, int]:
        """(running rows, KV columns, largest budget left to a row): what the KV buffer reserves
        per row is columns + budget left (``_capacity``)."""
        if self.rows is None:
            return 0, 0, 0
        left = max(self._specs[s].budget - len(self.completions[s]) for s in self.rows.slots)
        return len(self.rows.slots), self.rows.cache.get_seq_length(), left

    def _capacity(self, joining: Rows) -> int:
        """KV positions a merged batch needs: its width plus the largest budget left to any row."""
        width = max(self.rows.cache.get_seq_length(), joining.cache.get_seq_length())
        left = max(
            self._specs[s].budget - len(self.completions[s])
            for s in self.rows.slots + joining.slots
        )
        return width + max(1, left)

    def _draw(self, rows: Rows, logits: torch.Tensor) -> list[FinishedRow]:
        """Choose each row's token; rows that stop or run out of budget leave ``rows`` and are returned."""
        guides = [self.guide] if self.guide is not None else []
        rows.last = choose_tokens(logits, rows.slots, self.completions, self.sampler, guides)
        keep, finished = [], []
        for i, (slot, token) in enumerate(zip(rows.slots, rows.last.tolist())):
            self.completions[slot].append(token)
            self._peak[slot] = max(self._peak[slot], len(rows.slots))
            if token not in self.stops and len(self.completions[slot]) < self._specs[slot].budget:
                keep.append(i)
            else:
                self._keep_kv(rows, i, slot)
                finished.append(self._finished(slot))
        if not keep:
            rows.slots = []
        else:
            keep_rows(rows, keep)
        return finished

    def _keep_kv(self, rows: Rows, index: int, slot: int) -> None:
        """Hand a finished row's KV to the prefix cache for its episode's next turn (``episode_kv``):
        its prompt and completion tokens but the last (never fed). Sliding-window caches keep none."""
        if self.prefix_cache is None or not rows.mergeable:
            return
        base, base_len, generation = self._roots[slot]
        offset = 0
        for prefix in rows.shared:
            if bool(prefix.using(len(rows.slots))[index]):
                base = prefix.source  # its first columns are the row's first tokens' KV
                base_len = offset = prefix.length
        tokens = self._specs[slot].prompt_ids + self.completions[slot][:-1]
        try:
            entry = row_entry(rows, index, len(tokens), base, base_len, offset)
        except ValueError:  # a layout this path does not know: reuse nothing, decode on
            log.warning("episode KV of a finished row not kept", exc_info=True)
            return
        self.prefix_cache.keep_episode(tokens, entry, generation)

    def _finished(self, slot: int) -> FinishedRow:
        events = [] if self.guide is None else [e for e in self.guide.events if e.row == slot]
        return FinishedRow(
            slot,
            list(self.completions[slot]),
            list(self.sampler.logprobs[slot]),
            events,
            self._cached[slot],
            self._peak[slot],
        )
