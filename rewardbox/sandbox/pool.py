"""Warm pools of stdio tool-server processes, reused across episodes.

Spawning a Python MCP server costs an interpreter start, its imports and the
MCP handshake (0.6 s idle, 1.8-2.8 s on a loaded 2-core machine); one episode's
tool calls cost milliseconds. A :class:`ServerPool` keeps each server process
alive after its episode and hands it to the next one, using the reserved-tool
protocol that already isolates episodes (docs/thinkingbox.md, "Reserved tools"):

- at the end of an episode the pool calls ``__reserved__teardown``; only a
  server that answered it, is still ``ready`` (no timed-out or crashed call)
  and has served fewer than its ``episodes_per_process`` episodes goes back
  to the idle list; any other is retired (SIGTERM at once, SIGKILL after
  ``term_grace_s``);
- the next episode's ``__reserved__init`` starts the server from a clean state,
  exactly as on a fresh process;
- before a process is handed out it is health-checked (alive, transport open,
  ``tools/list`` answered within ``ping_timeout_s``); a failed check retires it
  and the episode gets another process, so a dead warm process is never a
  system error.

Reuse is opt-in per server (``episodes_per_process`` in servers.yaml, default
1 = one fresh process per episode, as upstream): only a server whose
``__reserved__init`` discards all earlier state may be reused. The embedded
domains' servers do (``internal_servers``). A server without
``__reserved__init`` is never reused. Good manners are checked, not assumed:
the first reused episode of each server is the canary
(``rewardbox.sandbox.canary``); a server that fails it, or that reports no
hashes to check, gets fresh processes for the rest of the campaign.

A pool belongs to one event loop (its processes' transports live there); used
from another loop, it drops the old loop's processes and starts afresh. Close it
with :meth:`ServerPool.aclose`; if that never happens, the processes still die
with their event loop (the owner tasks reap them when cancelled), with the
worker (PDEATHSIG), or when the pool is garbage-collected (SIGKILL).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
import weakref
from collections import Counter
from pathlib import Path
from typing import Any

from rewardbox.sandbox.canary import ReuseLedger
from rewardbox.sandbox.config import SandboxTimeouts
from rewardbox.sandbox.connection import ServerConnection
from rewardbox.sandbox.reaper import TrackedProcess, kill_now
from rewardbox.sandbox.reserved import INIT_TOOL, TEARDOWN_TOOL
from rewardbox.sandbox.servers_config import ProcessServer, ServersConfig
from rewardbox.sandbox.template import TemplateSet

logger = logging.getLogger(__name__)


def _cleanup(procs: list[TrackedProcess], workdir: list[Path]) -> None:
    kill_now(procs)
    for path in workdir:
        shutil.rmtree(path, ignore_errors=True)


class ServerPool:
    """Idle server connections by server name, reused up to each server's episode cap.

    Args:
        config: the servers config (``episodes_per_process`` per process server).
        timeouts: per-phase limits, as for :class:`ServerConnection`.
        connect_attempts: tries per spawn + handshake.
        mode: ``mcp.Client`` protocol mode.
        ping_timeout_s: how long the health check's round trip may take, seconds.

    Attributes:
        counts: ``spawned``, ``reused`` and ``retired`` processes so far.
        ledger: the campaign's reuse canary state per server (shared with templates).
    """

    def __init__(
        self,
        config: ServersConfig,
        *,
        timeouts: SandboxTimeouts | None = None,
        connect_attempts: int = 3,
        mode: str = "legacy",
        ping_timeout_s: float = 5.0,
    ):
        self.config = config
        self.timeouts = timeouts or SandboxTimeouts()
        self.connect_attempts, self.mode, self.ping_timeout_s = (
            connect_attempts,
            mode,
            ping_timeout_s,
        )
        self.counts: Counter[str] = Counter()
        self.ledger = ReuseLedger()
        self._idle: dict[str, list[ServerConnection]] = {}
        self._episodes: dict[int, int] = {}  # id(connection) -> episodes served
        self._loop: asyncio.AbstractEventLoop | None = None
        self._procs: list[TrackedProcess] = []
        self._workdir: list[Path] = []  # zero or one directory, shared with the finalizer
        self._finalizer = weakref.finalize(self, _cleanup, self._procs, self._workdir)

    def reuses(self, name: str) -> bool:
        """True when server ``name`` is a process server with ``episodes_per_process > 1`` whose reuse is not retired."""
        server = self.config.servers.get(name)
        return (
            isinstance(server, ProcessServer)
            and server.episodes_per_process > 1
            and self.ledger.allowed(name)
        )

    def idle_pids(self) -> list[int]:
        """Pids of the warm processes waiting for an episode."""
        return [
            p.pid
            for conns in self._idle.values()
            for c in conns
            for p in c.processes
            if p.is_alive()
        ]

    async def acquire(self, name: str) -> ServerConnection:
        """A healthy, connected server ``name``: a warm one when any passes the check, else a new one.

        Raises:
            SandboxError: spawning a new process failed after its retries (system error).
            KeyError: ``name`` is not in the config.
        """
        self._bind_loop()
        idle = self._idle.setdefault(name, [])
        while idle:
            conn = idle.pop()
            if not await conn.ping(self.ping_timeout_s):
                await self._retire(conn)
                continue
            claim = self.ledger.claim(name, unchecked=self._unchecked(name))
            if claim == "fresh":  # another episode runs this server's canary
                idle.append(conn)
                break
            conn.canary = claim == "canary"
            self.counts["reused"] += 1
            return conn
        return await self._spawn(name)

    async def retire_reuse(self, name: str, reason: str) -> None:
        """The canary failed: no more reuse of ``name`` this campaign; its warm processes are retired."""
        self.ledger.retire(name, reason)
        idle = self._idle.pop(name, [])
        await asyncio.gather(*(self._retire(c) for c in idle), return_exceptions=True)

    async def release(self, conn: ServerConnection, *, reusable: bool = True) -> None:
        """End ``conn``'s episode: teardown, then keep it warm or retire it. Never raises.

        Args:
            conn: a connection from :meth:`acquire`.
            reusable: False when the episode saw a fault on this server (e.g. a
                failed init); the process is then retired.
        """
        served = self._episodes.get(id(conn), 0) + 1
        self._episodes[id(conn)] = served
        attempted = conn.state == "ready"  # a poisoned server gets its teardown try at retirement
        torn_down = attempted and await self._teardown(conn)
        keep = (
            torn_down
            and reusable
            and conn.state == "ready"
            and served < self._cap(conn.name)
            and self.ledger.allowed(conn.name)
        )
        if keep and INIT_TOOL in conn.tools and conn.loop is self._loop:
            self._idle.setdefault(conn.name, []).append(conn)
        else:
            await self._retire(conn, teardown=not attempted)

    async def aclose(self) -> None:
        """Retire every idle process and remove the pool's files; idempotent, never raises."""
        conns = [c for conns in self._idle.values() for c in conns]
        self._idle.clear()
        await asyncio.gather(*(self._retire(c) for c in conns), return_exceptions=True)
        _cleanup(self._procs, self._workdir)  # leased processes too: the campaign is over
        self._procs.clear()
        self._workdir.clear()
        self._episodes.clear()

    # ----- internals ---------------------------------------------------------
    def _unchecked(self, name: str) -> bool:
        server = self.config.servers.get(name)
        return isinstance(server, ProcessServer) and server.reuse_unchecked

    def _cap(self, name: str) -> int:
        server = self.config.servers.get(name)
        return server.episodes_per_process if isinstance(server, ProcessServer) else 1

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return
        stale = [p for conns in self._idle.values() for c in conns for p in c.processes]
        if stale:
            logger.info(
                "server pool moved to a new event loop; dropping %d warm process(es)", len(stale)
            )
            kill_now(stale)
        self._idle.clear()
        self._episodes.clear()
        self._loop = loop

    def _dir(self) -> Path:
        if not self._workdir:
            self._workdir.append(Path(tempfile.mkdtemp(prefix="rewardbox-pool-")))
        path = Path(
            tempfile.mkdtemp(dir=self._workdir[0])
        )  # one per process: pidfiles and stderr log
        return path

    async def _spawn(self, name: str) -> ServerConnection:
        conn = ServerConnection(
            name,
            self.config.get(name),
            workdir=self._dir(),
            timeouts=self.timeouts,
            connect_attempts=self.connect_attempts,
            mode=self.mode,
            source=self.config.source,
        )
        try:
            await conn.connect()
        finally:
            self._procs[:] = [p for p in self._procs if p.is_alive()]
            self._procs.extend(conn.processes)
        self.counts["spawned"] += 1
        return conn

    async def _teardown(self, conn: ServerConnection) -> bool:
        if TEARDOWN_TOOL not in conn.tools:
            return True
        try:
            await conn.call(TEARDOWN_TOOL, {}, self.timeouts.teardown_s)
        except Exception as exc:  # noqa: BLE001 - a failed teardown retires the process
            logger.warning("server %s: teardown failed, retiring the process: %s", conn.name, exc)
            return False
        return True

    async def _retire(self, conn: ServerConnection, *, teardown: bool = False) -> None:
        """End a process now: its state is torn down (or ``teardown`` asks for it first), so no exit grace."""
        self._episodes.pop(id(conn), None)
        self.counts["retired"] += 1
        if conn.loop is not None and conn.loop is not asyncio.get_running_loop():
            kill_now(conn.processes)  # its transport lives on another loop; nothing to await here
        else:
            await conn.shutdown(TEARDOWN_TOOL if teardown else None, torn_down=True)
        shutil.rmtree(conn.workdir, ignore_errors=True)


class ExternalSandboxFactory:
    """Makes one :class:`~rewardbox.sandbox.external.ExternalSandbox` per episode, sharing a warm pool
    and the server templates (``rewardbox.sandbox.template``).

    Args:
        config: the servers config.
        timeouts: per-phase limits.
        **options: passed to ``ExternalSandbox`` (``connect_attempts``, ``mode``).

    Picklable: a copy gets its own, empty pool. Call :meth:`aclose` on the
    event loop that ran the episodes when the campaign ends.
    """

    def __init__(
        self, config: ServersConfig, *, timeouts: SandboxTimeouts | None = None, **options: Any
    ):
        self.config, self.timeouts, self.options = config, timeouts, options
        self.pool = ServerPool(
            config,
            timeouts=timeouts,
            connect_attempts=options.get("connect_attempts", 3),
            mode=options.get("mode", "legacy"),
        )
        self.templates = TemplateSet(config, ready_timeout_s=(timeouts or SandboxTimeouts()).init_s)

    def __call__(self) -> Any:
        from rewardbox.sandbox.external import ExternalSandbox

        return ExternalSandbox(
            self.config,
            timeouts=self.timeouts,
            pool=self.pool,
            templates=self.templates,
            **self.options,
        )

    def report(self) -> dict[str, dict[str, Any]]:
        """Per server seen: how its processes were made and what the reuse canary found.

        ``{server: {"start": "template" | "fresh: <reason>", "reuse": <ledger status>,
        "retired": <reason>}}`` (keys present when known); pool counts under ``"(pool)"``.
        """
        out: dict[str, dict[str, Any]] = {}
        for name, start in self.templates.report().items():
            out.setdefault(name, {})["start"] = start
        for name, status in self.pool.ledger.report().items():
            out.setdefault(name, {})["reuse"] = status
        for name, reason in self.pool.ledger.retired.items():
            out[name]["retired"] = reason
        out["(pool)"] = dict(self.pool.counts)
        return out

    async def aclose(self) -> None:
        """Retire the pool's warm processes (see :meth:`ServerPool.aclose`) and end the templates."""
        try:
            await self.pool.aclose()
        finally:
            self.templates.close()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_factory, (self.config, self.timeouts, self.options))


def _rebuild_factory(
    config: ServersConfig, timeouts: SandboxTimeouts | None, options: dict[str, Any]
):
    return ExternalSandboxFactory(config, timeouts=timeouts, **options)
