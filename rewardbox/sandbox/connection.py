"""One MCP tool server: a spawned stdio process or a remote endpoint.

A connection serves one episode, or several in turn when a warm pool
(``rewardbox.sandbox.pool``) lends it out; :meth:`ServerConnection.ping` is the
pool's health check.

A :class:`ServerConnection` owns the official ``mcp`` client for one server.
The client's context (its transport task group) lives in a dedicated *owner
task*, so connect and shutdown may be awaited from different tasks (for
example under ``asyncio.wait_for``) without breaking anyio's cancel scopes.

Process servers are spawned through the PDEATHSIG launcher
(:func:`rewardbox.sandbox.reaper.launcher_argv`), so every pid is known (from a pidfile) and
dies with the worker. Connecting (spawn + handshake + ``tools/list``) is
retried with tenacity; each failed attempt reaps its process before the next.

Every fault surfaces as :class:`~rewardbox.errors.SandboxError` (a system
error), with the tail of the server's stderr when there is one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from rewardbox.errors import SandboxError
from rewardbox.sandbox.config import SandboxTimeouts
from rewardbox.sandbox.reaper import (
    TrackedProcess,
    kill_now,
    launcher_argv,
    reap,
    wait_dead,
)
from rewardbox.sandbox.servers_config import ProcessServer, RemoteServer
from rewardbox.sandbox.transport import (
    OpenedTransport,
    consume_exception,
    describe_failure,
    remote_transport,
)

logger = logging.getLogger(__name__)

State = Literal["new", "ready", "poisoned", "dead", "closed"]
_STDERR_TAIL_CHARS = 2000
_LIST_PAGE_CAP = 100
_DEATH_WAIT_S = 0.5


class _TransientConnectError(Exception):
    """A connect attempt failed in a way worth retrying (spawn, handshake, listing)."""


class ServerConnection:
    """The client side of one server for one episode.

    Args:
        name: the server's name in ``world_state`` / servers.yaml.
        config: its servers.yaml entry.
        workdir: a private directory for pidfiles and stderr logs.
        timeouts: see :class:`SandboxTimeouts`.
        connect_attempts: tries for spawn + handshake (tenacity), at least 1.
        mode: the ``mcp.Client`` protocol mode; ``"legacy"`` (initialize
            handshake) talks to mcp 1.x servers such as ThinkingBox's.
        source: the servers.yaml path, for error messages.
    """

    def __init__(
        self,
        name: str,
        config: ProcessServer | RemoteServer,
        *,
        workdir: Path,
        timeouts: SandboxTimeouts,
        connect_attempts: int = 3,
        mode: str = "legacy",
        source: str = "<servers config>",
    ):
        if connect_attempts < 1:
            raise ValueError(f"connect_attempts must be >= 1, got {connect_attempts}")
        self.name, self.config, self.workdir = name, config, workdir
        self.timeouts, self.attempts, self.mode, self.source = (
            timeouts,
            connect_attempts,
            mode,
            source,
        )
        self.state: State = "new"
        self.tools: dict[str, mcp_types.Tool] = {}
        self.processes: list[TrackedProcess] = []
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop that owns the transport
        self.canary = False  # a reused process on its first reused episode: check it (rewardbox.sandbox.canary)
        self.forked = False  # served by a child of a server template (rewardbox.sandbox.template)
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._attempt = 0
        self._spawn = self._resolve_spawn()  # a bad servers.yaml entry fails here, not per attempt

    def _resolve_spawn(self) -> dict[str, Any]:
        """Substituted spawn (or endpoint) parameters. Raises ServersConfigError."""
        if isinstance(self.config, RemoteServer):
            return {
                "url": self.config.resolved_endpoint(self.source, self.name),
                "headers": self.config.resolved_headers(self.source, self.name),
            }
        return {
            "argv": self.config.argv(self.source, self.name),
            "env": self.config.process_env(self.source, self.name),
            "cwd": self.config.resolved_cwd(self.source, self.name),
        }

    def use_template(self, attach_argv: list[str]) -> None:
        """Fork this episode's server from a template: ``attach_argv`` (without the pidfile) replaces the command."""
        self._spawn = {**self._spawn, "argv": list(attach_argv), "cwd": None}
        self.forked = True

    # ----- connect -------------------------------------------------------
    async def connect(self) -> None:
        """Spawn (or reach) the server, handshake and list its tools, with retries.

        Raises:
            SandboxError: every attempt failed (system error); no process is left alive.
        """
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_random_exponential(multiplier=0.1, max=2.0),
            retry=retry_if_exception_type(_TransientConnectError),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._connect_once()
        except _TransientConnectError as exc:
            self.state = "dead"
            raise SandboxError(
                f"server {self.name!r}: could not connect after {self._attempt} attempt(s): {exc}"
            ) from exc.__cause__
        self.state = "ready"
        self.loop = asyncio.get_running_loop()

    async def _connect_once(self) -> None:
        self._attempt += 1
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(
            self._own(ready, self._stop), name=f"mcp-server-{self.name}"
        )
        try:
            async with asyncio.timeout(self.timeouts.connect_s):
                self._client = await asyncio.shield(ready)
                self.tools = await self._list_tools()
        except BaseException as exc:
            ready.add_done_callback(consume_exception)
            self._track_pid()
            await self._stop_attempt(graceful=False)
            if isinstance(exc, Exception):
                raise _TransientConnectError(describe_failure(exc) + self.stderr_tail()) from exc
            raise
        self._track_pid()

    async def _own(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        """Owner task: hold the transport and client open until ``stop`` is set.

        If the handshake or the session fails, the process is reaped here, while
        the transport is still open, so the SDK's own slower shutdown finds it gone.
        """
        try:
            async with self._open_transport() as transport, transport as streams:
                try:
                    async with Client(
                        OpenedTransport(streams), mode=self.mode, cache=None
                    ) as client:
                        if not ready.done():
                            ready.set_result(client)
                        await stop.wait()
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        self._track_pid()
                        await reap(self.processes, self.timeouts.term_grace_s)
                    raise
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(
                    exc if isinstance(exc, Exception) else ConnectionError("connection cancelled")
                )
            if not isinstance(exc, Exception):
                raise
            logger.debug("server %s: transport ended with %s", self.name, describe_failure(exc))

    @asynccontextmanager
    async def _open_transport(self) -> AsyncIterator[Any]:
        if isinstance(self.config, RemoteServer):
            async with remote_transport(self.config, **self._spawn) as transport:
                yield transport
            return
        if self.forked:  # attach.py hands the pipes to a forked child, which writes its own pid
            argv = [*self._spawn["argv"], str(self._pidfile())]
        else:
            argv = launcher_argv(self._spawn["argv"], self._pidfile())
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env=self._spawn["env"], cwd=self._spawn["cwd"]
        )
        with open(self._stderr_path(), "w", encoding="utf-8") as errlog:
            yield stdio_client(params, errlog=errlog)

    async def _list_tools(self) -> dict[str, mcp_types.Tool]:
        assert self._client is not None
        tools: dict[str, mcp_types.Tool] = {}
        cursor: str | None = None
        for _ in range(_LIST_PAGE_CAP):
            page = await self._client.list_tools(cursor=cursor)
            tools.update({tool.name: tool for tool in page.tools})
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    # ----- calls ---------------------------------------------------------
    async def call(
        self, tool: str, arguments: dict[str, Any], timeout_s: float
    ) -> mcp_types.CallToolResult:
        """Call one tool with a time limit.

        Returns:
            The MCP result; a tool's own error (``is_error``) is ordinary output.

        Raises:
            SandboxError: the server is gone, died mid-call, broke the protocol, or
                the call ran past ``timeout_s`` (then it is cancelled and the server
                is marked poisoned, to be killed without ceremony at close).
        """
        if self.state not in ("ready", "poisoned") or self._client is None:
            raise SandboxError(
                f"server {self.name!r} is not running (state {self.state}){self.stderr_tail()}",
                cause="crash",
            )
        try:
            async with asyncio.timeout(timeout_s):
                return await self._client.call_tool(tool, arguments)
        except TimeoutError:
            self.state = "poisoned"
            raise SandboxError(
                f"tool {tool!r} on server {self.name!r} timed out after {timeout_s} s",
                cause="timeout",
            ) from None
        except Exception as exc:
            # A crash closes the pipe a moment before the process is seen to exit.
            died = bool(self.processes) and await wait_dead(self.processes, _DEATH_WAIT_S)
            if died:
                self.state = "dead"
            what = "exited mid-call" if died else "failed"
            raise SandboxError(
                f"server {self.name!r} {what} during {tool!r}: {describe_failure(exc)}{self.stderr_tail()}",
                cause="crash",
            ) from exc

    async def ping(self, timeout_s: float) -> bool:
        """Health check of a live connection: running, owner task alive, ``tools/list`` answered.

        ``tools/list`` rather than MCP ``ping``: ping exists only in the legacy
        protocol mode, listing in every mode.

        Args:
            timeout_s: how long the round trip may take, seconds.

        Returns:
            True when the server answered in time; never raises.
        """
        if self.state != "ready" or self._client is None or self._task is None or self._task.done():
            return False
        if not all(p.is_alive() for p in self.processes):
            return False
        try:
            async with asyncio.timeout(timeout_s):
                await self._client.list_tools()
        except Exception as exc:  # noqa: BLE001 - any failure means unhealthy
            logger.info("server %s: health check failed: %s", self.name, describe_failure(exc))
            return False
        return True

    # ----- shutdown ------------------------------------------------------
    async def shutdown(self, teardown_tool: str | None, *, torn_down: bool = False) -> None:
        """Call the teardown tool if any (errors only logged), then end the server.

        A server whose teardown succeeded (here, or earlier when ``torn_down``)
        has released its episode state, so it is signalled at once; a healthy
        server without a teardown tool gets up to ``exit_grace_s`` to exit after
        its stdin closes; a poisoned one (a call timed out) is signalled at once.
        Either way: SIGTERM, ``term_grace_s``, SIGKILL. No fixed wait: every
        wait ends as soon as the process is gone. Idempotent; never raises.
        """
        if self.state == "closed":
            return
        if teardown_tool and teardown_tool in self.tools and self.state in ("ready", "poisoned"):
            try:
                await self.call(teardown_tool, {}, self.timeouts.teardown_s)
                torn_down = True
            except SandboxError as exc:
                logger.warning("server %s: teardown failed: %s", self.name, exc)
        try:
            await self._stop_attempt(graceful=self.state == "ready" and not torn_down)
        except Exception:
            logger.exception("server %s: shutdown failed", self.name)
        finally:
            kill_now(self.processes)
            self.state = "closed"

    async def _stop_attempt(self, *, graceful: bool) -> None:
        """End the current attempt's process and owner task, bounded in time."""
        live = [p for p in self.processes if p.is_alive()]
        if graceful:
            if self._stop is not None:
                self._stop.set()
            if live and not await wait_dead(live, self.timeouts.exit_grace_s):
                await reap(live, self.timeouts.term_grace_s)
        else:
            await reap(live, self.timeouts.term_grace_s)
            if self._stop is not None:
                self._stop.set()
        await self._finish_owner_task()
        self._client = None

    async def _finish_owner_task(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        done, _ = await asyncio.wait({task}, timeout=self.timeouts.term_grace_s + 1.0)
        if not done:
            task.cancel()
            await asyncio.wait({task}, timeout=self.timeouts.term_grace_s + 3.0)
        if task.done() and not task.cancelled() and task.exception() is not None:
            logger.debug(
                "server %s: owner task ended with %s", self.name, describe_failure(task.exception())
            )

    # ----- processes and logs ---------------------------------------------
    def _pidfile(self) -> Path:
        return self.workdir / f"{self.name}.{self._attempt}.pid"

    def _stderr_path(self) -> Path:
        return self.workdir / f"{self.name}.{self._attempt}.stderr"

    def _track_pid(self) -> None:
        if isinstance(self.config, RemoteServer):
            return
        proc = TrackedProcess.from_pidfile(self._pidfile(), label=f"{self.name}#{self._attempt}")
        if proc is not None and all(p.pid != proc.pid for p in self.processes):
            self.processes.append(proc)

    def stderr_tail(self) -> str:
        """``"; stderr: ..."`` with the last lines the server wrote, or ``""``."""
        if isinstance(self.config, RemoteServer):
            return ""
        try:
            text = self._stderr_path().read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""
        return f"; stderr: ...{text[-_STDERR_TAIL_CHARS:]}" if text else ""
