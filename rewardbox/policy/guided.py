"""Guided decoding of tool-call names and argument keys for the local policy.

A small model that opens ``<tool_call>{"name": "`` usually starts the right
name and then drifts: ``cancel_order`` becomes ``cancel_order_cancel_to_online``
(measured on SmolLM2-135M-Instruct, temperature 0.5: 0 of 16 first turns named
a real tool for "please cancel my order 6021", though 15 of 16 opened a call).
``ToolCallGuide`` is a ``transformers`` logits processor that, while a row is
inside the name string of a call (or a key string of its ``arguments``
object), allows only the tokens that keep that string a prefix of a real tool
name (or of one of that tool's parameter names) followed by its closing quote.
Everywhere else, including every argument *value*, the distribution is left
alone: choosing the tool, the argument values, and whether to call at all stay
the model's job. This is the name-level case of the grammar-constrained
decoding that serving stacks offer for tool calls (vLLM structured outputs,
llama.cpp GBNF grammars).

The mask is computed from each token's own decoded text against the row's
decoded completion so far; masks per (allowed strings, partial text) are
cached, so a name costs one pass over the vocabulary the first time it is seen.
When no vocabulary token keeps the partial string a prefix of an allowed one
(the decoded text drifted, e.g. a multi-byte piece that decodes differently in
context, or the vocabulary lacks the one piece needed), the guide never
releases the constraint: it forces the closing quote of the string, so the
call names a tool that does not exist and the interpreter reports it to the
model as a policy failure, and it records a ``ConstraintEvent`` (the local
policy adds the event ``"guided_string_forced_closed"`` to that completion).
A vocabulary with no token that starts with ``"`` cannot close a string at
all: ``GuidedDecodingError``, a system error raised before any token is chosen.

Training: the mask is a pure function of the decoded prefix and the turn's
tools, so the GRPO trainer recomputes it with this same class and scores each
token under the distribution that sampled it (``rewardbox.training.logprobs``).
Set ``policy.guided_tool_calls: false`` to measure or train the unguided model.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LogitsProcessor

from rewardbox.errors import EndpointError
from rewardbox.policy.base import Completion
from rewardbox.sandbox.base import ToolSpec

EVENT_GUIDED_FORCED_CLOSE = "guided_string_forced_closed"

_NAME_OPEN = re.compile(r'<tool_call>\s*\{\s*"name"\s*:\s*"([^"]*)$')
_KEY_OPEN = re.compile(
    r'<tool_call>\s*\{\s*"name"\s*:\s*"([^"]+)"\s*,\s*"arguments"\s*:\s*\{(?:[^{}]*,)?\s*"([^"]*)$'
)


def tool_signatures(tools: Sequence[ToolSpec | dict[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Tool name -> its parameter names, for OpenAI-style dicts or ``ToolSpec``s."""
    out: dict[str, tuple[str, ...]] = {}
    for tool in tools:
        if isinstance(tool, ToolSpec):
            name, params = tool.name, tool.input_schema or {}
        else:
            fn = tool.get("function", tool)
            name, params = fn["name"], fn.get("parameters") or {}
        out[name] = tuple((params.get("properties") or {}).keys())
    return out


def open_string(
    text: str, signatures: dict[str, tuple[str, ...]]
) -> tuple[tuple[str, ...], str] | None:
    """Which strings may continue ``text``, and the part already written.

    Returns:
        ``(allowed, partial)`` when ``text`` ends inside a tool-call name string
        (``allowed``: every tool name) or inside a key string of the arguments
        of a known tool (``allowed``: that tool's parameter names); else None.
    """
    match = _NAME_OPEN.search(text)
    if match:
        return tuple(signatures), match.group(1)
    match = _KEY_OPEN.search(text)
    if match and match.group(1) in signatures and signatures[match.group(1)]:
        return signatures[match.group(1)], match.group(2)
    return None


class GuidedDecodingError(EndpointError):
    """The vocabulary cannot express the constraint (no token closes a string): a system error."""


@dataclass(frozen=True)
class ConstraintEvent:
    """A row whose name or key string no token could continue; its closing quote was forced.

    Attributes:
        row: the batch row. partial: the string written so far.
        allowed: the strings it had to be a prefix of.
    """

    row: int
    partial: str
    allowed: tuple[str, ...]


class VocabularyIndex:
    """Each token's decoded text, and cached allow-masks per (allowed strings, partial)."""

    def __init__(self, tokenizer: Any, vocab_size: int):
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.pieces: list[str] = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        self._masks: dict[tuple[tuple[str, ...], str], torch.Tensor | None] = {}
        self._closing: torch.Tensor | None = None

    def mask(self, allowed: tuple[str, ...], partial: str) -> torch.Tensor | None:
        """Bool mask over the model's vocabulary (shape ``(vocab_size,)``), or None if nothing fits.

        A token is allowed when ``partial + token`` is a prefix of ``s + '"'`` for
        some allowed string ``s``, or starts with a whole ``s + '"'`` (a token
        that closes the string and goes on, e.g. ``",``).
        """
        key = (allowed, partial)
        if key not in self._masks:
            targets = [s + '"' for s in allowed if s.startswith(partial)]
            keep = torch.zeros(self.vocab_size, dtype=torch.bool)
            if targets:
                rests = [t[len(partial) :] for t in targets]
                for token_id, piece in enumerate(self.pieces[: self.vocab_size]):
                    if piece and any(r.startswith(piece) or piece.startswith(r) for r in rests):
                        keep[token_id] = True
            self._masks[key] = keep if bool(keep.any()) else None
        return self._masks[key]

    def closing_mask(self) -> torch.Tensor:
        """Bool mask (shape ``(vocab_size,)``) of the tokens that start with ``"`` (close the open string).

        Raises:
            GuidedDecodingError: no token starts with ``"`` (a system error: the
                constraint cannot be kept with this vocabulary).
        """
        if self._closing is None:
            keep = torch.tensor(
                [piece.startswith('"') for piece in self.pieces[: self.vocab_size]]
                + [False] * max(0, self.vocab_size - len(self.pieces)),
                dtype=torch.bool,
            )
            if not bool(keep.any()):
                raise GuidedDecodingError(
                    "guided tool calls: no vocabulary token starts with '\"', "
                    "so a tool name cannot be closed; set policy.guided_tool_calls: false"
                )
            self._closing = keep
        return self._closing


class ToolCallGuide(LogitsProcessor):
    """Mask row i's logits to real tool names / parameter keys while it writes one.

    ``events`` lists the rows whose string had to be force-closed (see module docstring).

    Args:
        index: the policy's ``VocabularyIndex``.
        signatures: per row, tool name -> parameter names (empty dict: row unguided).
        prompt_len: width of the (left-padded) prompt; generated tokens follow it.
    """

    def __init__(
        self, index: VocabularyIndex, signatures: list[dict[str, tuple[str, ...]]], prompt_len: int
    ):
        self.index = index
        self.signatures = signatures
        self.prompt_len = prompt_len
        self.events: list[ConstraintEvent] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """``LogitsProcessor`` form: every row, its completion read from ``input_ids[:, prompt_len:]``."""
        if input_ids.shape[1] <= self.prompt_len:
            return scores
        completions = [ids.tolist() for ids in input_ids[:, self.prompt_len :]]
        return self.apply(completions, scores, range(len(completions)))

    def apply(
        self, completions: Sequence[list[int]], scores: torch.Tensor, rows: Sequence[int]
    ) -> torch.Tensor:
        """Mask the rows that are inside a tool name or key string.

        Args:
            completions: per entry of ``rows``, that row's completion tokens so far.
            scores: ``[len(rows), V]`` logits of this step (not modified; a masked copy is returned).
            rows: the batch rows (indexes into ``signatures``; events name them).

        Returns:
            The scores with disallowed tokens at ``-inf`` on the guided rows.

        Raises:
            GuidedDecodingError: no vocabulary token can close the string (a system error).
        """
        out = scores
        for i, (row, completion) in enumerate(zip(rows, completions)):
            signatures = self.signatures[row]
            if not signatures or not completion:
                continue
            text = self.index.tokenizer.decode(completion, skip_special_tokens=False)
            if "<tool_call>" not in text:
                continue
            state = open_string(text, signatures)
            if state is None:
                continue
            keep = self.index.mask(*state)
            if keep is None:
                keep = self.index.closing_mask()
                self.events.append(ConstraintEvent(row, state[1], state[0]))
            if out is scores:
                out = scores.clone()
            width = min(out.shape[1], keep.shape[0])
            out[i, :width] = torch.where(keep[:width].to(out.device), out[i, :width], float("-inf"))
            out[i, width:] = float("-inf")
        return out


def record_forced_close(completion: Completion, event: ConstraintEvent) -> None:
    """Mark a completion whose string the guide force-closed: event ``"guided_string_forced_closed"``
    in its interpretation (so the trajectory keeps it) and the partial string under ``extra``."""
    events = completion.interpretation.events
    if EVENT_GUIDED_FORCED_CLOSE not in events:
        completion.interpretation = dataclasses.replace(
            completion.interpretation, events=(*events, EVENT_GUIDED_FORCED_CLOSE)
        )
    completion.extra.setdefault("guided_forced_close", []).append(event.partial)
