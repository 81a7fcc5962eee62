"""A policy behind any OpenAI-compatible chat-completions endpoint (vLLM, OpenAI, ...).

Request body as docs/thinkingbox.md, "Model requests": messages, tools (``parameters`` +
``additionalProperties: false``), ``parallel_tool_calls: false``, temperature,
``max_completion_tokens``, seed. Structured ``tool_calls`` are typed with
``type_tool_call``; ``content`` goes through ``interpret`` as well, so a server
without a tool parser (Hermes calls written in text) reads the same. Reasoning
(``reasoning_content`` or the configured field) is kept, never parsed for calls.

Retries follow docs/thinkingbox.md, "Retries" (``BackoffAsyncClient``): delay ``uniform(0, min(2**(n-1), 32))`` s;
429 without limit by default, honouring ``Retry-After`` (capped at 32 s); 5xx up to
``max_retries``; timeouts and connection errors up to ``max_timeout_retries``;
any other 4xx at once. A reply that is not a chat completion (not JSON, no choice, no
message) is retried like a 5xx (``max_retries``) and then is an ``EndpointError`` of kind
``endpoint_malformed_reply`` naming the URL and the parse error (``endpoint_reply``). What
is left after retries is an ``EndpointError``: a system error, never a policy failure.

**Context.** An HTTP 400 "maximum context length" is the policy's limit, never retried
with the same body: re-sent once with ``max_completion_tokens`` capped to the room the
reply states, or ``ContextLengthError`` (the episode ends as ``context_limit``) when no
room is left (``rewardbox.policy.endpoint_reply``).

**Finish reason.** The server's own reason is kept (``raw_finish_reason``); the turn is
``"length"`` by ``endpoint_reply.finish_reason_of`` (docs/scale.md, "Truncated turns").
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import Any

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_never,
    wait_random_exponential,
)

from rewardbox.errors import ContextLengthError, EndpointError, endpoint_cause
from rewardbox.policy.base import ChatRequest, Completion
from rewardbox.policy.endpoint_reply import (
    ContextRejected,
    ContextRejection,
    MalformedReplyError,
    check_reply,
    context_rejection,
    finish_reason_of,
    served_context_tokens,
)
from rewardbox.policy.endpoint_wire import api_message, api_tool, combine, reasoning_of
from rewardbox.sandbox.base import ToolSpec


class _RetryBudget:
    """Per-kind retry counters for one request (docs/thinkingbox.md, "Retries")."""

    def __init__(
        self, max_retries: int, max_timeout_retries: int, max_rate_limit_retries: int | None
    ):
        self.limits = {
            "server": max_retries,
            "timeout": max_timeout_retries,
            "rate_limit": max_rate_limit_retries,
            "malformed": max_retries,
        }
        self.used: Counter[str] = Counter()

    @staticmethod
    def kind(exc: BaseException) -> str | None:
        if isinstance(exc, openai.RateLimitError):
            return "rate_limit"
        if isinstance(exc, openai.APIStatusError):
            return "server" if exc.status_code >= 500 else None
        if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
            return "timeout"
        if isinstance(exc, (json.JSONDecodeError, MalformedReplyError)):
            return "malformed"
        return None

    def allows(self, exc: BaseException) -> bool:
        kind = self.kind(exc)
        if kind is None:
            return False
        self.used[kind] += 1
        limit = self.limits[kind]
        return limit is None or self.used[kind] <= limit


def _retry_after_s(exc: BaseException | None) -> float | None:
    response = getattr(exc, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class EndpointPolicy:
    """Chat completions from an OpenAI-compatible server, via the official ``openai`` client.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        api_key_env: environment variable holding the key (read now; the key
            is never stored in config). Unset means the placeholder ``"EMPTY"``.
        api_key: the key itself (the Dagster resource passes its ``dg.EnvVar`` value);
            it wins over ``api_key_env`` and is never pickled (a Ray worker's copy reads
            ``api_key_env`` from its own environment).
        temperature, max_tokens: when set, override every request's values.
        timeout_s: per-attempt timeout, seconds.
        max_retries: retries on 5xx; max_timeout_retries: on timeouts and
            connection errors; max_rate_limit_retries: on 429 (None: no limit).
        backoff_max_s: cap of the backoff delay and of ``Retry-After``, seconds.
        reasoning_field: message field holding reasoning (vLLM: ``reasoning_content``
            or ``reasoning``).
        reasoning_open: the served template's generation prompt opens ``<think>``
            and the server splits no reasoning out, so ``content`` begins inside it.
        extra_body: extra JSON fields sent with every request (e.g. ``reasoning_effort``).
        name: policy name for records (default: the model name).
        context_tokens: the served context (prompt + completion), tokens; None reads it from
            a context-length refusal or, when that states no context, from ``GET /v1/models``
            (vLLM's ``max_model_len``). See the module docstring, "Context".
    """

    samples_from_a_model = (
        True  # episode limits must fit the golden trajectories (check_policy_budget)
    )

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        api_key: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 5,
        max_timeout_retries: int = 10,
        max_rate_limit_retries: int | None = None,
        backoff_max_s: float = 32.0,
        reasoning_field: str = "reasoning_content",
        reasoning_open: bool = False,
        extra_body: dict[str, Any] | None = None,
        name: str | None = None,
        context_tokens: int | None = None,
    ):
        """Create the client; no request is made here (arguments: the class doc)."""
        self.base_url, self.model, self.name = base_url, model, name or model
        self.temperature, self.max_tokens = temperature, max_tokens
        self.reasoning_field, self.reasoning_open = reasoning_field, reasoning_open
        self.extra_body = dict(extra_body or {})
        self.backoff_max_s, self.context_tokens = backoff_max_s, context_tokens
        self._limits = (max_retries, max_timeout_retries, max_rate_limit_retries)
        self._api_key_env, self._api_key, self._timeout_s = api_key_env, api_key, timeout_s
        self._client = self._make_client()

    def _make_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._api_key or os.environ.get(self._api_key_env) or "EMPTY",
            timeout=self._timeout_s,
            max_retries=0,
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its client (so without the API key): a Ray worker rebuilds the client,
        reading ``api_key_env`` from its own environment (Ray's ``runtime_env.env_vars``)."""
        state = dict(self.__dict__)
        state.pop("_client")
        state["_api_key"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client = self._make_client()

    async def complete(self, request: ChatRequest) -> Completion:
        """One chat completion.

        Raises:
            EndpointError: the endpoint failed after its retries, answered a
                non-retryable error (4xx other than 429 and context length), or a reply
                that is not a chat completion. A system error: the caller retries or
                refills, never scores it.
            ContextLengthError: the prompt leaves no room for a completion in the served
                context (the policy's limit: the episode ends as ``context_limit``).
        """
        body = self.request_body(request)
        started = time.perf_counter()
        try:
            response, attempts = await self._create(body)
        except ContextRejected as rejected:
            body = await self._capped_body(body, rejected.rejection)
            try:
                response, more = await self._create(body)
            except ContextRejected as again:
                raise ContextLengthError(
                    f"{self.base_url} ({self.model}): {again.rejection.message}"
                ) from again
            attempts = rejected.attempts + more
        completion = self._completion(response, request.tools, body["max_completion_tokens"])
        completion.duration_s = time.perf_counter() - started
        completion.extra["attempts"] = attempts
        return completion

    async def _capped_body(
        self, body: dict[str, Any], rejection: ContextRejection
    ) -> dict[str, Any]:
        """``body`` with ``max_completion_tokens`` cut to the room left; ``ContextLengthError`` when none is."""
        if (
            self.context_tokens is None
            and rejection.context_tokens is None
            and rejection.input_tokens is not None
        ):
            self.context_tokens = await served_context_tokens(self._client, self.model)
        room = rejection.room_tokens(self.context_tokens)
        if room is None or room < 1 or room >= body["max_completion_tokens"]:
            left = "unknown" if room is None else max(room, 0)
            raise ContextLengthError(
                f"{self.base_url} ({self.model}): no room for a completion ({left} tokens "
                f"left of the context): {rejection.message}"
            )
        return {**body, "max_completion_tokens": room}

    async def aclose(self) -> None:
        await self._client.close()

    def request_body(self, request: ChatRequest) -> dict[str, Any]:
        """The chat-completions request body for ``request`` (docs/thinkingbox.md, "Model requests")."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [api_message(m) for m in request.messages],
            "temperature": self.temperature
            if self.temperature is not None
            else request.temperature,
            "max_completion_tokens": self.max_tokens
            if self.max_tokens is not None
            else request.max_new_tokens,
        }
        if self.context_tokens is not None:  # a prompt takes at least one token of the context
            body["max_completion_tokens"] = max(
                1, min(body["max_completion_tokens"], self.context_tokens - 1)
            )
        if request.seed is not None:
            body["seed"] = request.seed
        if request.tools:
            body["tools"] = [api_tool(t) for t in request.tools]
            body["parallel_tool_calls"] = False
        return body

    async def _create(self, body: dict[str, Any]) -> tuple[Any, int]:
        budget = _RetryBudget(*self._limits)
        backoff = wait_random_exponential(multiplier=1, max=self.backoff_max_s)

        def wait(state: RetryCallState) -> float:
            retry_after = _retry_after_s(state.outcome.exception() if state.outcome else None)
            return (
                min(retry_after, self.backoff_max_s) if retry_after is not None else backoff(state)
            )

        retrying = AsyncRetrying(
            retry=retry_if_exception(budget.allows), wait=wait, stop=stop_never, reraise=True
        )
        attempts = 0
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    response = await self._client.chat.completions.create(
                        **body, extra_body=self.extra_body or None
                    )
                    check_reply(response)
        except (json.JSONDecodeError, MalformedReplyError) as exc:
            raise EndpointError(
                f"{self.base_url} ({self.model}): malformed reply after {attempts} attempt(s): "
                f"{type(exc).__name__}: {exc}",
                cause="malformed_reply",
            ) from exc
        except openai.APIError as exc:
            rejection = context_rejection(exc)
            if rejection is not None:
                raise ContextRejected(rejection, attempts) from exc
            status = getattr(exc, "status_code", None)
            what = f"HTTP {status}" if status else type(exc).__name__
            raise EndpointError(
                f"{self.base_url} ({self.model}): {what} after {attempts} attempt(s): {exc}",
                cause=endpoint_cause(exc),
            ) from exc
        return response, attempts

    def _completion(
        self, response: Any, tools: list[ToolSpec], max_completion_tokens: int
    ) -> Completion:
        choice = response.choices[0]
        message = choice.message
        reasoning = reasoning_of(message, self.reasoning_field)
        usage = response.usage
        finish_reason = finish_reason_of(
            choice.finish_reason, getattr(usage, "completion_tokens", None), max_completion_tokens
        )
        interpretation, raw_text = combine(
            message.content or "",
            reasoning,
            list(message.tool_calls or []),
            tools,
            finish_reason,
            reasoning_open=self.reasoning_open,
        )
        details = getattr(usage, "prompt_tokens_details", None) if usage else None
        out_details = getattr(usage, "completion_tokens_details", None) if usage else None
        return Completion(
            raw_text=raw_text,
            interpretation=interpretation,
            finish_reason=finish_reason,
            raw_finish_reason=choice.finish_reason,
            input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            cached_input_tokens=int(getattr(details, "cached_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            extra={
                "model": getattr(response, "model", self.model),
                "raw_finish_reason": choice.finish_reason,
                "reasoning_tokens": int(getattr(out_details, "reasoning_tokens", 0) or 0),
            },
        )
