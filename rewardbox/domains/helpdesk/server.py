"""The IT helpdesk MCP server: ``build_server()`` in-process, ``python -m`` over stdio.

``python -m rewardbox.domains.helpdesk.server`` serves a fresh helpdesk server on
stdio, so it can be an ``mcp-process`` entry of a ThinkingBox ``servers.yaml``:
``{type: mcp-process, command: "{python} -m rewardbox.domains.helpdesk.server"}``.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

from rewardbox.domains.helpdesk.domain import DOMAIN, SERVER_NAME
from rewardbox.domains.server import build_domain_server

__all__ = ["SERVER_NAME", "build_server", "main"]


def build_server() -> MCPServer:
    """A fresh helpdesk MCP server with its own private database state."""
    return build_domain_server(DOMAIN)


def main() -> None:
    """Serve one helpdesk server on stdio until stdin closes."""
    build_server().run("stdio")


if __name__ == "__main__":
    main()
