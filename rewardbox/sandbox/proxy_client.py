"""ProxySandbox: an episode's tools on a running ThinkingBox Session Proxy (HTTP).

The client half of docs/thinkingbox.md, "Session Proxy": every endpoint is a JSON
``POST``; success is ``200 {"success": true, "content": {"type", "value"}}``,
failure ``{"success": false, "content": {"value": message}}`` with 400 (504 for
a tool timeout). One proxy session per episode, with a client-made uuid4 id.

Retries follow docs/thinkingbox.md, "Retries" (ThinkingBox's ``BackoffAsyncClient``), with tenacity:

| condition | retries | delay |
|---|---|---|
| 429 | unlimited by default (``max_429_retries``) | ``Retry-After``, capped at 32 s |
| 502/503/504 without a proxy body | up to 5 | uniform(0, min(2^(n-1), 32)) s |
| connection refused / DNS failure | up to 10 | same |
| 401 with an API key | up to 3 (the key is re-read from the env) | same |
| timeout | **none**: a timed-out tool may already have run | |

A proxy-format ``{"success": false}`` reply (any status) is never retried, and
a bare 504 on ``call_tool`` is not either, for the timeout reason above. Every
failure is a :class:`~rewardbox.errors.SandboxError` (system error).
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_random_exponential

from rewardbox import strict_json
from rewardbox.errors import SandboxError
from rewardbox.sandbox.base import ToolSpec
from rewardbox.sandbox.schema import clean_schema

logger = logging.getLogger(__name__)

_MAX_DELAY_S = 32.0
_RETRY_LIMITS = {"server": 5, "connect": 10, "auth": 3}


class _Retryable(Exception):
    """One failed attempt worth retrying; ``kind`` picks the retry budget."""

    def __init__(self, kind: str, message: str, retry_after_s: float | None = None):
        super().__init__(message)
        self.kind, self.retry_after_s = kind, retry_after_s


class ProxyTimeoutError(SandboxError):
    """A proxy request timed out; whatever it asked for may or may not have happened."""


def session_timeout_s(request_timeout_s: float) -> float:
    """The per-call timeout the proxy enforces: ``max(0.9 T, T - 30)`` for a client timeout ``T``
    (docs/thinkingbox.md, "Session Proxy").

    It stays below the client's own timeout so the proxy answers 504 first.
    """
    return max(0.9 * request_timeout_s, request_timeout_s - 30.0)


def _retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return min(max(float(value), 0.0), _MAX_DELAY_S) if value is not None else None
    except ValueError:
        return None


def _proxy_message(response: httpx.Response) -> str | None:
    """The message of a proxy-format failure body, or ``None`` if the body is not one."""
    try:
        body = response.json()
    except ValueError:
        return None
    if isinstance(body, dict) and body.get("success") is False:
        content = body.get("content")
        value = content.get("value") if isinstance(content, dict) else content
        return value if isinstance(value, str) else strict_json.dumps(value)
    return None


class ProxySandbox:
    """One episode on a ThinkingBox Session Proxy (implements ``Sandbox``).

    Args:
        base_url: e.g. ``http://127.0.0.1:7111``.
        api_key_env: name of the env var holding the proxy's Bearer key (never the key).
        timeout_s: HTTP timeout per request ``T``; the proxy is asked to time
            tools out at ``max(0.9 T, T - 30)``.
        max_429_retries: ``None`` = unlimited, as ThinkingBox does.
        geteffects_proxy_info: ask the proxy to add ``__reserved__proxy_info``
            (its tool-call log) to the effects.
        transport: an httpx transport (tests, custom networking).
        retry_sleep: the coroutine used to wait between retries (tests).
    """

    def __init__(
        self,
        base_url: str,
        api_key_env: str | None = None,
        timeout_s: float = 300.0,
        *,
        max_429_retries: int | None = None,
        geteffects_proxy_info: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.timeout_s = timeout_s
        self.max_429_retries = max_429_retries
        self.geteffects_proxy_info = geteffects_proxy_info
        self.session_id: str | None = None
        self.available_tools: list[str] | None = None
        self._sleep = retry_sleep
        self._client = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout_s, transport=transport
        )
        self._closed = False
        self._created = False  # a refused or unreachable session_create leaves nothing to destroy

    # ----- Sandbox protocol ----------------------------------------------
    async def start(
        self, world_state: dict[str, Any], available_tools: list[str] | None
    ) -> dict[str, Any]:
        """``/session_create``: spawn and init the servers on the proxy.

        Returns:
            ``{server: init_result}`` as the proxy reports it.

        Raises:
            SandboxError: the proxy refused (``Tool X does not exist``, init failed,
                duplicate session) or could not be reached after retries.
        """
        if self.session_id is not None:
            raise SandboxError("ProxySandbox.start called twice; use one sandbox per episode")
        self.session_id = str(uuid.uuid4())
        self.available_tools = list(available_tools) if available_tools is not None else None
        body: dict[str, Any] = {
            "session_id": self.session_id,
            "server_config": world_state,
            "available_tools": self.available_tools or [],
            "timeout": session_timeout_s(self.timeout_s),
        }
        if self.geteffects_proxy_info:
            body["geteffects_proxy_info"] = True
        try:
            value = await self._post("session_create", body)
        except ProxyTimeoutError:
            self._created = True  # it may exist: close() destroys it
            raise
        self._created = True
        return value if isinstance(value, dict) else {}

    async def list_tools(self) -> list[ToolSpec]:
        """``/list_tools``: the available tools, in ``available_tools`` order, schemas cleaned."""
        value = await self._post("list_tools", {"session_id": self._require_session()})
        tools = value.get("tools", {}) if isinstance(value, dict) else {}
        order = [n for n in (self.available_tools or []) if n in tools] or list(tools)
        return [
            ToolSpec(
                name=name,
                description=tools[name].get("description") or "",
                input_schema=clean_schema(tools[name].get("inputSchema")),
            )
            for name in order
        ]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """``/call_tool``: the text of the tool result's ``content[0]``.

        Raises:
            SandboxError: unknown tool, tool timeout (504), proxy unreachable.
                Never retried on a timeout.
        """
        body = {"session_id": self._require_session(), "tool_name": name, "arguments": arguments}
        value = await self._post("call_tool", body)
        return value if isinstance(value, str) else strict_json.dumps(value)

    async def get_effects(self) -> dict[str, dict[str, Any]]:
        """``/get_effects``: ``{server: effects}`` (+ ``__reserved__proxy_info`` if asked)."""
        value = await self._post("get_effects", {"session_id": self._require_session()})
        if not isinstance(value, dict):
            raise SandboxError(
                f"proxy get_effects returned {type(value).__name__}, expected an object"
            )
        return value

    async def close(self) -> None:
        """``/session_destroy`` (if a session may exist) then close the HTTP client.

        Idempotent; never raises (failures are logged).
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._created and self.session_id is not None:
                await self._post("session_destroy", {"session_id": self.session_id})
        except Exception as exc:  # teardown problems are logged, never raised
            logger.warning("proxy session %s: destroy failed: %s", self.session_id, exc)
        finally:
            await self._client.aclose()

    # ----- HTTP with retries ------------------------------------------------
    def _require_session(self) -> str:
        if self.session_id is None:
            raise SandboxError("ProxySandbox used before start()")
        return self.session_id

    def _headers(self) -> dict[str, str]:
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise SandboxError(f"proxy API key variable {self.api_key_env!r} is not set")
        return {"Authorization": f"Bearer {key}"}

    async def _post(self, endpoint: str, body: dict[str, Any]) -> Any:
        """POST with the retry policy of docs/thinkingbox.md, "Retries"; returns ``content.value``."""
        counts: dict[str, int] = {}

        def should_stop(state: RetryCallState) -> bool:
            exc = state.outcome.exception() if state.outcome else None
            if not isinstance(exc, _Retryable):
                return True
            counts[exc.kind] = counts.get(exc.kind, 0) + 1
            limit = self.max_429_retries if exc.kind == "rate" else _RETRY_LIMITS[exc.kind]
            return limit is not None and counts[exc.kind] > limit

        backoff = wait_random_exponential(multiplier=1, max=_MAX_DELAY_S)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, _Retryable) and exc.retry_after_s is not None:
                return exc.retry_after_s
            return backoff(state)

        retrying = AsyncRetrying(
            stop=should_stop,
            wait=wait,
            sleep=self._sleep,
            retry=retry_if_exception_type(_Retryable),
            reraise=True,
        )
        try:
            return await retrying(self._post_once, endpoint, body)
        except _Retryable as exc:
            raise SandboxError(f"proxy {endpoint} failed after retries: {exc}") from None

    async def _post_once(self, endpoint: str, body: dict[str, Any]) -> Any:
        try:
            response = await self._client.post(f"/{endpoint}", json=body, headers=self._headers())
        except httpx.TimeoutException as exc:
            raise ProxyTimeoutError(
                f"proxy {endpoint} timed out after {self.timeout_s} s (not retried): {exc!r}",
                cause="timeout",
            ) from None
        except httpx.ConnectError as exc:
            raise _Retryable("connect", f"cannot connect to {self.base_url}: {exc}") from None
        except httpx.HTTPError as exc:
            raise SandboxError(f"proxy {endpoint} failed: {type(exc).__name__}: {exc}") from None
        return self._interpret(endpoint, response)

    def _interpret(self, endpoint: str, response: httpx.Response) -> Any:
        status = response.status_code
        message = _proxy_message(response)
        if message is not None:
            raise SandboxError(f"proxy {endpoint} ({status}): {message}")
        if status == 429:
            raise _Retryable("rate", "429 Too Many Requests", _retry_after_s(response))
        if status in (502, 503, 504) and not (status == 504 and endpoint == "call_tool"):
            raise _Retryable("server", f"{status} {response.reason_phrase}")
        if status == 401 and self.api_key_env:
            raise _Retryable("auth", "401 Unauthorized")
        if status != 200:
            raise SandboxError(f"proxy {endpoint} returned {status}: {response.text[:500]}")
        try:
            payload = response.json()
        except ValueError:
            raise SandboxError(
                f"proxy {endpoint} returned non-JSON: {response.text[:500]}"
            ) from None
        if not isinstance(payload, dict) or payload.get("success") is not True:
            raise SandboxError(
                f"proxy {endpoint} returned an unexpected body: {response.text[:500]}"
            )
        content = payload.get("content")
        return content.get("value") if isinstance(content, dict) else content
