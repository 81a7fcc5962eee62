"""A server that needs a search service at init: the error a user sees when it is missing."""

from __future__ import annotations

import asyncio
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rewardbox.errors import SandboxError
from rewardbox.sandbox.external import ExternalSandbox
from rewardbox.sandbox.servers_config import parse_servers_config

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "servers" / "search_backed_server.py"
WORLD = {
    "search_backed": {"sources": [{"name": "Refunds.md", "snippets": ["Refunds within 30 days."]}]}
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sandbox(port: int) -> ExternalSandbox:
    config = parse_servers_config(
        {
            "servers": {
                "search_backed": {
                    "type": "mcp-process",
                    "command": f"{{python}} {FIXTURE}",
                    "env": {"SEARCH_PORT": str(port)},
                }
            }
        },
        source="t.yaml",
    )
    return ExternalSandbox(config)


async def _start(port: int) -> dict:
    sandbox = _sandbox(port)
    try:
        return await sandbox.start(WORLD, ["search_policy"])
    finally:
        await sandbox.close()


def test_missing_search_service_is_a_sandbox_error_naming_the_server_and_port():
    port = _free_port()
    with pytest.raises(SandboxError) as info:
        asyncio.run(_start(port))
    # the SDK hides the server's exception text: this exact line is what a user sees (docs/external_servers.md)
    assert (
        str(info.value)
        == "__reserved__init of server 'search_backed' failed: Error executing tool __reserved__init"
    )


def test_with_the_search_service_up_init_succeeds():
    class Health(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server API
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    service = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=service.serve_forever, daemon=True).start()
    try:
        assert asyncio.run(_start(service.server_port)) == {"search_backed": {}}
    finally:
        service.shutdown()
        service.server_close()
