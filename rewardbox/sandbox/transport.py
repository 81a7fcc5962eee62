"""The transports and failure wording of a server connection (``rewardbox.sandbox.connection``).

A remote server's transport context (streamable HTTP or SSE, with the mcp SDK's clients), an
already-open pair of streams presented as a transport (the connection's owner task opens the
streams itself), and the one-line account of a failure used in ``SandboxError`` messages.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from rewardbox.sandbox.servers_config import RemoteServer


def consume_exception(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as retrieved (the failure is reported elsewhere)."""
    if not future.cancelled():
        future.exception()


def describe_failure(exc: BaseException) -> str:
    """A one-line account of a failure; exception groups are unwrapped to their first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class OpenedTransport:
    """An already-open pair of streams presented as an ``mcp`` Transport (no-op exit)."""

    def __init__(self, streams: Any):
        self._streams = streams

    async def __aenter__(self) -> Any:
        return self._streams

    async def __aexit__(self, *exc_info: object) -> None:
        return None


@asynccontextmanager
async def remote_transport(
    config: RemoteServer, url: str, headers: dict[str, str]
) -> AsyncIterator[Any]:
    """A transport context for an ``mcp-remote`` server (streamable HTTP or SSE)."""
    if config.transport == "sse":
        from mcp.client.sse import sse_client

        yield sse_client(url, headers=headers, timeout=config.timeout)
        return
    import httpx2  # the HTTP client the mcp SDK is built on (its documented way to set headers)
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(config.timeout, read=max(config.timeout, 300.0))
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        yield streamable_http_client(url, http_client=http)
