"""The process-reuse half of ``ExternalSandbox.start``: template forks and their fallback, and the
canary that checks a reused process against a fresh one (docs/external_servers.md).

:class:`ReuseMixin` is a base of :class:`rewardbox.sandbox.external.ExternalSandbox` and works on
its state: ``config``, ``timeouts``, ``events``, ``_pool``, ``_templates``, ``_conns``,
``_pooled``, ``_procs`` and ``_fresh()``.
"""

from __future__ import annotations

from typing import Any

from rewardbox.sandbox.canary import canary_verdict
from rewardbox.sandbox.config import SandboxTimeouts
from rewardbox.sandbox.connection import ServerConnection
from rewardbox.sandbox.pool import ServerPool
from rewardbox.sandbox.reaper import TrackedProcess
from rewardbox.sandbox.reserved import (
    EFFECTS_TOOL,
    INIT_TOOL,
    TEARDOWN_TOOL,
    first_text,
    parse_effects_reply,
    parse_init_reply,
)
from rewardbox.sandbox.servers_config import ProcessServer, ServersConfig
from rewardbox.sandbox.template import TemplateSet


class ReuseMixin:
    """Template forks, fallbacks and the canary of :class:`~rewardbox.sandbox.external.ExternalSandbox`."""

    config: ServersConfig
    timeouts: SandboxTimeouts
    events: list[str]
    _pool: ServerPool | None
    _templates: TemplateSet | None
    _conns: list[ServerConnection]
    _pooled: dict[str, ServerConnection]
    _procs: list[TrackedProcess]

    def _fresh(self, name: str) -> ServerConnection:
        """A new, unconnected connection of server ``name`` (``ExternalSandbox`` defines it)."""
        raise NotImplementedError

    def _abandon_canaries(self) -> None:
        """A start that failed before a canary's check hands that canary to the next episode."""
        for conn in self._conns:
            if isinstance(conn, ServerConnection) and conn.canary and self._pool is not None:
                conn.canary = False
                self._pool.ledger.abandon(conn.name)

    async def _fork_if_templated(self, conn: ServerConnection) -> None:
        """Point ``conn`` at its server's template when there is one and the canary allows it."""
        if (
            self._templates is None
            or self._pool is None
            or not isinstance(conn.config, ProcessServer)
        ):
            return
        attach = await self._templates.attach_argv(conn.name)
        if attach is None:
            self._fallback_event(conn.name)
            return
        claim = self._pool.ledger.claim(conn.name, unchecked=conn.config.reuse_unchecked)
        if claim != "fresh":
            conn.use_template(attach)
            conn.canary = claim == "canary"

    def _fallback_event(self, name: str) -> None:
        """Record a server's template fallback in this episode's events, once per campaign."""
        assert self._templates is not None
        if name in self._templates.new_fallbacks:
            self._templates.new_fallbacks.remove(name)
            self.events.append(
                f"sandbox: server {name}: no template, fresh processes from now on: "
                f"{self._templates.fallbacks[name]}"
            )

    async def _canary(
        self, index: int, conn: ServerConnection, arguments: dict[str, Any] | None
    ) -> None:
        """Check a reused process right after init against a fresh one (``rewardbox.sandbox.canary``).

        On a mismatch the fresh process serves this episode and reuse of the server is retired.
        ``arguments`` None: the server has no ``__reserved__init``; both are compared right after connect.
        """
        assert self._pool is not None
        ledger, fresh = self._pool.ledger, None
        try:
            reused = await self._effects_of(conn)
            fresh = self._fresh(conn.name)
            try:
                await fresh.connect()
            finally:
                self._procs.extend(p for p in fresh.processes if p not in self._procs)
            if arguments is not None:
                parse_init_reply(
                    conn.name,
                    first_text(await fresh.call(INIT_TOOL, arguments, self.timeouts.init_s)),
                )
            server = self.config.get(conn.name)
            verdict = canary_verdict(
                reused,
                await self._effects_of(fresh),
                unchecked_ok=getattr(server, "reuse_unchecked", False),
            )
        except BaseException:
            ledger.abandon(conn.name)
            if fresh is not None:
                await fresh.shutdown(None)
            raise
        conn.canary = False
        if verdict is None:
            ledger.passed(conn.name)
            await fresh.shutdown(TEARDOWN_TOOL)
            return
        await self._pool.retire_reuse(conn.name, verdict)
        self.events.append(f"sandbox: server {conn.name}: reuse retired by the canary: {verdict}")
        self._conns[index] = fresh
        await self._drop_reused(conn)

    async def _effects_of(self, conn: ServerConnection) -> dict[str, Any]:
        if EFFECTS_TOOL not in conn.tools:
            return {}
        return parse_effects_reply(
            first_text(await conn.call(EFFECTS_TOOL, {}, self.timeouts.effects_s))
        )

    async def _drop_reused(self, conn: ServerConnection) -> None:
        """End a reused process the canary found unfit (back to the pool as not reusable, or shut down)."""
        assert self._pool is not None
        if self._pooled.get(conn.name) is conn:
            del self._pooled[conn.name]
            await self._pool.release(conn, reusable=False)
        else:
            self._procs.extend(p for p in conn.processes if p not in self._procs)
            await conn.shutdown(TEARDOWN_TOOL)
