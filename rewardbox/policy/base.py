"""The policy contract: one chat completion per call, raw text interpreted once.

Every policy (local transformers model, OpenAI-compatible endpoint, scripted)
returns a ``Completion`` whose ``interpretation`` came from
``rewardbox.policy.interpreter.interpret`` (or, for endpoints that return
structured tool calls, from ``interpreter.type_tool_call``), so training and
evaluation read model output identically (docs/method.md, "Parser parity").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from rewardbox.sandbox.base import ToolSpec


@dataclass(frozen=True)
class ToolCall:
    """A typed, dispatchable tool call. ``arguments`` is always a dict."""

    id: str
    name: str
    arguments: dict[str, Any]
    unclosed: bool = False


@dataclass(frozen=True)
class ToolCallError:
    """A malformed call. Its ``message`` is shown to the model as the tool output.

    This is a policy failure, never a system error: nothing is dispatched.
    """

    id: str
    name: str | None
    raw: str
    message: str


@dataclass(frozen=True)
class Interpretation:
    """Raw model text split into reasoning, visible content and tool calls.

    Attributes:
        reasoning: text inside ``<think>...</think>`` (never parsed for calls).
        content: visible assistant text, tool-call markup removed.
        tool_calls: well-formed calls, arguments typed from the tool schema.
        errors: malformed calls, each becomes a tool observation.
        events: flags such as ``"truncated_call"``, ``"unclosed_call"``,
            ``"truncated_reasoning"`` (the budget cut an unclosed reasoning block)
            or ``"guided_string_forced_closed"`` (local guide, ``guided.py``).
        call_order: ids of ``tool_calls`` and ``errors`` in the order the model
            wrote them (so history can be rebuilt in order).
    """

    reasoning: str = ""
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    errors: tuple[ToolCallError, ...] = ()
    events: tuple[str, ...] = ()
    call_order: tuple[str, ...] = ()


@dataclass
class ChatRequest:
    """One completion request.

    Attributes:
        messages: OpenAI-format history: ``{role, content}``; assistant turns may
            carry ``tool_calls: [{id, type: function, function: {name, arguments(dict)}}]``;
            tool turns carry ``tool_call_id`` and ``name``.
        tools: tool specs the agent may call (builtin end-turn tools included).
        max_new_tokens: generation budget for this completion, tokens.
        temperature: sampling temperature; 0 means greedy.
        seed: the episode's seed (``episode.seed + trial``), or None; endpoints pass it
            on, scripted mixes pick per (task, seed).
        sampling_seed: the seed of this turn's random draws (one per task uid,
            trial and agent turn, ``episode.seeds.turn_seed``), or None; the local
            policy seeds the row's generator with it (else with ``seed``).
        task: the task being run (scripted policies read its golden actions);
            real policies must ignore it.
    """

    messages: list[dict[str, Any]]
    tools: list[ToolSpec]
    max_new_tokens: int = 256
    temperature: float = 1.0
    seed: int | None = None
    sampling_seed: int | None = None
    task: Any = None


@dataclass
class Completion:
    """One agent completion.

    Attributes:
        raw_text: exactly what the model produced (decoded completion tokens).
        interpretation: the one interpreter's reading of ``raw_text``.
        finish_reason: ``"stop"`` or ``"length"`` (the turn was cut: a token limit or the context
            limit was reached; docs/scale.md, "Truncated turns").
        raw_finish_reason: the server's or sampler's own reason (``"tool_calls"``, ``"completed"``,
            ...), kept as given; None when the policy has none.
        input_tokens, cached_input_tokens, output_tokens: token usage of this call.
        duration_s: wall time of the call, seconds (a local policy: from enqueueing the request).
        prompt_token_ids, completion_token_ids: local policies only; the exact
            token ids, so training can score policy tokens without re-tokenising.
        completion_logprobs: local policies only; per completion token, its
            natural-log probability under the distribution it was sampled from
            (after temperature and the tool-call guide): GRPO's ``old_logprobs``.
    """

    raw_text: str
    interpretation: Interpretation
    finish_reason: str = "stop"
    raw_finish_reason: str | None = None
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Policy(Protocol):
    """An agent policy. ``complete`` is async so concurrent episodes can batch."""

    name: str

    async def complete(self, request: ChatRequest) -> Completion:
        """Return one completion. Raises ``EndpointError`` (system error) on faults."""

    async def aclose(self) -> None:
        """Release resources (threads, clients)."""
