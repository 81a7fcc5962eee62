"""ExternalSandbox: an episode's tools served by external MCP servers (servers.yaml).

The behaviour of a ThinkingBox Session Proxy session (docs/thinkingbox.md,
"Servers", "Session Proxy", "Reserved tools"), run in-process with the official
``mcp`` client:

- one stdio MCP process per server per episode (``mcp-process``), or a
  streamable-HTTP connection (``mcp-remote``); with a :class:`ServerPool`
  (``rewardbox.sandbox.pool``), a server that opts in with
  ``episodes_per_process > 1`` gets a warm, health-checked process instead,
  isolated by the same ``__reserved__teardown``/``__reserved__init`` pair;
- ``world_state`` key order is the tool priority order: when two servers
  define the same tool name, the later one wins;
- ``__reserved__*`` tools are hidden; ``__reserved__init`` is called on each
  server in order, ``__reserved__geteffects`` yields the terminal state,
  ``__reserved__teardown`` runs at close (errors only logged), after which the
  process is signalled at once (no exit grace to wait out) or returned to the pool;
- every process is tracked by pid, dies with the worker (PDEATHSIG), and is
  reaped at close: SIGTERM, ``term_grace_s``, SIGKILL.

Faults are :class:`~rewardbox.errors.SandboxError` (system errors); a tool's
own ``{"error": ...}`` output is ordinary tool output.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path
from typing import Any

from rewardbox.errors import SandboxError
from rewardbox.sandbox.base import ToolSpec
from rewardbox.sandbox.config import SandboxTimeouts
from rewardbox.sandbox.connection import ServerConnection
from rewardbox.sandbox.external_reuse import ReuseMixin
from rewardbox.sandbox.pool import ServerPool
from rewardbox.sandbox.reaper import TrackedProcess, kill_now
from rewardbox.sandbox.reserved import (
    INIT_TOOL,
    RESERVED_PREFIX,
    SERVER_TOOL,
    TEARDOWN_TOOL,
    first_text,
    parse_init_reply,
)
from rewardbox.sandbox.schema import clean_schema
from rewardbox.sandbox.servers_config import (
    ServersConfig,
    load_servers_config,
)
from rewardbox.sandbox.template import TemplateSet

logger = logging.getLogger(__name__)


class _Lease:
    """A placeholder for a server to be taken from the pool during ``start``."""

    def __init__(self, name: str):
        self.name = name
        self.processes: list = []
        self.tools: dict = {}


class ExternalSandbox(ReuseMixin):
    """One episode's tool servers from a servers.yaml (implements ``Sandbox``).

    Args:
        servers: a parsed :class:`ServersConfig` or the path of a servers.yaml.
        timeouts: per-phase limits (tool calls default to 30 s).
        connect_attempts: tries per server for spawn + handshake (tenacity).
        mode: ``mcp.Client`` protocol mode (``"legacy"`` suits mcp 1.x servers).
        session_id: passed to ``__reserved__init`` when its schema declares it;
            a fresh uuid4 hex by default.
        pool: warm processes for the servers it ``reuses``; others are spawned
            for this episode alone. ``None``: every process is fresh.
        templates: server templates (``rewardbox.sandbox.template``): servers not
            reused from the pool are forked from them when they can be (needs ``pool``,
            whose ledger runs the canary).

    Not shared between episodes; create a new one per episode (see
    ``rewardbox.sandbox.factory.build_sandbox_factory``).
    """

    def __init__(
        self,
        servers: ServersConfig | str | Path,
        *,
        timeouts: SandboxTimeouts | None = None,
        connect_attempts: int = 3,
        mode: str = "legacy",
        session_id: str | None = None,
        pool: ServerPool | None = None,
        templates: TemplateSet | None = None,
    ):
        self.config = (
            servers if isinstance(servers, ServersConfig) else load_servers_config(servers)
        )
        self.timeouts = timeouts or SandboxTimeouts()
        self.connect_attempts = connect_attempts
        self.mode = mode
        self.session_id = session_id or uuid.uuid4().hex
        self._conns: list[ServerConnection] = []
        self._pool = pool
        self._templates = (
            templates if pool is not None else None
        )  # a template's canary needs the pool's ledger
        self._pooled: dict[
            str, ServerConnection
        ] = {}  # server name -> connection leased from the pool
        self._faulted = False  # start failed: leased processes are retired, not reused
        self.events: list[
            str
        ] = []  # once per server and campaign: a template fallback, a retired reuse
        self._route: dict[str, ServerConnection] = {}
        self._available: list[str] = []
        self._workdir: Path | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._procs: list[TrackedProcess] = []
        # Last resort if close() is never awaited: SIGKILL whatever is still tracked.
        self._finalizer = weakref.finalize(self, kill_now, self._procs)

    # ----- lifecycle -----------------------------------------------------
    async def start(
        self, world_state: dict[str, Any], available_tools: list[str] | None
    ) -> dict[str, Any]:
        """Spawn every server in ``world_state`` order, list tools, check, init.

        Args:
            world_state: ``{server: init config}``; order = tool priority.
            available_tools: the only tool names the agent may see and call;
                ``None`` means every non-reserved tool.

        Returns:
            ``{server: init_result}`` (``{}`` or the ``rest`` of ``{"status": "ok", ...}``).

        Raises:
            SandboxError: unknown server, spawn/handshake failure after retries,
                ``Tool X does not exist``, or a failed init. Everything spawned is
                reaped before it is raised.
        """
        if self._conns or self._close_task is not None:
            raise SandboxError("ExternalSandbox.start called twice; use one sandbox per episode")
        try:
            self._conns = self._make_connections(world_state)
            await self._connect_all()
            self._route = {
                name: conn
                for conn in self._conns
                for name in conn.tools
                if not name.startswith(RESERVED_PREFIX)
            }
            self._available = self._check_available(available_tools)
            results = await self._init_all(world_state)
            self._route = {
                name: conn
                for conn in self._conns
                for name in conn.tools
                if not name.startswith(RESERVED_PREFIX)
            }  # a canary may have swapped a connection
            return results
        except BaseException as exc:
            self._faulted = True
            self._abandon_canaries()
            await self.close()
            if isinstance(exc, Exception) and not isinstance(exc, SandboxError):
                raise SandboxError(f"sandbox start failed: {type(exc).__name__}: {exc}") from exc
            raise

    def _make_connections(self, world_state: dict[str, Any]) -> list[ServerConnection]:
        if not isinstance(world_state, dict) or not world_state:
            raise SandboxError(
                f"world_state must be a non-empty mapping of server names, got {world_state!r}"
            )
        self._workdir = Path(tempfile.mkdtemp(prefix="rewardbox-sandbox-"))
        conns = []
        for name in world_state:
            try:
                self.config.get(name)
            except KeyError as exc:
                raise SandboxError(exc.args[0]) from None
            if self._pool is not None and self._pool.reuses(name):
                conns.append(_Lease(name))
                continue
            conns.append(self._fresh(name))
        return conns

    async def _connect_all(self) -> None:
        results = await asyncio.gather(
            *(self._connect_one(c) for c in self._conns), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _connect_one(self, conn: ServerConnection | _Lease) -> None:
        if isinstance(conn, _Lease):
            assert self._pool is not None
            leased = await self._pool.acquire(conn.name)
            self._pooled[conn.name] = leased
            self._conns[self._conns.index(conn)] = leased
            return
        await self._fork_if_templated(conn)
        try:
            await conn.connect()
        except SandboxError as exc:
            if not conn.forked:
                raise
            assert self._templates is not None and self._pool is not None
            self._templates.fall_back(conn.name, f"a forked server failed to connect: {exc}")
            self._fallback_event(conn.name)
            self._pool.ledger.abandon(conn.name)
            fresh = self._fresh(conn.name)
            self._conns[self._conns.index(conn)] = fresh
            await self._connect_one(fresh)
        finally:
            self._procs.extend(p for p in conn.processes if p not in self._procs)

    def _fresh(self, name: str) -> ServerConnection:
        return ServerConnection(
            name,
            self.config.get(name),
            workdir=self._workdir,
            timeouts=self.timeouts,
            connect_attempts=self.connect_attempts,
            mode=self.mode,
            source=self.config.source,
        )

    def _check_available(self, available_tools: list[str] | None) -> list[str]:
        if available_tools is None:
            return list(self._route)
        for name in available_tools:
            if name not in self._route:
                raise SandboxError(f"Tool {name} does not exist")
        return list(dict.fromkeys(available_tools))

    async def _init_all(self, world_state: dict[str, Any]) -> dict[str, Any]:
        init_results: dict[str, Any] = {}
        for index, conn in enumerate(list(self._conns)):
            tool = conn.tools.get(INIT_TOOL)
            if tool is None:
                init_results[conn.name] = {}
                if conn.canary:  # no init: compare the state right after connect
                    await self._canary(index, conn, None)
                continue
            arguments: dict[str, Any] = {"config": world_state[conn.name]}
            if "session_id" in ((tool.input_schema or {}).get("properties") or {}):
                arguments["session_id"] = self.session_id
            result = await conn.call(INIT_TOOL, arguments, self.timeouts.init_s)
            init_results[conn.name] = parse_init_reply(conn.name, first_text(result))
            if conn.canary:
                await self._canary(index, conn, arguments)
        return init_results

    # ----- tools ----------------------------------------------------------
    async def list_tools(self) -> list[ToolSpec]:
        """The available tools, in ``available_tools`` order, schemas cleaned (docs/thinkingbox.md, "Servers")."""
        specs = []
        for name in self._available:
            tool = self._route[name].tools[name]
            specs.append(
                ToolSpec(
                    name=name,
                    description=tool.description or "",
                    input_schema=clean_schema(tool.input_schema),
                )
            )
        return specs

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one available tool on the server that owns it; returns ``content[0]`` text.

        ``__reserved__server_tool`` with ``{server_name, tool_name, arguments}``
        calls any tool of any server, bypassing ``available_tools`` (docs/thinkingbox.md, "Reserved tools").

        Raises:
            SandboxError: ``Tool X does not exist`` (unknown or unavailable), the
                server died mid-call, or the call exceeded ``timeouts.tool_s``.
        """
        if name == SERVER_TOOL:
            return await self.call_server_tool(
                arguments.get("server_name", ""),
                arguments.get("tool_name", ""),
                arguments.get("arguments") or {},
            )
        if name not in self._available:
            raise SandboxError(f"Tool {name} does not exist")
        result = await self._route[name].call(name, arguments, self.timeouts.tool_s)
        return first_text(result)

    async def call_server_tool(
        self, server_name: str, tool_name: str, arguments: dict[str, Any]
    ) -> str:
        """Call any tool of one server by name, ignoring ``available_tools``.

        Raises:
            SandboxError: no such server or tool, or the call faulted.
        """
        conn = next((c for c in self._conns if c.name == server_name), None)
        if conn is None or tool_name not in conn.tools:
            raise SandboxError(f"Tool {tool_name} does not exist on server {server_name!r}")
        return first_text(await conn.call(tool_name, arguments, self.timeouts.tool_s))

    async def get_effects(self) -> dict[str, dict[str, Any]]:
        """``{server: geteffects JSON}``; a non-dict or invalid reply becomes ``{}``
        (docs/thinkingbox.md, "Reserved tools").

        A server without ``__reserved__geteffects`` contributes ``{}``.

        Raises:
            SandboxError: a server died or the call exceeded ``timeouts.effects_s``.
        """
        return {conn.name: await self._effects_of(conn) for conn in self._conns}

    # ----- teardown --------------------------------------------------------
    async def close(self) -> None:
        """Teardown every server, then make sure each process is gone.

        Runs ``__reserved__teardown`` (errors only logged), closes stdio, then
        SIGTERM → ``term_grace_s`` → SIGKILL. Idempotent; never raises (the work
        continues in the background if the caller is cancelled).
        """
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close_all())
        await asyncio.shield(self._close_task)

    async def _close_all(self) -> None:
        leased = set(map(id, self._pooled.values()))
        try:
            await asyncio.gather(
                *(self._end(c, id(c) in leased) for c in self._conns), return_exceptions=True
            )
        except Exception:
            logger.exception("sandbox close failed")
        finally:
            for conn in self._conns:
                if id(conn) not in leased and isinstance(conn, ServerConnection):
                    self._procs.extend(p for p in conn.processes if p not in self._procs)
            kill_now(self._procs)
            if self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)

    async def _end(self, conn: ServerConnection | _Lease, leased: bool) -> None:
        if isinstance(conn, _Lease):
            return  # never connected (start failed first)
        if leased:
            assert self._pool is not None
            await self._pool.release(conn, reusable=not self._faulted)
        else:
            await conn.shutdown(TEARDOWN_TOOL)

    # ----- introspection ----------------------------------------------------
    @property
    def pids(self) -> list[int]:
        """Every server pid this sandbox spawned, across connect attempts."""
        return [p.pid for conn in self._conns for p in conn.processes]

    def live_pids(self) -> list[int]:
        """The spawned server pids still running (zombies count as gone)."""
        return [p.pid for conn in self._conns for p in conn.processes if p.is_alive()]

    @property
    def servers(self) -> list[str]:
        """Server names in priority order."""
        return [c.name for c in self._conns]
