"""The MCP server of an embedded domain, with the ThinkingBox reserved tools.

``python -m rewardbox.domains.server retail`` (or ``hotel``, ``helpdesk``) serves a fresh
server of that domain on stdio, so it can be an ``mcp-process`` entry of a ThinkingBox
``servers.yaml``: ``{type: mcp-process, command: "{python} -m rewardbox.domains.server retail"}``.

``build_domain_server(domain)`` returns a FRESH ``MCPServer`` (official ``mcp``
SDK, 2.x) with a fresh episode state: nothing is shared between two servers, so
no episode ever sees another's writes. Tools return ``strict_json.dumps(result)``; a
tool's own error (not found, invalid state, invalid arguments) is ordinary output
``{"error": "...", "tool": name}`` (docs/thinkingbox.md, "Server effects and golden state").

Reserved tools (docs/thinkingbox.md, "Reserved tools"), hidden from the agent by the sandbox:

* ``__reserved__init(config)``: new database (seed + ``config.data_patch``),
  stores ``config.golden_test_case.tool_interactions``; replies ``{}``, or
  ``{"status": "error", "error": ...}`` when the patch or golden block is invalid.
* ``__reserved__geteffects()``: ``compute_effects`` (initial, result and golden
  states, their hashes and the diff; ``golden_error`` when the golden state
  cannot be built); ``{"status": "error", ...}`` on an internal failure.
* ``__reserved__teardown()``: disposes the database; replies ``{}``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError

from rewardbox import strict_json
from rewardbox.domains.base import (
    DataPatchError,
    Domain,
    ToolRunner,
    format_validation_error,
    public_signature,
    to_json,
)
from rewardbox.domains.database import EpisodeDatabase
from rewardbox.domains.golden import build_golden_state, compute_effects, golden_interactions

RESERVED_PREFIX = "__reserved__"

logger = logging.getLogger(__name__)


class DomainMCPServer(MCPServer):
    """``MCPServer`` whose argument-validation failures are ordinary tool output.

    The SDK reports invalid arguments as an ``is_error`` result with its own
    wording; ThinkingBox servers reply ``{"error": "...", "tool": name}`` instead,
    which is what the agent should see. Unknown tools keep the SDK's behaviour.
    """

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError) and self._tool_manager.get_tool(name) is not None:
                text = strict_json.dumps({"error": format_validation_error(cause), "tool": name})
                return CallToolResult(content=[TextContent(type="text", text=text)])
            raise


class EpisodeState:
    """The state of one server instance: its database and the task's init config."""

    def __init__(self, runner: ToolRunner):
        self.runner = runner
        self.db: EpisodeDatabase | None = None
        self.initial_state: dict[str, Any] | None = None
        self.data_patch: Mapping[str, Any] | None = None
        self.interactions: list[dict[str, Any]] = []
        self._golden: tuple[dict[str, Any] | None, str | None] | None = None

    def init(self, config: Mapping[str, Any] | None) -> None:
        """Fresh database from seed + ``data_patch``; remember the golden interactions.

        Raises:
            DataPatchError: invalid ``data_patch`` or ``golden_test_case``.
        """
        config = config or {}
        if not isinstance(config, Mapping):
            raise DataPatchError(f"init config must be a mapping, got {type(config).__name__}")
        interactions = golden_interactions(config.get("golden_test_case"))
        db = EpisodeDatabase(self.runner.domain, config.get("data_patch"))
        self.teardown()
        self.db, self.data_patch, self.interactions = db, config.get("data_patch"), interactions
        self.initial_state = db.initial_state  # dumped once per task (the prepared image)
        self._golden = None

    def ensure_db(self) -> EpisodeDatabase:
        """The database; a tool called before init gets the seed-only database."""
        if self.db is None:
            self.init({})
        assert self.db is not None
        return self.db

    def effects(self) -> dict[str, Any]:
        """The ``geteffects`` payload (see ``compute_effects``)."""
        db = self.ensure_db()
        if self._golden is None:  # fixed after init: built once, on the first request
            self._golden = build_golden_state(self.runner, self.data_patch, self.interactions)
        return compute_effects(self.runner, self.initial_state or {}, db.dump(), self._golden)

    def teardown(self) -> None:
        """Dispose the database (idempotent)."""
        if self.db is not None:
            self.db.dispose()
            self.db = None


@functools.lru_cache(maxsize=16)
def tool_runner(domain: Domain) -> ToolRunner:
    """The (stateless, cached) tool runner of a domain."""
    return ToolRunner(domain)


def _tool_handler(
    state: EpisodeState, name: str, fn: Callable[..., Any], describe: bool
) -> Callable[..., Any]:
    """An async handler running tool ``name`` on ``state``'s database (arguments already validated).

    With ``describe``, the handler carries the tool's public signature and
    docstring, from which the SDK builds the schema (done once per domain).
    """

    async def handler(**kwargs: Any) -> str:
        payload, _failed = state.runner.execute(state.ensure_db().engine, name, kwargs)
        return to_json(payload)

    handler.__name__ = name
    if describe:
        handler.__signature__ = public_signature(fn)  # type: ignore[attr-defined]
        handler.__doc__ = inspect.getdoc(fn)
    return handler


def _reserved_handlers(state: EpisodeState) -> dict[str, Callable[..., Any]]:
    async def reserved_init(config: dict[str, Any] | None = None) -> str:
        try:
            state.init(config)
        except DataPatchError as exc:
            return strict_json.dumps({"status": "error", "error": f"init failed: {exc}"})
        return "{}"

    async def reserved_geteffects() -> str:
        try:
            return to_json(await anyio.to_thread.run_sync(state.effects))
        except Exception as exc:  # boundary: reported to the sandbox, which raises SandboxError
            logger.exception("geteffects failed")
            return strict_json.dumps({"status": "error", "error": f"{type(exc).__name__}: {exc}"})

    async def reserved_teardown() -> str:
        state.teardown()
        return "{}"

    return {
        RESERVED_PREFIX + "init": reserved_init,
        RESERVED_PREFIX + "geteffects": reserved_geteffects,
        RESERVED_PREFIX + "teardown": reserved_teardown,
    }


def _handlers(state: EpisodeState, describe: bool = False) -> dict[str, Callable[..., Any]]:
    """Every tool of one server instance, bound to its episode state."""
    out = {
        name: _tool_handler(state, name, fn, describe)
        for name, fn in state.runner.functions.items()
    }
    out.update(_reserved_handlers(state))
    return out


@functools.lru_cache(maxsize=16)
def _tool_templates(domain: Domain) -> tuple[Tool, ...]:
    """SDK ``Tool`` records (schemas, argument models) built once per domain.

    Building argument models is most of the cost of a server; each new server
    copies these records and swaps in handlers bound to its own state.
    """
    donor = _handlers(EpisodeState(tool_runner(domain)), describe=True)
    return tuple(
        Tool.from_function(
            fn, name=name, description=inspect.getdoc(fn) or name, structured_output=False
        )
        for name, fn in donor.items()
    )


def build_domain_server(domain: Domain) -> MCPServer:
    """A fresh MCP server with a fresh, private episode state.

    Args:
        domain: the domain whose tools to serve.

    Returns:
        An ``MCPServer`` exposing the domain's tools (described by their
        docstrings) and the three reserved tools. Connect in-process with
        ``mcp.Client(server)`` or run over stdio with ``server.run("stdio")``.
    """
    state = EpisodeState(tool_runner(domain))
    handlers = _handlers(state)
    tools = [t.model_copy(update={"fn": handlers[t.name]}) for t in _tool_templates(domain)]
    return DomainMCPServer(name=domain.server_name, tools=tools, log_level="WARNING")


def build_server(domain_name: str) -> MCPServer:
    """A fresh MCP server of the embedded domain ``domain_name`` (``retail``, ``hotel``, ``helpdesk``).

    Raises:
        ModuleNotFoundError: no embedded domain of that name.
    """
    return build_domain_server(
        importlib.import_module(f"rewardbox.domains.{domain_name}.domain").DOMAIN
    )


def main(argv: list[str] | None = None) -> None:
    """Serve one fresh server of the domain named on the command line on stdio until stdin closes."""
    from rewardbox.domains.registry import DOMAIN_SERVERS

    parser = argparse.ArgumentParser(
        prog="python -m rewardbox.domains.server",
        description="Serve an embedded domain's MCP server on stdio.",
    )
    parser.add_argument("domain", choices=sorted(DOMAIN_SERVERS))
    build_server(parser.parse_args(argv).domain).run("stdio")


if __name__ == "__main__":
    main()
