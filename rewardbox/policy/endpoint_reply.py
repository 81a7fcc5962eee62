"""Reading an OpenAI-compatible endpoint's replies: finish reason, malformed replies, context refusals.

A turn's finish reason: :func:`finish_reason_of`. A 2xx reply that is not a chat completion:
:func:`check_reply` raises :class:`MalformedReplyError` (``EndpointPolicy`` retries it as
transient, then reports a system error of kind ``endpoint_malformed_reply``).

**Context.** A chat request whose prompt plus ``max_completion_tokens`` exceeds the server's context is
refused with HTTP 400 (vLLM, OpenAI, llama.cpp's server). That refusal is the policy's own
limit, not an infrastructure fault: ``EndpointPolicy`` never re-sends the same body. It reads
the numbers the reply states (:func:`context_rejection`), re-sends once with
``max_completion_tokens`` capped to the room left, and raises ``ContextLengthError`` (the
episode ends as ``context_limit``, graded on the state it reached) when no room is left or
the numbers cannot be read. The served context comes from the reply itself, else from the
policy's ``context_tokens`` setting, else from the server's model list (vLLM reports
``max_model_len`` on each entry of ``GET /v1/models``, :func:`served_context_tokens`).
The rule is documented in docs/scale.md, "Context limits".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import openai

from rewardbox.errors import MalformedReplyError, check_reply, reply_cause  # noqa: F401 - the reply's readers, here

_MARKERS = (
    "context length",
    "context_length_exceeded",
    "exceed_context_size",
    "context size",
    "context window",
)
_CONTEXT = (
    r"maximum context length is (\d+)",
    r"available context size \((\d+) tokens?\)",
    r"n_ctx\W+(\d+)",
)
_INPUT = (
    r"n_prompt_tokens\W+(\d+)",
    r"(\d+) input tokens",
    r"\((\d+) in the messages",
    r"messages resulted in (\d+) tokens",
)


@dataclass(frozen=True)
class ContextRejection:
    """A server's "maximum context length" refusal, with the numbers it stated.

    Attributes:
        message: the server's text.
        context_tokens: the served context (prompt + completion), tokens, or None when not stated.
        input_tokens: the prompt's length in the server's tokens, or None when not stated.
    """

    message: str
    context_tokens: int | None
    input_tokens: int | None

    def room_tokens(self, known_context_tokens: int | None) -> int | None:
        """Completion tokens that still fit: context - input; None when either is unknown."""
        context = self.context_tokens or known_context_tokens
        return None if context is None or self.input_tokens is None else context - self.input_tokens


def _first(patterns: tuple[str, ...], text: str) -> int | None:
    for pattern in patterns:
        found = re.search(pattern, text, flags=re.IGNORECASE)
        if found:
            return int(found.group(1))
    return None


class ContextRejected(Exception):
    """A context-length refusal on its way from ``EndpointPolicy._create`` to ``complete`` (never leaves the policy)."""

    def __init__(self, rejection: ContextRejection, attempts: int) -> None:
        super().__init__(rejection.message)
        self.rejection, self.attempts = rejection, attempts


def context_rejection(exc: BaseException) -> ContextRejection | None:
    """The refusal in ``exc`` when it is an HTTP 400 about the context length, else None.

    Reads vLLM's two wordings ("... maximum context length is 32 tokens and your request has 30
    input tokens (10 > 32 - 30)" and "... However, you requested 40 tokens (30 in the messages, 10
    in the completion)"), OpenAI's ("... your messages resulted in N tokens", code
    ``context_length_exceeded``) and llama.cpp's (``n_prompt_tokens``, ``n_ctx``).
    """
    if not isinstance(exc, openai.BadRequestError):
        return None
    text = f"{exc} {exc.body!r} {getattr(exc, 'code', '') or ''}"
    if not any(marker in text.lower() for marker in _MARKERS):
        return None
    return ContextRejection(str(exc), _first(_CONTEXT, text), _first(_INPUT, text))


async def served_context_tokens(client: openai.AsyncOpenAI, model: str) -> int | None:
    """``max_model_len`` of ``model`` in the server's model list (vLLM), or None when not reported.

    A server that does not answer the list, or lists no such field, gives None (the caller then
    relies on the numbers in its refusals); never raises for it.
    """
    try:
        page = await client.models.list()
    except (openai.APIError, ValueError):
        return None
    for entry in getattr(page, "data", None) or []:
        extra: dict[str, Any] = getattr(entry, "model_extra", None) or {}
        value = extra.get("max_model_len")
        if getattr(entry, "id", None) == model and isinstance(value, int) and value > 0:
            return value
    return None


def finish_reason_of(
    raw: str | None, completion_tokens: int | None, max_completion_tokens: int | None
) -> str:
    """``"length"`` when the server says so or the completion used its whole budget, else ``"stop"``.

    A server may report another reason (``tool_calls``) for a turn that reached its limit;
    reaching ``max_completion_tokens`` is the evidence that counts, so a turn that happened to
    end on its last allowed token is counted as cut too (docs/scale.md, "Truncated turns").

    Args:
        raw: the server's ``finish_reason``; completion_tokens: ``usage.completion_tokens``
            (None when not reported); max_completion_tokens: the request's budget.
    """
    reached = (
        isinstance(completion_tokens, int)
        and isinstance(max_completion_tokens, int)
        and 0 < max_completion_tokens <= completion_tokens
    )
    return "length" if raw == "length" or reached else "stop"
