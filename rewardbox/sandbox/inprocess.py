"""The in-process sandbox: embedded MCP servers called through their SDK methods.

For each server of a task's ``world_state`` (key order = tool priority; a later
server wins a name clash, docs/thinkingbox.md, "Servers") a FRESH server is built
from ``rewardbox.domains.registry`` and called in-process: no subprocess, no
port, one private SQLite database per server, so episodes never see each
other's writes. Calls go straight to the SDK server's own ``list_tools`` and
``call_tool`` (``mcp.server.mcpserver.MCPServer``), the methods its JSON-RPC
handlers wrap, with arguments converted to JSON-compatible values as the wire
would (``pydantic_core.to_jsonable_python``). A JSON-RPC session over in-memory
streams (``mcp.Client(server)``) gives the same results but made a whole episode
about twice as slow (measured); the external sandbox speaks the full protocol.
The lifecycle is the session proxy's (docs/thinkingbox.md, "Session Proxy", "Reserved tools"): ``start``
(build, list tools, check ``available_tools``, ``__reserved__init`` per server
in order) -> ``call_tool``* -> ``get_effects`` -> ``close`` (``__reserved__teardown``).

Errors:
    * ``SandboxError`` (a system error) for every infrastructure fault: unknown
      server, failed init, a tool in ``available_tools`` that no server has
      (``Tool X does not exist``), transport exceptions, timeouts, bad effects.
    * ``UnknownToolError`` (a ``LookupError``, NOT a system error) when
      ``call_tool`` gets a name that is not an available tool. The episode is
      expected to answer such calls itself with ``Error: function '<n>' does
      not exist`` before reaching the sandbox; reaching here is a caller bug.
    * A tool's own ``{"error": ...}`` output is ordinary text, returned as is.
      Embedded servers report every tool-level error that way (invalid
      arguments included), so an MCP result flagged ``is_error``, or an
      exception out of the server's ``call_tool`` (which its JSON-RPC handler
      would turn into ``is_error``), means the tool crashed: a ``SandboxError`` too.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

from pydantic_core import to_jsonable_python

from rewardbox.errors import SandboxError
from rewardbox.sandbox.base import ToolSpec
from rewardbox.sandbox.reserved import RESERVED_PREFIX, first_text, parse_init_reply
from rewardbox.sandbox.schema import clean_schema

logger = logging.getLogger(__name__)


class UnknownToolError(LookupError):
    """``call_tool`` was asked for a name that is not an available tool (caller bug)."""


class _Connection:
    """One embedded server of the episode and the names of its reserved tools."""

    def __init__(self, name: str, server: Any):
        self.name = name
        self.server: Any | None = server
        self.reserved: set[str] = set()

    def close(self) -> None:
        self.server = None


class InProcessSandbox:
    """One episode's embedded servers (implements ``rewardbox.sandbox.base.Sandbox``).

    Args:
        builders: ``{server_name: zero-arg builder of a fresh MCP server}``;
            None uses ``rewardbox.domains.registry``.
        call_timeout_s: limit for one MCP call (``SandboxError`` when exceeded).
            In-process tools run on the event loop, so this bounds awaiting, not
            a tool that blocks; embedded tools are sub-millisecond SQLite work.
    """

    def __init__(
        self,
        builders: Mapping[str, Callable[[], Any]] | None = None,
        *,
        call_timeout_s: float = 60.0,
    ):
        self._builders = dict(builders) if builders is not None else None
        self.call_timeout_s = call_timeout_s
        self._connections: dict[str, _Connection] = {}
        self._routes: dict[str, str] = {}
        self._specs: dict[str, ToolSpec] = {}
        self._available: list[str] = []
        self._started = False
        self._closed = False

    def _builder(self, server: str) -> Callable[[], Any]:
        if self._builders is not None:
            if server not in self._builders:
                raise SandboxError(
                    f"no in-process server named {server!r}; known: {sorted(self._builders)}"
                )
            return self._builders[server]
        from rewardbox.domains import registry

        try:
            return registry.get_server_builder(server)
        except (KeyError, ImportError) as exc:
            raise SandboxError(str(exc)) from exc

    async def _call(self, conn: _Connection, name: str, arguments: dict[str, Any]) -> Any:
        if conn.server is None:
            raise SandboxError(f"server {conn.name!r} is not connected")
        try:
            call = conn.server.call_tool(name, to_jsonable_python(arguments))
            return await asyncio.wait_for(call, self.call_timeout_s)
        except TimeoutError as exc:
            raise SandboxError(
                f"server {conn.name!r}: tool {name!r} timed out after {self.call_timeout_s} s",
                cause="timeout",
            ) from exc
        except Exception as exc:  # the JSON-RPC handler would answer is_error: the tool crashed
            raise SandboxError(
                f"server {conn.name!r}: tool {name!r} crashed: {type(exc).__name__}: {exc}",
                cause="crash",
            ) from exc

    async def _connect(self, server: str) -> None:
        try:
            conn = _Connection(server, self._builder(server)())
            self._connections[server] = conn
            listing = await asyncio.wait_for(conn.server.list_tools(), self.call_timeout_s)
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(
                f"server {server!r} could not start: {type(exc).__name__}: {exc}"
            ) from exc
        for tool in listing:
            if tool.name.startswith(RESERVED_PREFIX):
                conn.reserved.add(tool.name)
                continue
            self._routes[tool.name] = server  # later servers win a clash
            self._specs[tool.name] = ToolSpec(
                name=tool.name,
                description=tool.description or "",
                input_schema=clean_schema(tool.input_schema),
            )

    async def start(
        self, world_state: dict[str, Any], available_tools: list[str]
    ) -> dict[str, Any]:
        """Build, connect and init every server; returns ``{server: init_result}``.

        Raises:
            SandboxError: unknown server, connection failure, a missing tool
                (``Tool X does not exist``) or a failed ``__reserved__init``. The
                sandbox is closed before raising.
        """
        if self._started or self._closed:
            raise SandboxError("an InProcessSandbox can be started once")
        self._started = True
        try:
            if not isinstance(world_state, Mapping) or not world_state:
                raise SandboxError("world_state must name at least one server")
            for server in world_state:
                await self._connect(server)
            for name in available_tools:
                if name not in self._routes:
                    raise SandboxError(f"Tool {name} does not exist")
            self._available = list(dict.fromkeys(available_tools))
            init_results: dict[str, Any] = {}
            for server, config in world_state.items():
                conn = self._connections[server]
                if RESERVED_PREFIX + "init" not in conn.reserved:
                    init_results[server] = {}
                    continue
                result = await self._call(conn, RESERVED_PREFIX + "init", {"config": config})
                init_results[server] = parse_init_reply(server, first_text(result))
            return init_results
        except BaseException:
            await self.close()
            raise

    async def list_tools(self) -> list[ToolSpec]:
        """The available tools, in ``available_tools`` order, schemas cleaned (docs/thinkingbox.md, "Servers")."""
        return [self._specs[name] for name in self._available]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one available tool; returns the text of ``content[0]``.

        Raises:
            UnknownToolError: ``name`` is not an available tool (see module docstring).
            SandboxError: not started, closed, a transport fault, a timeout, or a
                tool that crashed (an ``is_error`` result).
        """
        if not self._started or self._closed:
            raise SandboxError("sandbox is not running")
        if name not in self._available:
            raise UnknownToolError(f"Tool {name} does not exist")
        server = self._routes[name]
        result = await self._call(self._connections[server], name, dict(arguments))
        if getattr(result, "is_error", False):
            raise SandboxError(
                f"server {server!r}: tool {name!r} crashed: {first_text(result)[:500]}",
                cause="crash",
            )
        return first_text(result)

    async def get_effects(self) -> dict[str, dict[str, Any]]:
        """``{server: geteffects JSON}`` (``{}`` for a server without the reserved tool).

        Raises:
            SandboxError: a reply that is not a JSON object, or ``{"status": "error"}``.
        """
        if not self._started or self._closed:
            raise SandboxError("sandbox is not running")
        effects: dict[str, dict[str, Any]] = {}
        for server, conn in self._connections.items():
            if RESERVED_PREFIX + "geteffects" not in conn.reserved:
                effects[server] = {}
                continue
            text = first_text(await self._call(conn, RESERVED_PREFIX + "geteffects", {}))
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SandboxError(
                    f"server {server!r}: geteffects is not JSON: {text[:300]}"
                ) from exc
            if not isinstance(value, dict) or value.get("status") == "error":
                raise SandboxError(f"server {server!r}: geteffects failed: {text[:1000]}")
            effects[server] = value
        return effects

    async def close(self) -> None:
        """``__reserved__teardown`` on each server, then disconnect. Never raises; idempotent."""
        if self._closed:
            return
        self._closed = True
        for server, conn in self._connections.items():
            if conn.server is not None and RESERVED_PREFIX + "teardown" in conn.reserved:
                try:
                    await asyncio.wait_for(
                        conn.server.call_tool(RESERVED_PREFIX + "teardown", {}), 10.0
                    )
                except (
                    Exception
                ) as exc:  # boundary: teardown errors are only logged (docs: "Reserved tools")
                    logger.warning("teardown of %s failed: %r", server, exc)
            conn.close()


class InProcessSandboxFactory:
    """Zero-argument factory of fresh ``InProcessSandbox`` objects (picklable).

    Args:
        builders: as for ``InProcessSandbox`` (None: the domain registry).
        call_timeout_s: per-call limit in seconds.
    """

    def __init__(
        self,
        builders: Mapping[str, Callable[[], Any]] | None = None,
        *,
        call_timeout_s: float = 60.0,
    ):
        self.builders = dict(builders) if builders is not None else None
        self.call_timeout_s = call_timeout_s

    def __call__(self) -> InProcessSandbox:
        return InProcessSandbox(self.builders, call_timeout_s=self.call_timeout_s)
